#include "runtime/loaded_kernel.h"

#include <cstring>

#include "cache/cubin_image.h"

namespace kt {
namespace {

// A cubin comes from a cache or a tuning database, i.e. from a file: check that it is a CUDA ELF image
// (whole header and section table inside the bytes) before the driver reads it, which it does with no
// length. The driver itself refuses an image for another GPU.
const void* checked_image(const std::string& cubin) {
  if (cubin_sm(cubin) < 0)
    throw cuda::CudaError(CUDA_ERROR_INVALID_IMAGE, "loading a kernel image (" + cubin_image_problem(cubin, 0) + ")");
  return cubin.data();
}

}  // namespace

LoadedKernel::LoadedKernel(const std::string& cubin, const std::string& lowered_name, unsigned max_dynamic_smem_bytes)
    : module_(checked_image(cubin)), name_(lowered_name) {
  fn_ = module_.function(lowered_name);
  // Always: the default limit is 48 KiB minus the kernel's static shared memory.
  if (max_dynamic_smem_bytes > 0)
    cuda::check(cuda::api().cuFuncSetAttribute(fn_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                               static_cast<int>(max_dynamic_smem_bytes)),
                "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  cuda::allow_wide_cluster(fn_);
}

void LoadedKernel::launch(unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x, unsigned smem_bytes,
                          CUstream stream, const void* params, unsigned cluster_y, bool cooperative) const {
  void* args[] = {const_cast<void*>(params)};
  if (cluster_y <= 1 && !cooperative) {
    cuda::check(
        cuda::api().cuLaunchKernel(fn_, grid_x, grid_y, grid_z, block_x, 1, 1, smem_bytes, stream, args, nullptr),
        "cuLaunchKernel");
    return;
  }
  CUlaunchAttribute attr;
  std::memset(&attr, 0, sizeof attr);
  if (cooperative) {
    attr.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attr.value.cooperative = 1;
  } else {
    attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim.x = 1;
    attr.value.clusterDim.y = cluster_y;
    attr.value.clusterDim.z = 1;
  }
  CUlaunchConfig cfg;
  std::memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = grid_x, cfg.gridDimY = grid_y, cfg.gridDimZ = grid_z;
  cfg.blockDimX = block_x, cfg.blockDimY = 1, cfg.blockDimZ = 1;
  cfg.sharedMemBytes = smem_bytes;
  cfg.hStream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  cuda::check(cuda::api().cuLaunchKernelEx(&cfg, fn_, args, nullptr),
              cooperative ? "cuLaunchKernelEx (cooperative)" : "cuLaunchKernelEx (thread-block clusters)");
}

long long LoadedKernel::resident_blocks(unsigned block_x, unsigned smem_bytes) const {
  const unsigned long long key =
      static_cast<unsigned long long>(block_x) << 50 | static_cast<unsigned long long>(smem_bytes) << 32;
  if (const unsigned long long r = resident_.load(std::memory_order_relaxed);
      r != 0 && (r & ~0xffffffffull) == key && block_x < (1u << 14) && smem_bytes < (1u << 18))
    return static_cast<long long>(r & 0xffffffffull);
  int per_sm = 0;
  cuda::check(cuda::api().cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn_, static_cast<int>(block_x),
                                                                      static_cast<size_t>(smem_bytes)),
              "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  const long long blocks = static_cast<long long>(per_sm) * cuda::current_sm_count();
  resident_.store(key | static_cast<unsigned long long>(blocks & 0xffffffffll), std::memory_order_relaxed);
  return blocks;
}

}  // namespace kt
