// NVRTC loaded with dlopen (libnvrtc.so.13), so binaries that only load cubins from a database or
// the cache start without the CUDA toolkit.
#pragma once
#include <nvrtc.h>

#include <string>

namespace kt {

/// Function table of the NVRTC entry points kerntune uses.
struct NvrtcApi {
  decltype(&::nvrtcVersion) Version;
  decltype(&::nvrtcGetErrorString) GetErrorString;
  decltype(&::nvrtcCreateProgram) CreateProgram;
  decltype(&::nvrtcDestroyProgram) DestroyProgram;
  decltype(&::nvrtcCompileProgram) CompileProgram;
  decltype(&::nvrtcGetProgramLogSize) GetProgramLogSize;
  decltype(&::nvrtcGetProgramLog) GetProgramLog;
  decltype(&::nvrtcGetCUBINSize) GetCUBINSize;
  decltype(&::nvrtcGetCUBIN) GetCUBIN;
  decltype(&::nvrtcAddNameExpression) AddNameExpression;
  decltype(&::nvrtcGetLoweredName) GetLoweredName;
};

/// Loads NVRTC once (thread-safe): libnvrtc.so.13 from the loader path, else
/// $CUDA_HOME/lib64/libnvrtc.so.13, else /usr/local/cuda/lib64/libnvrtc.so.13.
/// Throws std::runtime_error listing the places tried when none loads.
const NvrtcApi& nvrtc();

/// "13.0"
std::string nvrtc_version();

}  // namespace kt
