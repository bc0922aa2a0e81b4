// NVML (libnvidia-ml.so.1) through dlopen, for the SM clock seen during a measurement. Optional: when
// NVML is absent every query says the clock is unknown.
#pragma once
#include <string>

namespace kt {
namespace cuda {

/// Current SM clock in MHz of the GPU with this CUDA UUID (32 hex chars, as DeviceInfo::uuid), or -1
/// when NVML is not available or the query fails (*why, if given, says why). Never throws.
int sm_clock_mhz(const std::string& cuda_uuid, std::string* why = nullptr);

}  // namespace cuda
}  // namespace kt
