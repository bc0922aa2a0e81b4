// A compiled kernel variant loaded into the current CUDA context, ready to launch.
#pragma once
#include <cuda.h>

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
  /// clusters of 1 x cluster_y x 1 (grid_y must be a multiple of it). Throws cuda::CudaError.
  void launch(unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x, unsigned smem_bytes, CUstream stream,
              const void* params, unsigned cluster_y = 1) const;

 private:
  cuda::Module module_;
  CUfunction fn_ = nullptr;
  std::string name_;
};

}  // namespace kt
