// The qkv_proj kernel family, host side. Device side: templates/qkv_proj/qkv_proj.cuh; shared rules:
// templates/qkv_proj/qkv_proj_config.h; weight formats: templates/qkv_proj/quant_format.h.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "generator/arch.h"  // DeviceModel
#include "generator/compiler.h"
#include "generator/family.h"  // ProblemError, LaunchDims
#include "qkv_proj/qkv_proj_config.h"

namespace kt {
namespace qkv {

constexpr const char* kFamily = "qkv_proj";

/// Canonical weight-format name used in keys and variant names: "fp16", "bf16", "int8", "int4", "nf4", "mxfp4", "nvfp4",
/// "fp16_kb64", "bf16_kb64".
const char* format_tag(quant::Format f);

/// Result-defining key of one projection: X [m, k] dtype, W [(Hq + 2 Hkv) * head_dim, k] in `format`.
struct Problem {
  DType dtype = DType::bf16;
  quant::Format format = quant::Format::bf16;
  int m = 1;  ///< tokens
  int k = 3584;
  int num_heads = 28, num_kv_heads = 4, head_dim = 128;
  bool has_bias = true;
  bool rope = true;
  /// K (after RoPE) and V also go into a paged KV cache through a slot mapping (QkvParams::slot_mapping). Compiled
  /// into the kernel (its name expression's KvCache argument), so the plain kernels carry no cache-write code; the
  /// same configs are valid either way, and the class key leaves it out (the runtime's nearest step hands a
  /// kv_cache problem the plain problem's tuned config).
  bool kv_cache = false;

