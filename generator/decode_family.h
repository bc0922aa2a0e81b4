// The attention_decode kernel family, host side: Problem (result-defining key), Config space, pruning with
// invalid_reason(), canonical variant names, NVRTC source + name expression, launch dims, workspace, argument
// checks. Device side: templates/attention_decode/attention_decode.cuh; shared rules and kernel arguments:
// templates/attention_decode/decode_config.h.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention_decode/decode_config.h"
#include "generator/compiler.h"
#include "generator/family.h"  // ProblemError, LaunchDims, DeviceModel

namespace kt {
namespace decode {

constexpr const char* kFamily = "attention_decode";

/// Result-defining key of one decode call (the database key). Tensors as in DecodeParams:
/// q [batch, q_len, num_heads, head_dim]; K/V cache contiguous [batch, S_max, num_kv_heads, head_dim] or paged
/// [num_pages, page_size, num_kv_heads, head_dim] + block table [batch, max_pages_per_seq]; seqlens_k [batch];
/// out [batch, q_len, num_heads, head_dim]; lse [batch, num_heads, q_len] (optional: a null pointer, not a key
/// field, since it does not change o).
///
/// kv_len is the caller's maximum KV length (as FlashAttention's max_seqlen_k, a host int): the grid is sized for
/// it, while the per-sequence lengths (seqlens_k) stay on the device. The tuner tunes per (batch, kv_len) bucket;
/// the runtime's nearest step covers the lengths in between.
/// causal: the q_len new tokens are causal among themselves, bottom-right aligned as FlashAttention: query i of
/// sequence b sees keys [0, seqlens_k[b] - q_len + i]. Without it every query sees keys [0, seqlens_k[b]).
struct Problem {
  DType dtype = DType::bf16;
  int batch = 1;
  int q_len = 1;
  int num_heads = 1;
  int num_kv_heads = 1;
  int head_dim = 128;
  int kv_len = 1;
  KvLayout kv_layout = KvLayout::contiguous;
  int page_size = 0;  ///< tokens per page: 16, 32, 64, 128 or 256 (paged); 0 (contiguous)
  bool causal = true;

