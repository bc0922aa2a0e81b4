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

/// The runtime's typed adapter for qkv_proj (Runtime::Impl::run<RuntimeAdapter> in runtime.cpp): the problem as a
/// POD hash key, the argument check before resolving (every check but the workspace's, which is the runtime's),
/// the split-K / stream-K workspace and counters, and the launch with the runtime's workspace.
struct RuntimeAdapter {
  using Problem = qkv::Problem;
  using Config = qkv::Config;
  using Params = QkvParams;
  static const Family& family() { return family_type(); }
  static nlohmann::json problem_to_json(const Problem& p) { return qkv::problem_to_json(p); }
  static Config config_from_json(const nlohmann::json& j) { return qkv::config_from_json(j); }
  static constexpr int kKeyFields = 10;
  static void pod_key(const Problem& p, int* f) {
    const int v[kKeyFields] = {static_cast<int>(p.dtype),
                               static_cast<int>(p.format),
                               p.m,
                               p.k,
                               p.num_heads,
                               p.num_kv_heads,
                               p.head_dim,
                               p.has_bias ? 1 : 0,
                               p.rope ? 1 : 0,
                               p.kv_cache ? 1 : 0};
    for (int i = 0; i < kKeyFields; ++i) f[i] = v[i];
  }
  static void check_args(const Problem& p, const Params& a) {
    const Config unsplit{};  // mma, split_k 1: no workspace
    check_params(p, unsplit, a);
  }
  static bool uses_workspace(const Config& c) { return qkv::uses_workspace(c); }
  static size_t workspace_bytes(const Problem& p, const Config& c, int sm_count) {
    return qkv::workspace_bytes(p, c, sm_count);
  }
  static size_t counter_bytes(const Problem& p, const Config& c) { return qkv::counter_bytes(p, c); }
  static void launch(const LoadedKernel& k, const Problem& p, const Config& c, const Params& params, float* workspace,
                     unsigned* counters, CUstream stream) {
    Params a = params;
    a.workspace = workspace;
    a.counters = counters;
    qkv::launch(k, p, c, a, stream);
  }
};

}  // namespace qkv
}  // namespace kt
