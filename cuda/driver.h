// CUDA Driver API, loaded at run time with dlopen("libcuda.so.1") and never linked, so that every
// kerntune binary starts (and can report "no GPU") on a machine without an NVIDIA driver.
//
// <cuda.h> is included for its types only. Note that cuda.h #defines many entry points to versioned
// names (cuMemAlloc -> cuMemAlloc_v2, cuEventElapsedTime -> cuEventElapsedTime_v2, ...); the members
// of Api below are spelled with the unversioned names and therefore go through the same macros, so
// `api().cuMemAlloc(...)` works as written. The loader resolves the real exported symbols.
//
// Threading: api() is thread-safe. The RAII wrappers are not synchronised; a Context must be current
// on the thread that uses buffers/modules/streams/events created under it.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace kt::cuda {

/// A failed CUDA Driver API call (or a failure to load the driver).
/// what(): "<call name> failed: CUDA_ERROR_X (<description>)", e.g.
///   "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
/// The name and description come from the driver (cuGetErrorName/cuGetErrorString) when it is loaded,
/// else from a built-in table of common codes; an unknown code reads "CUDA_ERROR_<number> (unknown error)".
struct CudaError : std::runtime_error {
  CUresult code;  ///< the driver's result code
  CudaError(CUresult code, const std::string& call);
};

/// Symbolic name of a result code, e.g. "CUDA_ERROR_INVALID_VALUE". Never throws.
std::string error_name(CUresult r);
/// Human-readable description of a result code, e.g. "invalid argument". Never throws.
std::string error_string(CUresult r);

/// Driver entry points, one function pointer per function, resolved with dlsym from libcuda.so.1.
/// Every pointer is non-null once api() has returned, except the optional ones marked below.
struct Api {
  decltype(&::cuInit) cuInit = nullptr;
  decltype(&::cuDriverGetVersion) cuDriverGetVersion = nullptr;
  decltype(&::cuDeviceGetCount) cuDeviceGetCount = nullptr;
  decltype(&::cuDeviceGet) cuDeviceGet = nullptr;
  decltype(&::cuDeviceGetName) cuDeviceGetName = nullptr;
  decltype(&::cuDeviceGetAttribute) cuDeviceGetAttribute = nullptr;
  decltype(&::cuDeviceGetUuid) cuDeviceGetUuid = nullptr;  // symbol cuDeviceGetUuid_v2, else cuDeviceGetUuid
  decltype(&::cuDeviceTotalMem) cuDeviceTotalMem = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) cuDevicePrimaryCtxRetain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease) cuDevicePrimaryCtxRelease = nullptr;
  decltype(&::cuCtxSetCurrent) cuCtxSetCurrent = nullptr;
  decltype(&::cuCtxGetCurrent) cuCtxGetCurrent = nullptr;
  decltype(&::cuCtxGetDevice) cuCtxGetDevice = nullptr;
  decltype(&::cuCtxSynchronize) cuCtxSynchronize = nullptr;
  decltype(&::cuModuleLoadData) cuModuleLoadData = nullptr;
  decltype(&::cuModuleUnload) cuModuleUnload = nullptr;
  decltype(&::cuModuleGetFunction) cuModuleGetFunction = nullptr;
  decltype(&::cuFuncSetAttribute) cuFuncSetAttribute = nullptr;
  decltype(&::cuFuncGetAttribute) cuFuncGetAttribute = nullptr;
  decltype(&::cuLaunchKernel) cuLaunchKernel = nullptr;
  decltype(&::cuLaunchKernelEx) cuLaunchKernelEx = nullptr;  // launches with attributes (clusters; driver >= 12.0)
  decltype(&::cuMemAlloc) cuMemAlloc = nullptr;
  decltype(&::cuMemFree) cuMemFree = nullptr;
  decltype(&::cuMemcpyHtoD) cuMemcpyHtoD = nullptr;
  decltype(&::cuMemcpyDtoH) cuMemcpyDtoH = nullptr;
  decltype(&::cuMemcpyDtoD) cuMemcpyDtoD = nullptr;
  decltype(&::cuMemsetD8) cuMemsetD8 = nullptr;
  decltype(&::cuMemsetD16) cuMemsetD16 = nullptr;
  decltype(&::cuMemsetD32) cuMemsetD32 = nullptr;
  decltype(&::cuMemsetD8Async) cuMemsetD8Async = nullptr;
  decltype(&::cuEventCreate) cuEventCreate = nullptr;
  decltype(&::cuEventRecord) cuEventRecord = nullptr;
  decltype(&::cuEventSynchronize) cuEventSynchronize = nullptr;
  decltype(&::cuEventElapsedTime) cuEventElapsedTime = nullptr;  // symbol cuEventElapsedTime_v2, else v1
  decltype(&::cuEventDestroy) cuEventDestroy = nullptr;
  decltype(&::cuStreamCreate) cuStreamCreate = nullptr;
  decltype(&::cuStreamDestroy) cuStreamDestroy = nullptr;
  decltype(&::cuStreamSynchronize) cuStreamSynchronize = nullptr;
  decltype(&::cuGetErrorName) cuGetErrorName = nullptr;
  decltype(&::cuGetErrorString) cuGetErrorString = nullptr;
  decltype(&::cuOccupancyMaxActiveBlocksPerMultiprocessor) cuOccupancyMaxActiveBlocksPerMultiprocessor = nullptr;
  decltype(&::cuTensorMapEncodeTiled) cuTensorMapEncodeTiled = nullptr;  // TMA descriptors (driver >= 12.0)
};

