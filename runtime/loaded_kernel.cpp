#include "runtime/loaded_kernel.h"

namespace kt {

LoadedKernel::LoadedKernel(const std::string& cubin, const std::string& lowered_name, unsigned max_dynamic_smem_bytes)
    : module_(cubin.data()), name_(lowered_name) {
  fn_ = module_.function(lowered_name);
  // Always: the default limit is 48 KiB minus the kernel's static shared memory.
  if (max_dynamic_smem_bytes > 0)
    cuda::check(cuda::api().cuFuncSetAttribute(fn_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                               static_cast<int>(max_dynamic_smem_bytes)),
                "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
}

void LoadedKernel::launch(unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x, unsigned smem_bytes,
                          CUstream stream, const void* params) const {
  void* args[] = {const_cast<void*>(params)};
  cuda::check(cuda::api().cuLaunchKernel(fn_, grid_x, grid_y, grid_z, block_x, 1, 1, smem_bytes, stream, args, nullptr),
              "cuLaunchKernel");
}

}  // namespace kt
