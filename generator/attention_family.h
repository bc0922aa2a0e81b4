// The attention_prefill kernel family, host side: Problem (result-defining key), Config space,
// pruning with invalid_reason(), canonical variant names, NVRTC source + name expression, launch dims.
// Device side: templates/attention/flash_fwd.cuh; shared rules: templates/attention/attention_config.h.
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention/attention_config.h"
#include "generator/compiler.h"
#include "generator/family.h"  // ProblemError, LaunchDims

namespace kt {
namespace attn {

constexpr const char* kFamily = "attention_prefill";

/// Result-defining key of one attention call (the database key). Tensors as in FwdParams:
/// q [batch, seqlen_q, num_heads, head_dim], k/v [batch, seqlen_k, num_kv_heads, head_dim].
/// Causal masking is bottom-right aligned: query i sees keys j <= i + seqlen_k - seqlen_q.
struct Problem {
  DType dtype = DType::bf16;
  int batch = 1;
  int seqlen_q = 1;
  int seqlen_k = 1;
  int num_heads = 1;
  int num_kv_heads = 1;
  int head_dim = 128;
  bool causal = false;

  /// "attention_prefill/bf16/b1/sq512/sk512/h28/kv4/d128/causal" — canonical and greppable.
  std::string key() const;
  /// FLOPs of the two matmuls: 4 * batch * num_heads * seqlen_q * seqlen_k * head_dim, counting for
  /// causal only the visible (query, key) pairs (about half when seqlen_q == seqlen_k).
  double flops() const;
};

/// Throws ProblemError naming the rule when no variant can support the problem:
/// sizes >= 1, num_heads % num_kv_heads == 0 (GQA/MQA), head_dim 64 or 128, dtype fp16/bf16.
void check_problem(const Problem& p);

/// The raw Cartesian space of the family's axes (before pruning), in declaration order:
/// mma.sync: tile_m {64, 128, 256} x tile_n {32, 64, 128} x warps {4, 8} x stages {1, 2, 3} x raster {0, 1};
/// wgmma_ws (sm_90a): pack_gqa {0, 1} x warps {4, 8, 12} (tile_m 16 warps) x tile_n {64, 128, 176} x stages {2, 3, 4}
/// x raster {0, 1} x overlap {0, 1} x pingpong {0, 1} (pingpong 1 only with warps 8 or 12 and overlap 1) x persistent
/// {0, 1} (pack_gqa 1 only with overlap 1 and persistent 0).
std::vector<Config> config_space();

/// nullptr when config c (valid for the problem's kernel class: invalid_reason) can run problem p, otherwise the rule it
/// breaks: pack_gqa_reason for the heads, and raster 1's grid z limit of 65535 m-blocks (a packed tile may cover as
/// few as one position). Used by valid_configs, launch_dims and the runtime's check of a stored winner (unusable).
const char* problem_reason(const Problem& p, const Config& c);

/// Configs of config_space() for which invalid_reason(dtype, head_dim, causal, config, arch) and
/// problem_reason(p, config) are null, in the candidate order (what --max-candidates and
/// autotune's fast strategy keep): wgmma_ws first (128 x 128 tiles, two consumer warpgroups, overlap on, 2 then 3 ring
/// slots, every block order / pingpong / persistence: the first 16; then one consumer, then three; GQA-packed after
/// the unpacked; when seqlen_q <= 64 GQA-packed first and one consumer before two), then mma.sync from
/// FlashAttention-2's 128 x 64 tile of 4 warps outward.
std::vector<Config> valid_configs(const Problem& p, ArchId arch);

/// The family's built-in default for an arch (used when nothing is tuned). sm_90a: wgmma_ws, tile 128x128, two
/// consumer warpgroups in pingpong with overlap, 2 stages, raster 1, one block per tile (FlashAttention-3's tile for
/// head_dim 128). On the H200 it is within 3% of the fastest one-block-per-tile wgmma_ws variant on the causal qwen7b
/// prefill workloads up to S 8192, and at least 10% slower than 3 stages at B 2 S 16384; persistent variants take
/// 10-15% less time at B 8 S 2048 and B 4 S 1024 and lose at B 1. The tuner, not the default, makes those choices.
/// sm_90a with seqlen_q <= 64: one consumer warpgroup (tile 64 x 128, 2 stages, overlap, raster 0), GQA-packed when
/// the problem has 2 to 64 query heads per KV head; on the H200 within 2% of the fastest wgmma_ws variant at S_q 16
/// and 64 over S_k 2048 and 4096 with Qwen2.5-7B's heads (28 / 4), and 1.8x faster than unpacked at B 8 S_q 16
/// (bench/results/nvidia_h200_prefill_ws_space.txt).
/// Other archs: mma.sync, tile 128x64, 4 warps, 2 stages, as FlashAttention-2 picks for head_dim 128 on sm_80+.
Config default_config(ArchId arch, const Problem& p);

/// "attention_prefill__bf16_d128_causal__mmasync_m128_n64_w4_s2_r0__sm_90a" or
/// "attention_prefill__bf16_d128_causal__wgmmaws_m128_n128_w8_s2_r1_o1_p1_pers0__sm_90a" (with pack_gqa: "..._pers0_gqa
/// __sm_90a"): every kernel axis of the mainloop in declaration order. Not in the name: batch, sequence lengths and
/// the GQA ratio, which are run-time arguments of one and the same binary.
std::string variant_name(const Problem& p, const Config& c, ArchId arch);

/// "kt::attn::flash_fwd<kt::DType::bf16, 128, true, 128, 64, 4, 2, 0, 0>" or
/// "kt::attn::flash_fwd_ws<kt::DType::bf16, 128, true, 128, 2, 2, 1, true, true, false, false>" (tile_n, consumer
/// warpgroups, stages, raster, overlap, pingpong, persistent, pack_gqa)
std::string name_expression(const Problem& p, const Config& c);

/// The translation unit NVRTC compiles for a variant (no -D macros: the config is in the name expression).
KernelSource kernel_source(const Problem& p, const Config& c, ArchId arch);

/// Grid (m_blocks, heads, batch) for raster 0 or (heads, batch, m_blocks) for raster 1, with m_blocks =
/// ceil(seqlen_q / tile_positions(config, num_heads / num_kv_heads)) and heads = num_heads (pack_gqa: num_kv_heads);
/// persistent: (min(tiles, sm_count), 1, 1). Block warps * 32 threads (wgmma_ws: + 128, the producer warpgroup);
/// dynamic smem bytes; no cluster. Throws ProblemError when sm_count < 1 for a persistent config, when
/// problem_reason rejects the config for the problem.
LaunchDims launch_dims(const Problem& p, const Config& c, int sm_count = 0);

/// Kernel arguments for contiguous tensors in FlashAttention layout (strides derived from the shape).
/// softmax_scale <= 0 selects 1/sqrt(head_dim).
FwdParams contiguous_params(const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse,
                            float softmax_scale = 0.f);

/// JSON forms stored in the tuning database:
///   problem {"dtype":"bf16","batch":1,"seqlen_q":512,"seqlen_k":512,"num_heads":28,"num_kv_heads":4,"head_dim":128,"causal":true}
///   config  {"tile_m":128,"tile_n":64,"warps":4,"stages":2,"mainloop":0,"raster":1,"overlap":0,"pingpong":0,
///            "persistent":0,"pack_gqa":0} (the last four may be absent: 0, as in databases written before the wgmma_ws
///            mainloop or GQA packing)
/// from_json throws ProblemError naming a missing or mistyped field.
nlohmann::json problem_to_json(const Problem& p);
Problem problem_from_json(const nlohmann::json& j);
nlohmann::json config_to_json(const Config& c);
Config config_from_json(const nlohmann::json& j);
bool same_config(const Config& a, const Config& b);

/// Throws ProblemError if the strides/pointers cannot be handled: pointers and row/head/batch
/// strides must be multiples of 8 elements (16-byte cp.async), sizes must match the problem.
void check_params(const Problem& p, const FwdParams& params);

/// This family as a kt::Family (generator/attention_type.cpp; listed in generator/registry.cpp).
const Family& family_type();

}  // namespace attn
}  // namespace kt
