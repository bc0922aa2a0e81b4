#include "generator/nvrtc.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace kt {
namespace {

template <class F>
void load_symbol(void* lib, const char* name, F& out) {
  void* p = dlsym(lib, name);
  if (!p) throw std::runtime_error(std::string("NVRTC library lacks symbol ") + name);
  out = reinterpret_cast<F>(p);
}

NvrtcApi load() {
  std::vector<std::string> candidates = {"libnvrtc.so.13"};
  if (const char* home = std::getenv("CUDA_HOME"); home && *home)
    candidates.push_back(std::string(home) + "/lib64/libnvrtc.so.13");
  candidates.push_back("/usr/local/cuda/lib64/libnvrtc.so.13");
  void* lib = nullptr;
  std::string tried;
  for (const auto& c : candidates) {
    lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
    tried += "\n  " + c + ": " + dlerror();
  }
  if (!lib)
    throw std::runtime_error(
        "NVRTC (libnvrtc.so.13) could not be loaded: install the CUDA 13 toolkit (set CUDA_HOME when it is not at "
        "/usr/local/cuda) or the nvidia-cuda-nvrtc wheel (pip install 'nvidia-cuda-nvrtc>=13,<14', which the kerntune "
        "Python package loads when no toolkit is found); tried:" +
        tried);
  NvrtcApi a{};
  load_symbol(lib, "nvrtcVersion", a.Version);
  load_symbol(lib, "nvrtcGetErrorString", a.GetErrorString);
  load_symbol(lib, "nvrtcCreateProgram", a.CreateProgram);
  load_symbol(lib, "nvrtcDestroyProgram", a.DestroyProgram);
  load_symbol(lib, "nvrtcCompileProgram", a.CompileProgram);
  load_symbol(lib, "nvrtcGetProgramLogSize", a.GetProgramLogSize);
  load_symbol(lib, "nvrtcGetProgramLog", a.GetProgramLog);
  load_symbol(lib, "nvrtcGetCUBINSize", a.GetCUBINSize);
  load_symbol(lib, "nvrtcGetCUBIN", a.GetCUBIN);
  load_symbol(lib, "nvrtcAddNameExpression", a.AddNameExpression);
  load_symbol(lib, "nvrtcGetLoweredName", a.GetLoweredName);
  return a;
}

}  // namespace

const NvrtcApi& nvrtc() {
  static const NvrtcApi api = load();
  return api;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtc().Version(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

}  // namespace kt
