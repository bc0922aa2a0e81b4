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

/// The runtime's typed adapter for attention_prefill (Runtime::Impl::run<RuntimeAdapter> in runtime.cpp): the
/// problem as a POD hash key, the argument check before resolving, the workspace (none) and the launch.
struct RuntimeAdapter {
  using Problem = attn::Problem;
  using Config = attn::Config;
  using Params = FwdParams;
  static const Family& family() { return family_type(); }
  static nlohmann::json problem_to_json(const Problem& p) { return attn::problem_to_json(p); }
  static Config config_from_json(const nlohmann::json& j) { return attn::config_from_json(j); }
  static constexpr int kKeyFields = 8;
  static void pod_key(const Problem& p, int* f) {
    const int v[kKeyFields] = {
        static_cast<int>(p.dtype), p.batch, p.seqlen_q, p.seqlen_k, p.num_heads, p.num_kv_heads, p.head_dim,
        p.causal ? 1 : 0};
    for (int i = 0; i < kKeyFields; ++i) f[i] = v[i];
  }
  static void check_args(const Problem& p, const Params& a) { check_params(p, a); }
  static bool uses_workspace(const Config&) { return false; }
  static size_t workspace_bytes(const Problem&, const Config&, int) { return 0; }
  static size_t counter_bytes(const Problem&, const Config&) { return 0; }
  static void launch(const LoadedKernel& k, const Problem& p, const Config& c, const Params& a, float*, unsigned*,
                     CUstream stream) {
    attn::launch(k, p, c, a, stream);
  }
};

}  // namespace attn
}  // namespace kt
