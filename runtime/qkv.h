// Launching qkv_proj variants.
#pragma once
#include "generator/qkv_family.h"
#include "runtime/loaded_kernel.h"

namespace kt {
namespace qkv {

/// Checks `params` (check_params) and launches variant `config` of `kernel` on `stream`, with
/// QkvParams::w_evict_first = weight_evict_first(problem, config) (the caller's value is ignored).
/// Throws ProblemError for bad arguments, cuda::CudaError for launch failures.
void launch(const LoadedKernel& kernel, const Problem& problem, const Config& config, const QkvParams& params,
            CUstream stream);

}  // namespace qkv
}  // namespace kt
