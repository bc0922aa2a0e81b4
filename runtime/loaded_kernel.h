// A compiled kernel variant loaded into the current CUDA context, ready to launch.
#pragma once
#include <cuda.h>

#include <atomic>
#include <string>

#include "cuda/driver.h"

namespace kt {

/// Loads a cubin (cuModuleLoadData) and resolves the kernel by its lowered name. Sets the kernel's dynamic
/// shared-memory limit once here (the default is 48 KiB minus its static shared memory), so launches do no
/// driver calls besides cuLaunchKernel. Requires a current context. Throws cuda::CudaError
/// (CUDA_ERROR_INVALID_IMAGE, before any driver call, when `cubin` is not a CUDA ELF image: cubin_image.h).
class LoadedKernel {
 public:
  LoadedKernel(const std::string& cubin, const std::string& lowered_name, unsigned max_dynamic_smem_bytes);
  CUfunction function() const { return fn_; }
  const std::string& lowered_name() const { return name_; }

  /// cuLaunchKernel with one by-value parameter struct; with cluster_y > 1, cuLaunchKernelEx with thread-block
  /// clusters of 1 x cluster_y x 1 (grid_y must be a multiple of it); with `cooperative` (no cluster),
  /// cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_COOPERATIVE: every block resident at once, or the launch fails with
  /// CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE (check resident_blocks first). Throws cuda::CudaError.
  void launch(unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x, unsigned smem_bytes, CUstream stream,
              const void* params, unsigned cluster_y = 1, bool cooperative = false) const;

  /// Blocks of block_x threads and smem_bytes of dynamic shared memory the current device holds at once
  /// (cuOccupancyMaxActiveBlocksPerMultiprocessor x its SMs): the largest cooperative grid. The answer for the last
  /// (block_x, smem_bytes) is kept, so a launch path may ask on every launch. Throws cuda::CudaError.
  long long resident_blocks(unsigned block_x, unsigned smem_bytes) const;

 private:
  cuda::Module module_;
  CUfunction fn_ = nullptr;
  std::string name_;
  /// resident_blocks' last answer, 0 before the first: block_x << 50 | smem_bytes << 32 | blocks (one atomic word,
  /// so that concurrent launches read a consistent pair).
  mutable std::atomic<unsigned long long> resident_{0};
};

}  // namespace kt