/// Loads libcuda.so.1 once (thread-safe; later calls return the same table) and calls cuInit(0).
/// Throws std::runtime_error "libcuda.so.1 not found: no NVIDIA driver on this machine (<dlerror>)" when
/// the library cannot be opened, std::runtime_error naming the symbol when the driver lacks an entry
/// point (driver too old), and CudaError "cuInit failed: ..." when initialisation fails. A failure is
/// remembered: every later call throws the same error without retrying.
const Api& api();

/// true if the driver loads, cuInit succeeds and at least one device exists. Otherwise false, and *why
/// (when non-null) says which step failed. Never throws.
bool gpu_available(std::string* why = nullptr);

/// Throws CudaError(r, what) unless r == CUDA_SUCCESS. Usage: check(api().cuCtxSynchronize(), "cuCtxSynchronize").
void check(CUresult r, const char* what);

/// Static description of one device. Sizes in bytes, clocks in kHz.
struct DeviceInfo {
  int ordinal = 0;                 ///< CUDA device ordinal
  std::string name;                ///< e.g. "NVIDIA H100 80GB HBM3"
  std::string uuid;                ///< 32 lowercase hex chars, the 16 UUID bytes in order (no "GPU-" prefix, no dashes)
  int cc_major = 0, cc_minor = 0;  ///< compute capability, e.g. 9.0
  int sm_count = 0;                ///< number of SMs
  int l2_bytes = 0;                ///< L2 cache size, bytes
  int max_smem_per_block_optin = 0;  ///< max dynamic+static shared memory per block after opt-in, bytes
  int clock_khz = -1;                ///< SM clock, kHz; -1 when the driver does not report it
  int mem_clock_khz = -1;            ///< peak memory clock, kHz; -1 when the driver does not report it
  long long total_mem_bytes = 0;     ///< global memory, bytes
  int driver_version = 0;            ///< cuDriverGetVersion, e.g. 13000 for CUDA 13.0
};

/// Queries device `ordinal`. Throws (as api()) when no driver, CudaError when the ordinal is invalid.
DeviceInfo device_info(int ordinal = 0);

/// SMs of the current context's device (cuCtxGetDevice, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), cached per
/// device. Throws CudaError when no context is current.
int current_sm_count();

/// RAII: retains the primary context of a device and makes it current on the calling thread.
/// Releases it on destruction (it is not popped/unset from other threads). Non-copyable, non-movable.
class Context {
 public:
  /// Throws as api(), CudaError for an invalid ordinal or a failed retain.
  explicit Context(int ordinal = 0);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  CUcontext get() const { return ctx_; }
  CUdevice device() const { return dev_; }
  /// Makes this context current on the calling thread. Throws CudaError.
  void make_current() const;
  /// cuCtxSynchronize. Throws CudaError (including errors of earlier asynchronous launches).
  void synchronize() const;

 private:
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
};

