// CUDA Driver API through dlopen: see driver.h.
#include "cuda/driver.h"

#include <atomic>

#include <dlfcn.h>

#include <exception>
#include <mutex>

namespace kt::cuda {
namespace {

constexpr const char* kLibName = "libcuda.so.1";

// Codes we can name without a driver (used when libcuda is absent, so messages stay useful).
struct KnownCode {
  CUresult code;
  const char* name;
  const char* text;
};
constexpr KnownCode kKnownCodes[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
     "too many resources requested for launch"},
    {CUDA_ERROR_LAUNCH_TIMEOUT, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_MISALIGNED_ADDRESS, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
    {CUDA_ERROR_ILLEGAL_INSTRUCTION, "CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"},
    {CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
     "the provided PTX was compiled with an unsupported toolchain."},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

// The process-wide loader state: filled exactly once (std::call_once), never unloaded.
struct Loader {
  void* handle = nullptr;  // dlopen handle, non-null once the library opened (even if init failed)
  Api api{};
  bool ok = false;
  // Failure, when !ok: one of these is set.
  std::string load_error;               // library/symbol problem (std::runtime_error)
  CUresult init_result = CUDA_SUCCESS;  // cuInit failure (CudaError)
};

Loader& loader_storage() {
  static Loader l;
  return l;
}

template <class Fn>
bool resolve(void* h, Fn& out, std::initializer_list<const char*> symbols, std::string* missing) {
  for (const char* s : symbols) {
    if (void* p = dlsym(h, s)) {
      out = reinterpret_cast<Fn>(p);
      return true;
    }
  }
  *missing = *symbols.begin();
  return false;
}

void load(Loader& l) {
  l.handle = dlopen(kLibName, RTLD_NOW | RTLD_LOCAL);
  if (!l.handle) {
    const char* e = dlerror();
    l.load_error =
        std::string(kLibName) + " not found: no NVIDIA driver on this machine (" + (e ? e : "dlopen failed") + ")";
    return;
  }
  Api& a = l.api;
  std::string missing;
  bool ok = true;
  // Symbol names are the real exported ones (cuda.h maps the API names onto these).
#define KT_RESOLVE(member, ...) ok = ok && resolve(l.handle, a.member, {__VA_ARGS__}, &missing)
  KT_RESOLVE(cuGetErrorName, "cuGetErrorName");
  KT_RESOLVE(cuGetErrorString, "cuGetErrorString");
  KT_RESOLVE(cuInit, "cuInit");
  KT_RESOLVE(cuDriverGetVersion, "cuDriverGetVersion");
  KT_RESOLVE(cuDeviceGetCount, "cuDeviceGetCount");
  KT_RESOLVE(cuDeviceGet, "cuDeviceGet");
  KT_RESOLVE(cuDeviceGetName, "cuDeviceGetName");
  KT_RESOLVE(cuDeviceGetAttribute, "cuDeviceGetAttribute");
  KT_RESOLVE(cuDeviceGetUuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid");
  KT_RESOLVE(cuDeviceTotalMem, "cuDeviceTotalMem_v2");
  KT_RESOLVE(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  KT_RESOLVE(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  KT_RESOLVE(cuCtxSetCurrent, "cuCtxSetCurrent");
  KT_RESOLVE(cuCtxGetCurrent, "cuCtxGetCurrent");
  KT_RESOLVE(cuCtxGetDevice, "cuCtxGetDevice");
  KT_RESOLVE(cuCtxSynchronize, "cuCtxSynchronize");
  KT_RESOLVE(cuModuleLoadData, "cuModuleLoadData");
  KT_RESOLVE(cuModuleUnload, "cuModuleUnload");
  KT_RESOLVE(cuModuleGetFunction, "cuModuleGetFunction");
  KT_RESOLVE(cuFuncSetAttribute, "cuFuncSetAttribute");
  KT_RESOLVE(cuFuncGetAttribute, "cuFuncGetAttribute");
  KT_RESOLVE(cuLaunchKernel, "cuLaunchKernel");
  KT_RESOLVE(cuLaunchKernelEx, "cuLaunchKernelEx");
  KT_RESOLVE(cuMemAlloc, "cuMemAlloc_v2");
  KT_RESOLVE(cuMemFree, "cuMemFree_v2");
  KT_RESOLVE(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  KT_RESOLVE(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  KT_RESOLVE(cuMemcpyDtoD, "cuMemcpyDtoD_v2");
  KT_RESOLVE(cuMemsetD8, "cuMemsetD8_v2");
  KT_RESOLVE(cuMemsetD16, "cuMemsetD16_v2");
  KT_RESOLVE(cuMemsetD32, "cuMemsetD32_v2");
  KT_RESOLVE(cuMemsetD8Async, "cuMemsetD8Async");
  KT_RESOLVE(cuEventCreate, "cuEventCreate");
  KT_RESOLVE(cuEventRecord, "cuEventRecord");
  KT_RESOLVE(cuEventSynchronize, "cuEventSynchronize");
  KT_RESOLVE(cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime");
  KT_RESOLVE(cuEventDestroy, "cuEventDestroy_v2");
  KT_RESOLVE(cuStreamCreate, "cuStreamCreate");
  KT_RESOLVE(cuStreamDestroy, "cuStreamDestroy_v2");
  KT_RESOLVE(cuStreamSynchronize, "cuStreamSynchronize");
  KT_RESOLVE(cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  KT_RESOLVE(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled");
#undef KT_RESOLVE
  if (!ok) {
    l.load_error = "symbol " + missing + " not found in " + kLibName + " (NVIDIA driver too old for kerntune?)";
    // Keep the error functions if they resolved, so error messages still use the driver's text.
    return;
  }
  CUresult r = a.cuInit(0);
  if (r != CUDA_SUCCESS) {
    l.init_result = r;
    return;
  }
  l.ok = true;
}

// Loads on first use; never throws (except std::bad_alloc).
const Loader& loader() {
  static std::once_flag once;
  std::call_once(once, [] { load(loader_storage()); });
  return loader_storage();
}

const KnownCode* find_known(CUresult r) {
  for (const auto& k : kKnownCodes)
    if (k.code == r) return &k;
  return nullptr;
}

}  // namespace

std::string error_name(CUresult r) {
  try {
    const Loader& l = loader();
    const char* s = nullptr;
    if (l.api.cuGetErrorName && l.api.cuGetErrorName(r, &s) == CUDA_SUCCESS && s) return s;
    if (const KnownCode* k = find_known(r)) return k->name;
    return "CUDA_ERROR_" + std::to_string(static_cast<int>(r));
  } catch (...) {
    return "CUDA_ERROR_" + std::to_string(static_cast<int>(r));
  }
}

std::string error_string(CUresult r) {
  try {
    const Loader& l = loader();
    const char* s = nullptr;
    if (l.api.cuGetErrorString && l.api.cuGetErrorString(r, &s) == CUDA_SUCCESS && s) return s;
    if (const KnownCode* k = find_known(r)) return k->text;
    return "unknown error";
  } catch (...) {
    return "unknown error";
  }
}

CudaError::CudaError(CUresult c, const std::string& call)
    : std::runtime_error(call + " failed: " + error_name(c) + " (" + error_string(c) + ")"), code(c) {}

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) throw CudaError(r, what ? what : "CUDA driver call");
}

const Api& api() {
  const Loader& l = loader();
  if (l.ok) return l.api;
  if (!l.load_error.empty()) throw std::runtime_error(l.load_error);
  throw CudaError(l.init_result, "cuInit");
}

bool gpu_available(std::string* why) {
  auto fail = [&](std::string msg) {
    if (why) *why = std::move(msg);
    return false;
  };
  try {
    const Api& a = api();
    int n = 0;
    CUresult r = a.cuDeviceGetCount(&n);
    if (r != CUDA_SUCCESS) return fail(CudaError(r, "cuDeviceGetCount").what());
    if (n <= 0) return fail("no CUDA devices (cuDeviceGetCount returned 0)");
    if (why) why->clear();
    return true;
  } catch (const std::exception& e) {
    return fail(e.what());
  } catch (...) {
    return fail("unknown error while loading the CUDA driver");
  }
}

int current_sm_count() {
  const Api& a = api();
  CUdevice dev = 0;
  check(a.cuCtxGetDevice(&dev), "cuCtxGetDevice (current_sm_count needs a current context)");
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices];  // 0 = not read yet
  if (dev >= 0 && dev < kMaxDevices) {
    const int v = cache[dev].load(std::memory_order_relaxed);
    if (v > 0) return v;
  }
  int v = 0;
  check(a.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
        "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  if (dev >= 0 && dev < kMaxDevices) cache[dev].store(v, std::memory_order_relaxed);
  return v;
}

DeviceInfo device_info(int ordinal) {
  const Api& a = api();
  DeviceInfo d;
  d.ordinal = ordinal;
  CUdevice dev = 0;
  check(a.cuDeviceGet(&dev, ordinal), ("cuDeviceGet(" + std::to_string(ordinal) + ")").c_str());
  char name[256] = {};
  check(a.cuDeviceGetName(name, sizeof(name) - 1, dev), "cuDeviceGetName");
  d.name = name;
  CUuuid uuid{};
  check(a.cuDeviceGetUuid(&uuid, dev), "cuDeviceGetUuid");
  static const char* hex = "0123456789abcdef";
  for (char c : uuid.bytes) {
    auto b = static_cast<unsigned char>(c);
    d.uuid += hex[b >> 4];
    d.uuid += hex[b & 15];
  }
  auto attr = [&](CUdevice_attribute at, const char* what) {
    int v = 0;
    check(a.cuDeviceGetAttribute(&v, at, dev), what);
    return v;
  };
  auto attr_opt = [&](CUdevice_attribute at) {  // -1 when unsupported (clock attributes in CUDA 13)
    int v = 0;
    return a.cuDeviceGetAttribute(&v, at, dev) == CUDA_SUCCESS ? v : -1;
  };
  d.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)");
  d.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)");
  d.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  d.l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "cuDeviceGetAttribute(L2_CACHE_SIZE)");
  d.max_smem_per_block_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                    "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)");
  d.clock_khz = attr_opt(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  d.mem_clock_khz = attr_opt(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
  size_t total = 0;
  check(a.cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem");
  d.total_mem_bytes = static_cast<long long>(total);
  check(a.cuDriverGetVersion(&d.driver_version), "cuDriverGetVersion");
  return d;
}

// ---- Context ----

Context::Context(int ordinal) {
  const Api& a = api();
  check(a.cuDeviceGet(&dev_, ordinal), ("cuDeviceGet(" + std::to_string(ordinal) + ")").c_str());
  check(a.cuDevicePrimaryCtxRetain(&ctx_, dev_), "cuDevicePrimaryCtxRetain");
  CUresult r = a.cuCtxSetCurrent(ctx_);
  if (r != CUDA_SUCCESS) {
    a.cuDevicePrimaryCtxRelease(dev_);
    throw CudaError(r, "cuCtxSetCurrent");
  }
}

Context::~Context() {
  if (!ctx_) return;
  const Api& a = api();  // cannot throw: the constructor succeeded
  CUcontext cur = nullptr;
  if (a.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx_) a.cuCtxSetCurrent(nullptr);
  a.cuDevicePrimaryCtxRelease(dev_);
}

void Context::make_current() const { check(api().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent"); }

void Context::synchronize() const {
  make_current();
  check(api().cuCtxSynchronize(), "cuCtxSynchronize");
}

// ---- DeviceBuffer ----

DeviceBuffer::DeviceBuffer(size_t bytes) {
  if (bytes == 0) return;
  check(api().cuMemAlloc(&ptr_, bytes), ("cuMemAlloc(" + std::to_string(bytes) + " bytes)").c_str());
  bytes_ = bytes;
}

DeviceBuffer::~DeviceBuffer() { release(); }

void DeviceBuffer::release() noexcept {
  if (ptr_) api().cuMemFree(ptr_);  // api() cannot throw here: the allocation succeeded
  ptr_ = 0;
  bytes_ = 0;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = 0;
  o.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release();
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = 0;
    o.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, size_t bytes) {
  if (bytes > bytes_)
    throw std::invalid_argument("DeviceBuffer::upload: " + std::to_string(bytes) + " bytes into a buffer of " +
                                std::to_string(bytes_));
  if (bytes == 0) return;
  check(api().cuMemcpyHtoD(ptr_, host, bytes), "cuMemcpyHtoD");
  // A pageable-memory copy may return before its DMA lands, and it runs on the legacy stream, which
  // kernels on non-blocking streams do not wait for: finish it before returning.
  check(api().cuCtxSynchronize(), "cuCtxSynchronize");
}

void DeviceBuffer::download(void* host, size_t bytes) const {
  if (bytes > bytes_)
    throw std::invalid_argument("DeviceBuffer::download: " + std::to_string(bytes) + " bytes from a buffer of " +
                                std::to_string(bytes_));
  if (bytes == 0) return;
  check(api().cuCtxSynchronize(), "cuCtxSynchronize");  // kernels on non-blocking streams finish first
  check(api().cuMemcpyDtoH(host, ptr_, bytes), "cuMemcpyDtoH");
}

void DeviceBuffer::fill_u8(uint8_t value) {
  if (bytes_ == 0) return;
  check(api().cuMemsetD8(ptr_, value, bytes_), "cuMemsetD8");
  check(api().cuCtxSynchronize(), "cuCtxSynchronize");  // memsets are asynchronous, on the legacy stream
}

void DeviceBuffer::fill_u16(uint16_t value) {
  if (bytes_ % 2 != 0)
    throw std::invalid_argument("DeviceBuffer::fill_u16: size " + std::to_string(bytes_) + " is not a multiple of 2");
  if (bytes_ == 0) return;
  check(api().cuMemsetD16(ptr_, value, bytes_ / 2), "cuMemsetD16");
  check(api().cuCtxSynchronize(), "cuCtxSynchronize");  // memsets are asynchronous, on the legacy stream
}

void DeviceBuffer::fill_u32(uint32_t value) {
  if (bytes_ % 4 != 0)
    throw std::invalid_argument("DeviceBuffer::fill_u32: size " + std::to_string(bytes_) + " is not a multiple of 4");
  if (bytes_ == 0) return;
  check(api().cuMemsetD32(ptr_, value, bytes_ / 4), "cuMemsetD32");
  check(api().cuCtxSynchronize(), "cuCtxSynchronize");  // memsets are asynchronous, on the legacy stream
}

// ---- Module ----

Module::Module(const void* image) {
  if (!image) throw std::invalid_argument("Module: null image");
  check(api().cuModuleLoadData(&mod_, image), "cuModuleLoadData");
}

Module::~Module() {
  if (mod_) api().cuModuleUnload(mod_);
}

Module::Module(Module&& o) noexcept : mod_(o.mod_) { o.mod_ = nullptr; }

Module& Module::operator=(Module&& o) noexcept {
  if (this != &o) {
    if (mod_) api().cuModuleUnload(mod_);
    mod_ = o.mod_;
    o.mod_ = nullptr;
  }
  return *this;
}

CUfunction Module::function(const std::string& lowered_name) const {
  CUfunction f = nullptr;
  check(api().cuModuleGetFunction(&f, mod_, lowered_name.c_str()),
        ("cuModuleGetFunction(" + lowered_name + ")").c_str());
  return f;
}

// ---- Event ----

Event::Event() { check(api().cuEventCreate(&ev_, CU_EVENT_DEFAULT), "cuEventCreate"); }
Event::~Event() {
  if (ev_) api().cuEventDestroy(ev_);
}
void Event::record(CUstream stream) { check(api().cuEventRecord(ev_, stream), "cuEventRecord"); }
void Event::synchronize() const { check(api().cuEventSynchronize(ev_), "cuEventSynchronize"); }
float Event::elapsed_ms(const Event& start, const Event& end) {
  float ms = 0.f;
  check(api().cuEventElapsedTime(&ms, start.ev_, end.ev_), "cuEventElapsedTime");
  return ms;
}

// ---- Stream ----

Stream::Stream() { check(api().cuStreamCreate(&s_, CU_STREAM_NON_BLOCKING), "cuStreamCreate"); }
Stream::~Stream() {
  if (s_) api().cuStreamDestroy(s_);
}
void Stream::synchronize() const { check(api().cuStreamSynchronize(s_), "cuStreamSynchronize"); }

// ---- launch ----

void allow_wide_cluster(CUfunction f) {
  const Api& a = api();
  int width = 0;
  if (a.cuFuncGetAttribute(&width, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, f) == CUDA_SUCCESS && width > 8)
    check(a.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
          "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)");
}

void launch(CUfunction f, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x, unsigned smem_bytes,
            CUstream stream, const void* params) {
  const Api& a = api();
  if (smem_bytes > 48u * 1024u)
    check(a.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(smem_bytes)),
          ("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES=" + std::to_string(smem_bytes) + ")").c_str());
  void* args[] = {const_cast<void*>(params)};
  check(
      a.cuLaunchKernel(f, grid_x, grid_y, grid_z, block_x, 1, 1, smem_bytes, stream, params ? args : nullptr, nullptr),
      "cuLaunchKernel");
}

}  // namespace kt::cuda
