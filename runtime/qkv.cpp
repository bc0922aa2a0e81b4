#include "runtime/qkv.h"

namespace kt {
namespace qkv {

void launch(const LoadedKernel& kernel, const Problem& problem, const Config& config, const QkvParams& params,
            CUstream stream) {
  check_params(problem, config, params);
  const attn::LaunchDims d = launch_dims(problem, config);
  kernel.launch(d.grid_x, d.grid_y, d.grid_z, d.block_x, d.smem_bytes, stream, &params);
}

}  // namespace qkv
}  // namespace kt