  /// "attention_decode/bf16/b16/q1/h28/kv4/d128/sk4096/paged64/causal" (contiguous: ".../sk4096/contig/causal";
  /// not causal: ".../full") — canonical and greppable.
  std::string key() const;
  /// FLOPs of the two matmuls at kv_len: 4 * batch * num_heads * (visible (query, key) pairs) * head_dim, the
  /// pairs being q_len * kv_len, or with causal sum_i (kv_len - q_len + i + 1) over the visible ones.
  double flops() const;
  /// Bytes a call must move at least at kv_len: K and V once (2 * batch * kv_len * num_kv_heads * head_dim
  /// elements), q and o once.
  double min_bytes() const;
};

/// Throws ProblemError naming the field when no variant can support the problem: dtype fp16/bf16; batch,
/// num_heads, num_kv_heads, kv_len >= 1; q_len 1..16 (kMaxQLen); num_heads % num_kv_heads == 0; head_dim 64 or 128;
/// page_size a power of two 16..256 for paged, 0 for contiguous; grid limits (batch and num_kv_heads
/// <= 65535).
void check_problem(const Problem& p);

/// The raw Cartesian space of the family's axes (before pruning), in declaration order:
/// tile_m {16, 32, 64} x tile_n {32, 64, 128, 256} x warps {2, 4, 8} x stages {2, 3, 4, 6} x kv_chunk {0, 64, 128,
/// 256, 512, 1024, 2048, 4096, 8192} x wgmma {0, 1} (each config with mma.sync, then with wgmma) x (cluster 1, then
/// with kv_chunk > 0 the same split with cooperative 1, and with kv_chunk 0 cluster {2, 4, 8, 16}).
std::vector<Config> config_space();

/// Configs of config_space() valid for the problem on `arch` (invalid_reason null), also pruned for speed on
/// `device`: tile_m no larger than the problem's packed rows need (rounded up to 16), kv_chunk no smaller than one
/// tile, and a split only when it leaves at least one tile per split, at most 256 splits and at most 16 blocks per
/// SM. Ordered for --max-candidates: the splits (kv_chunk 0 included) ranked by how near their grid comes to one
/// block per SM (equally near: fewer splits first), the tile shapes ranked by shape preference (4 warps, 16 keys
/// per warp, 3 stages first), then the configs in growing rectangles of (split rank, shape rank / 2): the first
/// candidates are the two best shapes at the best split, then up to the second-best split and fourth-best shape,
/// and so on. A config whose shape fits fewer blocks per SM (shared memory, threads) than its grid needs to run in
/// the fewest waves any shape gives that grid counts its shape rank 8 worse. A cluster config (sm_90) is kept when
/// its last block gets keys; it comes one rectangle after the kv_chunk split with the same grid. Each kv_chunk split
/// has one merge in the list: cooperative at 8 or more splits per row block where its grid fits the device at once
/// (blocks per SM by shared memory and threads), the last block's otherwise.
std::vector<Config> valid_configs(const Problem& p, ArchId arch, const DeviceModel& device);

/// The family's built-in default (what the runtime launches untuned, and the tuner's first candidate): tile_m = the
/// packed rows rounded up to 16 (at most 64); the shape the candidate order leads with (tile_m 16: 4 warps, tile_n 64;
/// 32: 8 warps, 64; 64: 8 warps, 128), or 4 warps with 16 keys per key group where that splits a short KV nearer one
/// block per SM; 3 stages (fewer where the ring does not fit the arch); the kv_chunk (0 or a multiple of tile_n, at
/// most 256 splits) whose grid batch x num_kv_heads x row blocks x splits comes nearest one block per SM of
/// device_model(arch) (|ln(blocks / SMs)|; equally near: fewer splits), so no split once that grid fills the SMs; on
/// sm_90 a cluster of 2-16 splits instead where its grid is as near, or within a factor of 2 with slices of at most
/// 1024 keys; a kv_chunk split of 8 or more splits per row block with the cooperative merge where its grid fits the
/// device at once (decode_family.cpp gives the H200 measurements behind each rule). Throws ProblemError when no config
/// is valid.
Config default_config(ArchId arch, const Problem& p);

bool same_config(const Config& a, const Config& b);

/// "attention_decode__bf16_d128_paged64__m16_n64_w4_s4_c512__sm_90a": the kernel class (dtype, head_dim, layout with
/// the page size: "contiguous" or "paged<page_size>"), then every config field in declaration order (c0 = no split;
/// "_cl<n>" for a cluster of n, absent for 1; "_wgmma" for the wgmma mainloop, absent for mma.sync; "_coop" for the
/// cooperative merge), then the arch. Not in the name: batch, q_len, heads, kv_len and causal,
/// run-time arguments of one binary.
std::string variant_name(const Problem& p, const Config& c, ArchId arch);

/// "kt::decode::attention_decode<kt::DType::bf16, 128, kt::decode::KvLayout::paged, 64, 16, 64, 4, 4, false>" (dtype,
/// head_dim, layout, page size (0 for contiguous), tile_m, tile_n, warps, stages, wgmma), or for a cluster config
/// "kt::decode::attention_decode_cluster<..., 16, 64, 4, 4, 8, false>" (the cluster size is compiled in). kv_chunk
/// and cooperative are run-time arguments (DecodeParams::kv_chunk and cooperative, set by bind_config) and gridDim.x
/// the split count, so configs that differ only in them share one binary.
std::string name_expression(const Problem& p, const Config& c);

/// The translation unit NVRTC compiles for a variant (no -D macros: the config is in the name expression).
KernelSource kernel_source(const Problem& p, const Config& c, ArchId arch);

/// Grid (row_blocks * num_splits(c, kv_len), num_kv_heads, batch); block warps * 32 threads; dynamic smem
/// smem_bytes(c, head_dim); no cluster.
LaunchDims launch_dims(const Problem& p, const Config& c);

/// Whether the launch has more than one split (then it needs the workspace and counters below).
bool uses_workspace(const Problem& p, const Config& c);
/// Split partials in bytes (fp32 O then LSE, DecodeParams::partial_o / partial_lse); 0 without split.
size_t workspace_bytes(const Problem& p, const Config& c);
/// Counters in bytes (one unsigned per (batch, kv head, row block), and a generation word each after them for a
/// cooperative config); 0 without split. The caller zeroes them once
/// when it allocates them; each launch leaves them zero again.
size_t counter_bytes(const Problem& p, const Config& c);
/// Writes the config's run-time part into the kernel arguments (every launch path calls it; the caller's values of
/// these fields are ignored): params.kv_chunk = c.kv_chunk, params.cooperative = c.cooperative when the launch splits
/// (0 otherwise; runtime/decode.cpp's launch clears it first where the grid does not fit the device at once),
/// params.partial_o / partial_lse into `workspace` (workspace_bytes(p, c) bytes, 16-byte aligned) and params.counters =
/// `counters`; the three pointers null when the launch has no split (workspace and counters may then be null).
void bind_config(DecodeParams& params, const Problem& p, const Config& c, float* workspace, unsigned* counters);

/// Kernel arguments for a contiguous cache in the layouts of DecodeParams, strides derived from the shape:
/// q/o [batch, q_len, num_heads, head_dim], k/v [batch, s_max, num_kv_heads, head_dim]. softmax_scale <= 0 selects
/// 1/sqrt(head_dim). bind_config not yet applied.
DecodeParams contiguous_params(const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse,
                               const int* seqlens_k, int s_max, float softmax_scale = 0.f);
/// Kernel arguments for a paged cache: k/v pages [num_pages, page_size, num_kv_heads, head_dim], block_table
/// [batch, max_pages_per_seq] int32 (row stride max_pages_per_seq). bind_config not yet applied.
DecodeParams paged_params(const Problem& p, const void* q, const void* k_pages, const void* v_pages, void* o,
                          float* lse, const int* seqlens_k, const int* block_table, int num_pages,
                          int max_pages_per_seq, float softmax_scale = 0.f);

/// Throws ProblemError naming the argument if the kernel cannot run with these arguments, whatever the config:
/// sizes must match the problem (batch, q_len, heads, kv_len, page_size, causal); q, k, v, o, seqlens_k (and
/// block_table for paged) non-null; q, k, v, o 16-byte aligned; every stride a multiple of 8 elements;
/// kv_capacity >= 1 (paged: within the block table's pages); num_pages >= 1 (paged); softmax_scale positive and
/// finite. What the host cannot see (device-resident lengths and block-table entries) is DecodeParams' contract.
void check_args(const Problem& p, const DecodeParams& params);
/// check_args, plus the config's part: kv_chunk bound (bind_config applied), and the workspace and counters present
/// (16-byte aligned) when uses_workspace.
void check_params(const Problem& p, const Config& c, const DecodeParams& params);

/// JSON forms stored in the tuning database:
///   problem {"dtype":"bf16","batch":16,"q_len":1,"num_heads":28,"num_kv_heads":4,"head_dim":128,"kv_len":4096,
///            "kv_layout":"paged","page_size":64,"causal":true}
///   config  {"tile_m":16,"tile_n":64,"warps":4,"stages":4,"kv_chunk":512} (+ "cluster", "wgmma", "cooperative" when
///            not 1 / 0 / 0)
/// from_json throws ProblemError naming a missing or mistyped field.
nlohmann::json problem_to_json(const Problem& p);
Problem problem_from_json(const nlohmann::json& j);
nlohmann::json config_to_json(const Config& c);
Config config_from_json(const nlohmann::json& j);

/// "contiguous" / "paged"; and back (throws ProblemError naming the value).
const char* layout_name(KvLayout l);
KvLayout parse_layout(const std::string& s);

/// This family as a kt::Family (generator/decode_type.cpp; listed in generator/registry.cpp).
const Family& family_type();

}  // namespace decode
}  // namespace kt
