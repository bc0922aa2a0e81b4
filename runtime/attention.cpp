#include "runtime/attention.h"

namespace kt {
namespace attn {

void launch(const LoadedKernel& kernel, const Problem& problem, const Config& config, const FwdParams& params,
            CUstream stream) {
  check_params(problem, params);
  const LaunchDims d = launch_dims(problem, config);
  kernel.launch(d.grid_x, d.grid_y, d.grid_z, d.block_x, d.smem_bytes, stream, &params);
}

}  // namespace attn
}  // namespace kt
