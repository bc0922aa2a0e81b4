// Launching attention_prefill variants.
#pragma once
#include "generator/attention_family.h"
#include "runtime/loaded_kernel.h"

namespace kt {
namespace attn {

/// Checks `params` against the problem (check_params: sizes, 16-byte alignment, strides) and launches
/// variant `config` of `kernel` on `stream` with the family's derived grid/block/shared memory.
/// Throws ProblemError for bad arguments, cuda::CudaError for launch failures.
void launch(const LoadedKernel& kernel, const Problem& problem, const Config& config, const FwdParams& params,
            CUstream stream);

}  // namespace attn
}  // namespace kt