/// RAII device allocation of `bytes` bytes in the current context (cuMemAlloc, 256-byte aligned).
/// A default-constructed or zero-byte buffer holds no memory (ptr() == 0). Movable, non-copyable.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// Throws CudaError (e.g. CUDA_ERROR_OUT_OF_MEMORY) naming cuMemAlloc.
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  /// Copies `bytes` bytes from host to the start of the buffer and waits until they are on the device
  /// (the context is synchronized, so kernels on any stream see the data).
  /// Throws std::invalid_argument if bytes > this->bytes(), CudaError on failure.
  void upload(const void* host, size_t bytes);
  /// Waits for all work in the context, then copies the first `bytes` bytes of the buffer to host.
  /// Throws std::invalid_argument if bytes > this->bytes(), CudaError on failure.
  void download(void* host, size_t bytes) const;
  /// Sets every byte to `value` (cuMemsetD8). Like every fill, returns once the device memory is set
  /// (context synchronized). Throws CudaError.
  void fill_u8(uint8_t value);
  /// Sets every 16-bit element to `value` (cuMemsetD16). Throws std::invalid_argument if bytes() is
  /// not a multiple of 2, CudaError on failure.
  void fill_u16(uint16_t value);
  /// Sets every 32-bit element to `value` (cuMemsetD32). Throws std::invalid_argument if bytes() is
  /// not a multiple of 4, CudaError on failure.
  void fill_u32(uint32_t value);

 private:
  void release() noexcept;
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

/// RAII loaded module: cuModuleLoadData of a cubin (or PTX, NUL-terminated) image in the current
/// context. The image is copied by the driver and need not outlive the Module. Movable, non-copyable.
class Module {
 public:
  /// Throws std::invalid_argument for a null image, CudaError naming cuModuleLoadData
  /// (e.g. CUDA_ERROR_NO_BINARY_FOR_GPU for a cubin of another arch).
  explicit Module(const void* image);
  ~Module();
  Module(Module&& o) noexcept;
  Module& operator=(Module&& o) noexcept;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  CUmodule get() const { return mod_; }
  /// Looks up a kernel by its lowered (mangled) name, as given by nvrtcGetLoweredName.
  /// Throws CudaError "cuModuleGetFunction(<name>) failed: CUDA_ERROR_NOT_FOUND (...)" when absent.
  CUfunction function(const std::string& lowered_name) const;

 private:
  CUmodule mod_ = nullptr;
};

/// RAII event (cuEventCreate with CU_EVENT_DEFAULT, i.e. with timing). Non-copyable, non-movable.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  CUevent get() const { return ev_; }
  /// Records the event on `stream` (0 = legacy default stream). Throws CudaError.
  void record(CUstream stream = nullptr);
  /// Blocks until the event has completed. Throws CudaError.
  void synchronize() const;
  /// Milliseconds between two recorded, completed events (resolution about 0.5 us).
  /// Throws CudaError (CUDA_ERROR_NOT_READY if either has not completed).
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  CUevent ev_ = nullptr;
};

/// RAII stream (cuStreamCreate with CU_STREAM_NON_BLOCKING). Non-copyable, non-movable.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  CUstream get() const { return s_; }
  /// Blocks until all work on the stream has finished. Throws CudaError.
  void synchronize() const;

 private:
  CUstream s_ = nullptr;
};

/// Opts f in to a thread-block cluster wider than the 8 portable blocks when it was compiled with one
/// (__cluster_dims__ 16 on sm_90: CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED); nothing otherwise. Called
/// once per loaded function (LoadedKernel's constructor), not per launch: launch() below does not call it.
/// Throws CudaError if the driver refuses.
void allow_wide_cluster(CUfunction f);

/// Launches `f` on a grid of (grid_x, grid_y, grid_z) blocks of (block_x, 1, 1) threads with
/// `smem_bytes` bytes of dynamic shared memory on `stream`. When smem_bytes > 48 KiB it first sets
/// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to smem_bytes. The kernel takes exactly one
/// parameter, passed by value: `params` points to that struct (kernelParams = {params}); the driver
/// copies it, so it need only live until this call returns. Asynchronous: launch errors are reported
/// here, execution errors by a later synchronisation. Throws CudaError naming the failed call.
void launch(CUfunction f, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x, unsigned smem_bytes,
            CUstream stream, const void* params);

}  // namespace kt::cuda
