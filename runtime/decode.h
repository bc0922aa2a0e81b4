// Launching attention_decode variants, the runtime's typed adapter and the host-side argument checks.
#pragma once
#include "generator/decode_family.h"
#include "runtime/loaded_kernel.h"

namespace kt {
namespace decode {

/// The host-side checks of one decode call before anything is resolved or launched: check_args
/// (generator/decode_family.h: the problem, i.e. q_len 1..16, page size 16..256, head counts, head_dim, dtype; the
/// kernel arguments against it: sizes, non-null and 16-byte aligned pointers, strides multiples of 8 elements, the
/// block table of a paged cache), plus the rule only the caller's sizes show: kv_len (the grid's sizing length,
/// FlashAttention's max_seqlen_k) <= kv_capacity (S_max, or max_pages_per_seq x page_size), since a longer length
/// cannot be held by the cache. Throws ProblemError naming the argument.
///
/// Not checked (device-resident, trusted as the kernel documents in DecodeParams): the values of seqlens_k (in
/// [0, kv_capacity]) and of the block table (the entries a length reaches in [0, num_pages)). A caller whose
/// tables are on the host checks them with check_tables.
void check_call(const Problem& p, const DecodeParams& a);

/// Checks host copies of the device-resident tables before they are uploaded: seqlens_k[b] (batch values) in
/// [0, kv_capacity], and for a paged cache every block-table entry a sequence's length reaches
/// (block_table[b * max_pages_per_seq + j], j < ceil(seqlens_k[b] / page_size)) in [0, num_pages).
/// block_table may be null for a contiguous cache. Throws ProblemError naming the argument, the sequence and the
/// value, e.g. "attention_decode: block_table[1][3] = 40 addresses past num_pages 32".
void check_tables(const Problem& p, const int* seqlens_k, const int* block_table, int max_pages_per_seq, int num_pages,
                  int kv_capacity);

/// Checks `params` (check_call, then check_params for `config`), writes the config's run-time part into a copy
/// (bind_config with `workspace` and `counters`) and launches variant `config` of `kernel` on `stream`.
/// `workspace` (workspace_bytes(problem, config) bytes) and `counters` (counter_bytes, zero before the first
/// launch; every launch leaves the counters zero and a cooperative config's generation words advanced) may be null
/// when the launch has one split. A cooperative config launches cooperatively when its grid is resident at once on
/// the current device (LoadedKernel::resident_blocks), otherwise with the last-block merge (cooperative_launch says
/// which); also with the last-block merge where the driver refuses the cooperative launch as too large
/// (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, e.g. an MPS client's share of the SMs). Throws ProblemError for bad
/// arguments, cuda::CudaError for launch failures.
void launch(const LoadedKernel& kernel, const Problem& problem, const Config& config, const DecodeParams& params,
            float* workspace, unsigned* counters, CUstream stream);

/// Whether launch() runs `config` cooperatively for this problem on the current device: a cooperative config whose
/// launch splits and whose grid the device holds at once. Throws cuda::CudaError.
bool cooperative_launch(const LoadedKernel& kernel, const Problem& problem, const Config& config);

/// The runtime's typed adapter for attention_decode (Runtime::Impl::run<RuntimeAdapter> in runtime.cpp): the
/// problem as a POD hash key, the argument check before resolving, the split partials and counters (allocated once
/// per resolved problem, counters zero-filled then; the combining block of each launch resets its counter, so
/// they are zero at every launch) and the launch.
struct RuntimeAdapter {
  using Problem = decode::Problem;
  using Config = decode::Config;
  using Params = DecodeParams;
  static const Family& family() { return family_type(); }
  static nlohmann::json problem_to_json(const Problem& p) { return decode::problem_to_json(p); }
  static Config config_from_json(const nlohmann::json& j) { return decode::config_from_json(j); }
  static constexpr int kKeyFields = 10;
  static void pod_key(const Problem& p, int* f) {
    const int v[kKeyFields] = {
        static_cast<int>(p.dtype),     p.batch,     p.q_len,         p.num_heads, p.num_kv_heads, p.head_dim, p.kv_len,
        static_cast<int>(p.kv_layout), p.page_size, p.causal ? 1 : 0};
    for (int i = 0; i < kKeyFields; ++i) f[i] = v[i];
  }
  static void check_args(const Problem& p, const Params& a) { check_call(p, a); }
  /// A config with a kv_chunk may split (whether it does depends on the problem's kv_len: workspace_bytes is 0
  /// when it does not, and bind_config then passes null buffers).
  static bool uses_workspace(const Config& c) { return c.kv_chunk != 0; }
  static size_t workspace_bytes(const Problem& p, const Config& c, int) { return decode::workspace_bytes(p, c); }
  static size_t counter_bytes(const Problem& p, const Config& c) { return decode::counter_bytes(p, c); }
  static void launch(const LoadedKernel& k, const Problem& p, const Config& c, const Params& a, float* workspace,
                     unsigned* counters, CUstream stream) {
    decode::launch(k, p, c, a, workspace, counters, stream);
  }
};

}  // namespace decode
}  // namespace kt
