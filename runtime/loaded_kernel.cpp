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
                          CUstream stream, const void* params, unsigned cluster_y) const {
  void* args[] = {const_cast<void*>(params)};
  if (cluster_y <= 1) {
    cuda::check(
        cuda::api().cuLaunchKernel(fn_, grid_x, grid_y, grid_z, block_x, 1, 1, smem_bytes, stream, args, nullptr),
        "cuLaunchKernel");
    return;
  }
  CUlaunchAttribute cluster;
  std::memset(&cluster, 0, sizeof cluster);
  cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  cluster.value.clusterDim.x = 1;
  cluster.value.clusterDim.y = cluster_y;
  cluster.value.clusterDim.z = 1;
  CUlaunchConfig cfg;
  std::memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = grid_x, cfg.gridDimY = grid_y, cfg.gridDimZ = grid_z;
  cfg.blockDimX = block_x, cfg.blockDimY = 1, cfg.blockDimZ = 1;
  cfg.sharedMemBytes = smem_bytes;
  cfg.hStream = stream;
  cfg.attrs = &cluster;
  cfg.numAttrs = 1;
  cuda::check(cuda::api().cuLaunchKernelEx(&cfg, fn_, args, nullptr), "cuLaunchKernelEx (thread-block clusters)");
}

}  // namespace kt
