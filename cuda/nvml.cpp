#include "cuda/nvml.h"

#include <dlfcn.h>

#include <mutex>

namespace kt {
namespace cuda {
namespace {

// The few NVML entry points used, declared here (nvml.h is not needed): NVML API reference,
// nvmlInit_v2, nvmlDeviceGetHandleByUUID, nvmlDeviceGetClockInfo (NVML_CLOCK_SM = 1).
using nvmlDevice_t = void*;
using InitFn = int (*)();
using ByUuidFn = int (*)(const char*, nvmlDevice_t*);
using ClockFn = int (*)(nvmlDevice_t, int, unsigned*);

struct Nvml {
  bool ok = false;
  std::string why;
  ByUuidFn by_uuid = nullptr;
  ClockFn clock = nullptr;
};

const Nvml& nvml() {
  static const Nvml n = [] {
    Nvml r;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      r.why = "libnvidia-ml.so.1 not found";
      return r;
    }
    auto init = reinterpret_cast<InitFn>(dlsym(lib, "nvmlInit_v2"));
    r.by_uuid = reinterpret_cast<ByUuidFn>(dlsym(lib, "nvmlDeviceGetHandleByUUID"));
    r.clock = reinterpret_cast<ClockFn>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    if (!init || !r.by_uuid || !r.clock) {
      r.why = "NVML lacks nvmlInit_v2/nvmlDeviceGetHandleByUUID/nvmlDeviceGetClockInfo";
      return r;
    }
    if (int rc = init(); rc != 0) {
      r.why = "nvmlInit_v2 failed with " + std::to_string(rc);
      return r;
    }
    r.ok = true;
    return r;
  }();
  return n;
}

}  // namespace

int sm_clock_mhz(const std::string& uuid, std::string* why) {
  const Nvml& n = nvml();
  if (!n.ok) {
    if (why) *why = n.why;
    return -1;
  }
  if (uuid.size() != 32) {
    if (why) *why = "CUDA uuid must be 32 hex characters";
    return -1;
  }
  // NVML's form: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
  const std::string nv = "GPU-" + uuid.substr(0, 8) + "-" + uuid.substr(8, 4) + "-" + uuid.substr(12, 4) + "-" +
                         uuid.substr(16, 4) + "-" + uuid.substr(20, 12);
  nvmlDevice_t dev = nullptr;
  if (int rc = n.by_uuid(nv.c_str(), &dev); rc != 0) {
    if (why) *why = "nvmlDeviceGetHandleByUUID(" + nv + ") failed with " + std::to_string(rc);
    return -1;
  }
  unsigned mhz = 0;
  if (int rc = n.clock(dev, 1 /* NVML_CLOCK_SM */, &mhz); rc != 0) {
    if (why) *why = "nvmlDeviceGetClockInfo failed with " + std::to_string(rc);
    return -1;
  }
  return static_cast<int>(mhz);
}

}  // namespace cuda
}  // namespace kt