  int n() const { return (num_heads + 2 * num_kv_heads) * head_dim; }
  /// "qkv_proj/bf16/nf4/m16/k3584/h28/kv4/d128/bias/rope", with "/kvcache" appended when kv_cache
  std::string key() const;
  double flops() const { return 2.0 * m * double(n()) * k; }
  /// Bytes the kernel must move at least: packed weight + scales + X + outputs (+ bias).
  double min_bytes() const;
};

/// Throws ProblemError naming the rule: sizes >= 1, Hq % Hkv == 0, head_dim 64/128, k a multiple of 64 and of
/// the format's group, 16-bit weights (fp16 / bf16 and their K-blocked twins) matching the activation dtype.
void check_problem(const Problem& p);

/// "mma", "gemv", "wgmma", "wgmma_ws", "wgmma_pairs": the mainloop's name in config JSON and variant names.
const char* mainloop_name(Mainloop m);
/// "register_ring", "bulk_rows", "tma", "tma_x".
const char* gemv_load_name(GemvLoad l);
/// "none", "cluster", "balanced_tail".
const char* gemv_reduce_name(GemvReduce r);

/// Raw axes of the tiled (mma) mainloop: tile_m {16, 32, 64, 128} x tile_n {64, 128, 256} x tile_k {64, 128} x
/// warps (m x n) {1x4, 1x8, 2x2, 2x4, 4x2} x stages {2, 3} x split_k {1, 2, 4, 8, 16} x prefetch {1, 2, 4}.
std::vector<Config> config_space();
/// Raw axes of the weight-streaming (gemv) mainloop for format f: tile_m {8, 16, 32, 64} x m16 tiles per warp
/// {1, 2} x warps (K x N) {2x1, 4x1, 7x1, 8x1, 14x1, 16x1, 4x2, 7x2, 8x2, 2x4, 4x4} x load {register_ring, bulk_rows,
/// tma, tma_x} x prefetch {1, 2, 4} (tma / tma_x: {1, 2}, and 4 for 16-bit weights), reduce none, and for tile_m 8 / 16
/// and every load but bulk_rows its balanced_tail twin; plus the cluster variants: tile_m as above x m16 tiles per warp
/// {1, 2} x cluster (blocks splitting K) {2, 4, 8} x warps K {1, 2, 4, 8} (warps N 1) x prefetch {1, 2}, bulk_rows.
std::vector<Config> gemv_config_space(quant::Format f);
/// Raw axes of the Hopper (wgmma, sm_90a) mainloop for format f: tile_m {64, 128, 256} x tile_n {64, 128, 256} x tile_k
/// {64, 128} x stages {2, 3, 4} x split_k {1, 2, 4, 8, 16} x prefetch {1, 2} (1 only for 16-bit weights).
std::vector<Config> wgmma_config_space(quant::Format f);
/// The warp-specialized wgmma space (sm_90a): tile_m {8, 16, 32, 64, 96, 128, 192, 256} tokens, one or two consumer
/// warpgroups of one or two m64 atoms, stages {2, 3, 4, 6, 8}, split stream-K or split_k 1 (and 2, 3, 4 with rings of 4
/// or more; 3 from tile_m 16; the same as split_k_tail from tile_m 64), and two K groups for tile_m 16 / 32 with one
/// atom, rings of 6 or 8 and split_k.
std::vector<Config> ws_config_space();

/// The RoPE-paired wgmma space (sm_90a, 16-bit weights; qkv_wgmma_pairs.cuh): tile_m {64, 128} tokens (one consumer
/// warpgroup per 64) x tile_n {40, 48, 56, 64, 72, 80, 96, 128} features (tile_n / 2 RoPE pairs: wp_box_pairs of each
/// of wp_box_heads heads) x stages {4, 6, 8, 12, 16} (those that fit shared memory) x cluster_m {1, 2, 4} (token
/// tiles per thread-block cluster: a launch attribute, so the cluster_m variants of a shape share one binary).
std::vector<Config> pairs_config_space();

/// Valid configs for the problem, in the order a --max-candidates prefix keeps, for the GPU `dev` (SM count, shared
/// memory and registers; the two-argument form: device_model(arch)).
///  - gemv (M <= 64 only): tile_m = the power of two >= M within 8..64 or half of it (>= 8), warps_k x cluster <= K
///    steps, shared memory (bulk_rows: grows with K; tma: a ring, only the mbarriers grow with K) within the
///    per-block limit. Ordered by the share of the weight requested at once while every block fits on the GPU at once
///    (dev's SMs x registers and shared memory per SM), then fewer registers; every fourth candidate is a
///    register_ring config, in an order of its own (blocks that fit, then prefetch 1 first, then K warps whose share
///    of K is nearest 512 elements, then fewer registers); each
///    balanced_tail right after its twin, each tma_x (and its balanced tail) right before its tma twin.
///  - mma: tile_m <= max(16, next power of two >= M); stages 3 only for tile_m >= 64; split_k > 1 only while the
///    grid has fewer than 2 blocks per SM, and split_k <= K / tile_k. Ordered by grid closest to 2 blocks per SM,
///    then larger tiles.
///  - wgmma (sm_90a): tile_m 64, or 128 / 256 once M exceeds half of it; split_k > 1 only while the grid has fewer
///    blocks than SMs. Ordered by wave efficiency, then larger tiles, then deeper X rings.
///  - wgmma_ws (sm_90a): tile_m above 8 only once M exceeds half of it, at least 64 for M > 128; split_k as wgmma;
///    stream-K with more units than SMs; split_k_tail with at least one full wave of tiles and a partial last wave;
///    ordered by a cost model (whole waves x K steps x tile work x operand
///    traffic per FLOP); up to M = 1024 the split modes in turn, and beyond M = 64 one config per shape class in turn;
///    beyond M = 1024 the 256 x 128 tile's split_k 1 and stream-K (4 slots) first.
///  - wgmma_pairs (sm_90a, 16-bit weights, M > 16): tile_m 128 only for M > 64; ordered by a cost model (whole waves x
///    tile work x operand traffic per FLOP x output piece size x one-warpgroup tiles where two fit), one config per
///    tile shape in turn; cluster_m at most the token tiles, 2 first, then 4, then 1; deepest ring first.
/// The tiled list: for M <= 64 the wgmma_ws and wgmma_pairs candidates in turn, then wgmma and mma alternating;
/// beyond, one wgmma_pairs, two wgmma_ws, one wgmma and one mma in turn (three wgmma_ws for packed weights, which have
/// no wgmma_pairs list; the Hopper kernels won every tuned M > 64 on the H100). M <= 64: gemv and tiled take turns,
/// three gemv to one tiled for 8- and 4-bit weights up to M = 16, else one each; beyond M = 64 the tiled list only.
/// The order is what --max-candidates keeps first.
std::vector<Config> valid_configs(const Problem& p, ArchId arch, const DeviceModel& dev);
std::vector<Config> valid_configs(const Problem& p, ArchId arch);
/// The config the runtime launches for a problem no tuning database covers, and the tuner's first candidate (always
/// one of valid_configs). On sm_90a up to M = 2048 the shape that won shapes/qwen7b.json's exhaustive sweep on the H200
/// for the M range and weight width (qkv_family.cpp); otherwise gemv_default for M <= 16, then the Hopper mainloops'
/// H100 shapes, then mma.sync. Throws ProblemError when no config is valid for the problem.
Config default_config(ArchId arch, const Problem& p);
bool same_config(const Config& a, const Config& b);

/// The variant name: family, class, mainloop, tile_m, tile_n, then every field of the mainloop's struct in declaration
/// order, then the arch:
/// mma:   "qkv_proj__bf16_nf4_d128_bias_rope__mma_m16_n128_k64_w1x4_s2_sk8_p1__sm_90a" (tile_k, warps m x n, stages,
///        split_k, prefetch);
/// gemv:  "qkv_proj__bf16_nf4_d128_bias_rope__gemv_m8_n32_wk7_wn1_bulk_rows_p2_nored__sm_90a" (warps_k, warps_n, load,
///        prefetch, reduce: "_nored", "_cl4" for a cluster of 4 blocks, "_bal" for the balanced tail);
/// wgmma: "qkv_proj__bf16_nf4_d128_bias_rope__wgmma_m128_n256_k64_s3_sk1_p1__sm_90a" (tile_k, stages, split_k, prefetch);
/// wgmma_ws: "qkv_proj__bf16_int4_d128_bias_rope__wgmma_ws_m256_n128_c2_kg1_s4_sk1__sm_90a" (consumers, k_groups,
///        stages, split: "_sk<n>", "_sk<n>tail" or "_streamk");
/// wgmma_pairs: "qkv_proj__fp16_fp16_d128_bias_rope__wgmma_pairs_m128_n80_s6_cm2__sm_90a" (stages, cluster_m).
std::string variant_name(const Problem& p, const Config& c, ArchId arch);
/// "kt::qkv::qkv_proj<kt::DType::bf16, kt::quant::Format::nf4, 128, true, true, false, 16, 128, 64, 1, 4, 2, 1>" (mma) or
/// "kt::qkv::qkv_gemv<kt::DType::bf16, kt::quant::Format::nf4, 128, true, true, false, 8, 32, 7, 1, 2, 1>" (gemv: tile_m,
/// tile_n, warps K, warps N, prefetch, int(load)) or "kt::qkv::qkv_gemv_cluster<..., 8, 16, 2, 1, 1, 4>" (gemv with a
/// cluster reduction: ..., prefetch, cluster size). mma / wgmma: split_k is not in it (it is gridDim.z), so configs that differ only in split_k share one
/// binary. The format argument is quant::format_element(format): a K-blocked 16-bit format names the binary of its
/// row-major twin (the TMA kernels read either through the tensor map the host encodes; runtime/qkv.cpp).
std::string name_expression(const Problem& p, const Config& c);
KernelSource kernel_source(const Problem& p, const Config& c, ArchId arch);
/// wgmma_ws: (output tile, K step) units of the problem: tiles x K / 64.
long long ws_units(const Problem& p, const Config& c);
/// gemv: blocks of rows (warps_n x m16 row tiles each) over the n() output features.
int gemv_row_blocks(const Problem& p, const Config& c);
/// gemv balanced_tail: gemv_balance (qkv_proj_config.h) of the problem's (row block, token tile) units on sm_count SMs.
/// Throws when sm_count < 1.
GemvBalance gemv_balance_of(const Problem& p, const Config& c, int sm_count);
/// wgmma_ws stream-K grid: one block per SM (the kernel holds one block per SM), at most one per unit. Throws when
/// sm_count < 1.
int stream_k_blocks(const Problem& p, const Config& c, int sm_count);
/// Whether launch_dims and workspace_bytes read the SM count: wgmma_ws stream-K and gemv balanced_tail.
bool needs_sm_count(const Config& c);
/// Grid, block and dynamic shared memory of a launch. sm_count: the GPU's SMs (CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
/// read only for a stream-K config (wgmma_ws), whose grid is one block per SM, and for gemv balanced_tail (a 1-D grid
/// of gemv_balance_of(..).blocks()); wgmma_ws grids are 1-D
/// (tiles x split_k blocks); wgmma_pairs: (feature tiles, token tiles rounded up to a multiple of cluster_m) with
/// cluster_y = cluster_m. Throws for stream-K with sm_count < 1.
LaunchDims launch_dims(const Problem& p, const Config& c, int sm_count);
/// true when the config loads the weight with the L2 policy evict_first (qkv::launch sets QkvParams::w_evict_first):
/// wgmma_pairs always; wgmma_ws with 16-bit weights and one token tile (ceil(m / tile_m) == 1); gemv with one token
/// tile. The weight stream then replaces its own L2 lines rather than other data. Measured on the H100 against no hint:
/// after do_bench's flush, which leaves the L2
/// dirty, wgmma_pairs M = 256 27.0 -> 22.2 us, wgmma_ws fp16 M = 1 21.2 -> 19.0, gemv int8 M = 1 15.7 -> 14.4; in CUDA
/// graphs no slower (wgmma_pairs M = 256 17.9 -> 17.5, M = 1024 56.8 -> 54.7). Not where it measured slower: wgmma_ws
/// with packed weights (int4 M = 16 +0.2 us) or with several token tiles (int4 M = 4096 +1%: the other token tiles
/// re-read the weight from the L2), gemv with two token tiles (the second reads the rows from the L2).
bool weight_evict_first(const Problem& p, const Config& c);
/// true when the config reduces partial tiles through a workspace: split_k > 1 of mma.sync / wgmma, wgmma_ws stream-K
/// or gemv's balanced tail; never for a gemv cluster reduction or wgmma_ws split_k > 1 (their blocks form a cluster
/// and reduce in distributed shared memory).
bool uses_workspace(const Config& c);
/// Split-K / stream-K workspace (fp32 partial tiles) in bytes for a launch on a GPU with sm_count SMs, and counters
/// (one unsigned per output tile; gemv balanced_tail: per (row block, token tile, warp column); zero-initialized,
/// self-resetting); both 0 when !uses_workspace(c).
size_t workspace_bytes(const Problem& p, const Config& c, int sm_count);
size_t counter_bytes(const Problem& p, const Config& c);

nlohmann::json problem_to_json(const Problem& p);
Problem problem_from_json(const nlohmann::json& j);
nlohmann::json config_to_json(const Config& c);
Config config_from_json(const nlohmann::json& j);

/// Checks kernel arguments against the problem: 16-byte aligned x/w/outputs, 4-byte aligned bias, w_scales and w_zeros, strides multiples of 8, pointers
/// present for the class (scales for quantized formats, zeros for int4, bias, positions), workspace when split or
/// stream-K, wgmma_ws split_k at most the K steps. k and v are required without a slot mapping; with one
/// (QkvParams::slot_mapping) they may be null, and the KV cache is checked instead: k_cache / v_cache present and
/// 16-byte aligned, slot_mapping 4-byte aligned, num_pages, page_size >= 1 (num_pages x page_size < 2^31), cache
/// strides non-negative multiples of 8 that do not overlap; each error names the argument. The slot values are device
/// memory and are not checked: the caller guarantees -1 or [0, num_pages x page_size), no slot twice.
void check_params(const Problem& p, const Config& c, const QkvParams& a);

/// This family as a kt::Family (generator/qkv_type.cpp; listed in generator/registry.cpp).
const Family& family_type();

}  // namespace qkv
}  // namespace kt
