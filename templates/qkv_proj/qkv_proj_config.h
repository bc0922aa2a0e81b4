// Quantized fused Q/K/V projection family: the part shared by host and device (NVRTC). No standard headers.
//
//   Y = X W^T + b,  X [M, K] fp16/bf16 (M = tokens), W [(Hq + 2 Hkv) * D, K] in a weight format
//   (quant_format.h), b [N] in the activation dtype (optional). Epilogue: bias, optional RoPE (rotate-half,
//   Llama/Qwen convention) on the Q and K heads, and the split into the attention family's layout:
//   Q [M, Hq, D], K [M, Hkv, D], V [M, Hkv, D] (row strides are parameters: KV-cache slots work), and optionally
//   K and V straight into a paged KV cache through a slot mapping (QkvParams::slot_mapping; the kv_cache kernel
//   class, every mainloop: qkv_epilogue.cuh store_head, compiled in only there).
//
// Kernel class (compiled in): activation dtype, weight format, head_dim, has_bias, rope, kv_cache (KvCache).
// Config (speed only): the mainloop, tile_m (tokens per block) and tile_n (output features per block), and the
// mainloop's own struct (MmaConfig, GemvConfig, WgmmaConfig, WsConfig, PairsConfig below): every field has one meaning.
//
// The mainloops (kernels):
//   mma  (qkv_proj.cuh): tiled GEMM for large M. X tiles through a cp.async ring (stages), the packed weight
//        through a register prefetch ring, dequantized into a shared-memory tile, ldmatrix + mma.sync; split-K
//        through a workspace; epilogue through shared memory.
//   gemv (qkv_gemv.cuh): weight-streaming "swap-AB" kernel for decode-sized M (<= 64). Each warp streams its
//        weight rows straight from global memory into registers (no shared memory and no barrier in the mainloop);
//        the dequantized weight is the A operand (m16 = 16 output features, RoPE partners paired in one tile) and
//        the tokens are the n8 columns of mma.sync m16n8k16; K is split between the warps of a block (and, by
//        the reduction, the blocks of a cluster, or the pieces of a balanced tail through the workspace), and the epilogue
//        runs in registers. GemvConfig:
//          tile_m  tokens per block (8, 16, 32, 64: tile_m / 8 mma n-tiles),
//          tile_n  output features per block = warps_n * 16 * (1 or 2 m16 tiles per warp),
//          (gemv_step_k: K elements one warp consumes per step, 4 lanes x one 16-byte unit: 128 for 4-bit, 64 for
//                  int8, 32 for 16-bit weights -- fixed by the format),
//          warps_k warps splitting K inside the block (1, 2, 4, 7, 8, 14, 16; summed through shared memory),
//          warps_n warps along N (1, 2, 4),
//          load    register_ring: the weight streams through a register ring (prefetch steps deep);
//                  bulk_rows (sm_90): the block's whole weight slice (its rows x K, with scales) is requested at once
//                  into shared memory with bulk copies (cp.async.bulk + mbarrier) -- nothing in flight costs
//                  registers, so the entire matrix can be in flight GPU-wide; shared memory grows with K,
//                  tma (sm_90): as bulk_rows, but each warp requests its own K steps in K order, one mbarrier and one TMA box
//                  (cp.async.bulk.tensor.5d: the 16 rows of an m16 tile x 64 bytes) per step and tile, and decodes step
//                  j as soon as its mbarrier completes, so the decode overlaps the rest of the weight stream; a
//                  per-warp ring of prefetch + 2 slots, [warp][slot][tile][16 rows][64 bytes] (a quad column's 8 rows
//                  are 512 contiguous bytes: no bank conflicts; shared memory independent of K); kernel qkv_gemv_tma,
//                  parameters WsParams (runtime/qkv.cpp encodes the weight's map),
//                  tma_x (sm_90, packed weights, tile_m 16 or 32): as tma, and the step's X tile (tile_m tokens x the step's K)
//                  comes on the same mbarrier as a TMA box into a per-warp X ring (128-byte swizzled, read by
//                  conflict-free lds when the step is decoded) instead of per-lane global loads from L2 / L1: at M =
//                  16 those loads cost about 2 us per launch; K must be a multiple of 64,
//          reduce  none; or cluster (bulk_rows, sm_90) with cluster = 2, 4 or 8 blocks of one thread-block cluster that
//                  split K between them,
//                  each bulk-copying only its K range of the rows and reducing into block rank 0 through distributed
//                  shared memory (no workspace): cluster x warps_k warps per m16 tile, each block's data landing on
//                  its own, so the decode of early blocks overlaps the rest of the weight stream,
//                  or balanced_tail (any load): the balanced tail (gemv_balance): the units past the last multiple of the SM
//                  count are split along K over about one block per SM, reduced through the workspace, so that no
//                  SM decodes a whole unit more than the others,
//          prefetch K steps in flight per warp: the register ring (weight and X for register_ring, X for bulk_rows and
//                  tma), and for tma / tma_x the TMA window (prefetch + 1 steps; 4 only for 16-bit weights).
//   wgmma (qkv_wgmma.cuh, sm_90a): tiled GEMM on wgmma.mma_async m64nNk16, both operands in 128-byte-swizzled shared
//        memory: X through a cp.async ring, the weight dequantized by every thread into one of 3 shared buffers
//        while the asynchronous wgmma of the previous step runs (16-bit weights: cp.async, stages + 1 buffers).
//        tile_m 64, 128 or 256 tokens (one warpgroup per 64, 4 warps each), tile_n 64 / 128 / 256 features (the wgmma
//        N); WgmmaConfig: tile_k 64 or 128, stages 2..4 (X ring),
//        split_k 1..16 (workspace, as mma), prefetch 1 or 2 (packed-weight register ring; 1 for 16-bit weights).
//   wgmma_ws (qkv_wgmma_ws.cuh, sm_90a): warp-specialized swap-AB wgmma. A producer warpgroup streams X and the packed
//        weight through a `stages`-deep shared-memory ring (cp.async, full / empty mbarriers); 1 or 2 consumer
//        warpgroups dequantize the weight straight into wgmma A-operand registers (16-bit weights: A from shared memory)
//        and multiply with the X tile as the B operand: the features are wgmma's M (64 per atom), the tokens its N.
//        tile_m 8..256 tokens (the wgmma N: 8, 16, 32, 64, 96, 128, 192, 256), tile_n features = 64 x consumer
//        warpgroups x atoms (1 or 2 m64 atoms per warpgroup), K steps of 64. WsConfig: consumers 1 or 2 (plus the
//        producer warpgroup), k_groups 1 or 2, stages 2..8, split = split_k (split_k 1..8 blocks per tile, a cluster
//        when > 1), stream_k, or split_k_tail (whole tiles in the full waves, split_k blocks per tile in the last).
//        Work split (both forms): the (output tile, K step) units, tile-major, are cut into gridDim.x equal
//        contiguous ranges, one per block. split_k: gridDim.x = tiles x split_k, so each block owns one K slice
//        of one tile. stream_k (stream-K, Osama et al., "Stream-K: Work-centric Parallel Decomposition for Dense
//        Matrix Multiplication on the GPU", PPoPP 2023): gridDim.x = G = min(SMs, units); with 2 G tiles or more,
//        every block first computes whole tiles b, b + G, .. for tiles / G - 1 rounds (the paper's data-parallel +
//        stream-K hybrid), then the units of the remaining G .. 2 G tiles are split as above. Each block walks its
//        tiles and range across tile boundaries (the producer streams on while the consumers finish a tile), and
//        the output tile gets its own shared-memory region beside the ring, 32 to tile_m token rows at a time
//        (ws_epilogue_rows); each segment's epilogue inputs are copied at the segment's start. A tile covered by
//        several blocks is reduced through the workspace: each contributor stores its fp32 partial (in the
//        accumulator register layout), and the last to arrive (counter) adds all partials in block order --
//        deterministic -- and runs the epilogue.
//   wgmma_pairs (qkv_wgmma_pairs.cuh, sm_90a, 16-bit weights only): warp-specialized wgmma with the tokens as the A
//        operand (64 per consumer warpgroup) and RoPE-paired feature tiles as B. A feature tile is PB RoPE pairs
//        (rows i and i + D/2 of a head) of each of HN consecutive heads (counted over [Q | K | V]; wp_box_pairs,
//        wp_box_heads: 2 PB HN = tile_n), one TMA box of a 4-D tensor map {K, D/2, 2, heads} per K step, so tile_n is
//        free of head_dim (32 .. 128, multiples of 8) and the grid can fill the SMs without split-K (Qwen2.5-7B
//        M = 256: 2 x 48 tiles of 96 features). A producer warp loads each 64-wide K step -- X [tile_m][64] and the
//        weight box -- into a `stages`-deep ring (full / empty mbarriers); the epilogue (bias, RoPE, split into
//        Q/K/V) runs in registers, each thread holding both halves of its pairs (PB = 4: its partner lane the other
//        half), then leaves through a per-warp shared-memory tile (over the ring) in 16- or 8-byte pieces. tile_m 64 / 128
//        (one consumer warpgroup per 64 tokens), tile_n, K steps of 64; PairsConfig: stages 2..16, cluster_m 1, 2 or 4: the blocks of cluster_m consecutive token tiles of one feature
//        tile are launched as one thread-block cluster (a launch attribute; the kernel uses no cluster feature). A
//        cluster runs on one GPC at once, so the blocks that read the same weight tile start together and stay
//        together; the grid's token tiles are rounded up to a multiple of cluster_m and the blocks past M exit at once.
//        H100, Qwen2.5-7B, m128 n96 s8, CUDA graphs: M = 256 19.9 -> 18.0 us, M = 1024 66.1 -> 57.4.
#pragma once
#include "common/kt_types.h"
#include "qkv_proj/quant_format.h"

namespace kt {
namespace qkv {

/// The mainloop (kernel) a config runs; each has its own config struct below, whose fields mean one thing each.
enum class Mainloop : int { mma = 0, gemv = 1, wgmma = 2, wgmma_ws = 3, wgmma_pairs = 4 };

/// mma (qkv_proj.cuh): the tiled mma.sync GEMM.
struct MmaConfig {
  int tile_k = 64;   ///< K elements per mainloop step (64 or 128)
  int warps_m = 1;   ///< warps along the tokens (M)
  int warps_n = 4;   ///< warps along the output features (N)
  int stages = 2;    ///< X tiles in flight in the cp.async ring (2 or 3)
  int split_k = 1;   ///< blocks sharing one output tile along K (gridDim.z, 1..16; > 1 reduces through a workspace)
  int prefetch = 1;  ///< K tiles of packed weight in flight per thread in the register ring (1, 2 or 4)
};

/// gemv: how the weight reaches the warps (the top of this file describes each).
enum class GemvLoad : int {
  register_ring = 0,  ///< per-lane global loads into a register ring, prefetch steps deep
  bulk_rows = 1,      ///< the block's whole rows by cp.async.bulk into shared memory (sm_90)
  tma = 2,            ///< each warp's K steps by TMA boxes into a per-warp shared-memory ring (sm_90)
  tma_x = 3           ///< as tma, and each step's X tile by a TMA box on the same mbarrier (sm_90, packed weights)
};
/// gemv: how the partial sums of blocks that split K meet (the warps of one block always meet in shared memory).
enum class GemvReduce : int {
  none = 0,          ///< every block owns whole rows: no reduction across blocks
  cluster = 1,       ///< the blocks of a thread-block cluster split K (bulk_rows only; distributed shared memory)
  balanced_tail = 2  ///< the units past the last whole wave are split along K, reduced through a workspace
};
/// gemv (qkv_gemv.cuh): the weight-streaming swap-AB kernel for decode-sized M.
struct GemvConfig {
  int warps_k = 1;  ///< warps splitting K inside a block (1, 2, 4, 7, 8, 14, 16; summed through shared memory)
  int warps_n = 1;  ///< warps along the output features (1, 2, 4)
  GemvLoad load = GemvLoad::register_ring;
  int prefetch = 1;  ///< K steps in flight per warp: the register ring, and for tma / tma_x the TMA window (+ 1)
  GemvReduce reduce = GemvReduce::none;
  int cluster = 1;  ///< blocks of the cluster splitting K: 2, 4 or 8 for GemvReduce::cluster, else 1
};

/// wgmma (qkv_wgmma.cuh, sm_90a): the tiled wgmma GEMM; one warpgroup per 64 tokens.
struct WgmmaConfig {
  int tile_k = 64;   ///< K elements per mainloop step (64 or 128)
  int stages = 3;    ///< X tiles in flight in the cp.async ring (2..4)
  int split_k = 1;   ///< blocks sharing one output tile along K (gridDim.z, 1..16; > 1 reduces through a workspace)
  int prefetch = 1;  ///< K tiles of packed weight in flight per thread in the register ring (1 or 2)
};

/// wgmma_ws: how the K range of an output tile is divided between blocks.
enum class WsSplit : int {
  split_k = 0,   ///< WsConfig::split_k blocks per output tile (1: one block; > 1: a thread-block cluster)
  stream_k = 1,  ///< stream-K: one block per SM walks a contiguous range of (tile, K step) units (workspace)
  /// The full waves' tiles whole (one block per tile: the tiles / SMs x SMs first tiles, rounded down to whole
  /// clusters, ws_tail_whole_tiles), then each tile of the last, partial wave over WsConfig::split_k blocks (a cluster),
  /// so that the tail wave keeps split_k times as many SMs busy for 1 / split_k of a tile's time: the data-parallel +
  /// split-K hybrid. One binary with split_k (the kernel reads the whole tiles off its grid, ws_whole_tiles).
  split_k_tail = 2
};
/// wgmma_ws (qkv_wgmma_ws.cuh, sm_90a): the warp-specialized swap-AB kernel; tile_n = 64 x consumers x atoms.
struct WsConfig {
  int consumers = 2;  ///< consumer warpgroups per K group (1 or 2), besides the producer warpgroup
  int k_groups = 1;   ///< K groups (1 or 2): with 2, a twin of each consumer warpgroup takes every other K step
  int stages = 4;     ///< slots of the shared-memory ring (2..8)
  WsSplit split = WsSplit::split_k;
  int split_k = 1;  ///< WsSplit::split_k: blocks per output tile (1..8; > 1 a cluster); 1 for stream-K; split_k_tail:
                    ///< blocks per tile of the last wave (2..8)
};

/// wgmma_pairs (qkv_wgmma_pairs.cuh, sm_90a, 16-bit weights): tokens as the wgmma A, RoPE-paired feature tiles as B.
struct PairsConfig {
  int stages = 8;     ///< slots of the TMA ring (2..16)
  int cluster_m = 1;  ///< token tiles per thread-block cluster (1, 2 or 4; a launch attribute)
};

/// A config: the mainloop, the block's output tile (the same meaning for every mainloop) and the mainloop's own
/// fields. Only the struct of `mainloop` is read; the others keep their defaults.
struct Config {
  Mainloop mainloop = Mainloop::mma;
  int tile_m = 16;   ///< tokens per block
  int tile_n = 128;  ///< output features per block
  MmaConfig mma{};
  GemvConfig gemv{};
  WgmmaConfig wgmma{};
  WsConfig ws{};
  PairsConfig pairs{};
};

KT_HD constexpr Config make_config(int tile_m, int tile_n, const MmaConfig& m) {
  Config c{};
  c.mainloop = Mainloop::mma, c.tile_m = tile_m, c.tile_n = tile_n, c.mma = m;
  return c;
}
KT_HD constexpr Config make_config(int tile_m, int tile_n, const GemvConfig& g) {
  Config c{};
  c.mainloop = Mainloop::gemv, c.tile_m = tile_m, c.tile_n = tile_n, c.gemv = g;
  return c;
}
KT_HD constexpr Config make_config(int tile_m, int tile_n, const WgmmaConfig& w) {
  Config c{};
  c.mainloop = Mainloop::wgmma, c.tile_m = tile_m, c.tile_n = tile_n, c.wgmma = w;
  return c;
}
KT_HD constexpr Config make_config(int tile_m, int tile_n, const WsConfig& w) {
  Config c{};
  c.mainloop = Mainloop::wgmma_ws, c.tile_m = tile_m, c.tile_n = tile_n, c.ws = w;
  return c;
}
KT_HD constexpr Config make_config(int tile_m, int tile_n, const PairsConfig& w) {
  Config c{};
  c.mainloop = Mainloop::wgmma_pairs, c.tile_m = tile_m, c.tile_n = tile_n, c.pairs = w;
  return c;
}

/// K elements per block step of the tiled mainloops: mma / wgmma their tile_k, wgmma_ws / wgmma_pairs 64 (gemv:
/// gemv_step_k, per warp and fixed by the format).
KT_HD constexpr int tile_k(const Config& c) {
  return c.mainloop == Mainloop::mma ? c.mma.tile_k : c.mainloop == Mainloop::wgmma ? c.wgmma.tile_k : 64;
}
/// Blocks of one thread-block cluster that split K: gemv GemvReduce::cluster, wgmma_ws split_k > 1; else 1.
KT_HD constexpr int gemv_cluster(const Config& c) { return c.gemv.reduce == GemvReduce::cluster ? c.gemv.cluster : 1; }
KT_HD constexpr bool gemv_balanced(const Config& c) { return c.gemv.reduce == GemvReduce::balanced_tail; }
KT_HD constexpr bool ws_stream_k(const Config& c) { return c.ws.split == WsSplit::stream_k; }
KT_HD constexpr int ws_cluster(const Config& c) { return ws_stream_k(c) ? 1 : c.ws.split_k; }
KT_HD constexpr bool ws_split_tail(const Config& c) { return c.ws.split == WsSplit::split_k_tail; }
/// wgmma_ws with split_k > 1 (a cluster per split tile; not defined for 1): the tiles that a grid of `blocks` blocks
/// runs whole, one block each, as its first blocks, before the tiles split over split_k blocks each. blocks = whole +
/// (tiles - whole) split_k, so whole = (tiles split_k - blocks) / (split_k - 1): 0 for WsSplit::split_k (blocks =
/// tiles split_k), ws_tail_whole_tiles for split_k_tail.
KT_HD constexpr int ws_whole_tiles(int tiles, int split_k, int blocks) {
  return (tiles * split_k - blocks) / (split_k - 1);
}
/// WsSplit::split_k_tail: the whole tiles of a launch on sm_count SMs, the full waves of one block per SM (tiles /
/// sm_count x sm_count), rounded down to whole clusters of split_k blocks.
KT_HD constexpr long long ws_tail_whole_tiles(long long tiles, int split_k, int sm_count) {
  return (tiles / sm_count * sm_count) / split_k * split_k;
}
/// Blocks that split one output tile's K range: mma / wgmma split_k (gridDim.z), a gemv cluster reduction's cluster,
/// wgmma_ws split_k; 1 otherwise (wgmma_ws stream-K and the gemv balanced tail split by the SM count at launch).
KT_HD constexpr int k_split_blocks(const Config& c) {
  return c.mainloop == Mainloop::mma        ? c.mma.split_k
         : c.mainloop == Mainloop::wgmma    ? c.wgmma.split_k
         : c.mainloop == Mainloop::gemv     ? gemv_cluster(c)
         : c.mainloop == Mainloop::wgmma_ws ? ws_cluster(c)
                                            : 1;
}
/// gemv: whether the weight streams through the register ring, or through per-warp TMA rings (tma, tma_x).
KT_HD constexpr bool gemv_ring(const Config& c) { return c.gemv.load == GemvLoad::register_ring; }
KT_HD constexpr bool gemv_tma(const Config& c) {
  return c.gemv.load == GemvLoad::tma || c.gemv.load == GemvLoad::tma_x;
}

/// gemv: K elements per warp step (4 lanes of the mma quad x one 16-byte unit each).
KT_HD constexpr int gemv_step_k(quant::Format f) { return 4 * (128 / quant::format_bits(f)); }
/// gemv: m16 tiles (16 output features each) per warp.
KT_HD constexpr int gemv_row_tiles(const Config& c) {
  return c.gemv.warps_n > 0 ? c.tile_n / (c.gemv.warps_n * 16) : 0;
}
/// Bytes of one weight row's data, scales and int4 zero points (quant_format.h layouts) for K = k.
KT_HD constexpr int row_data_bytes(quant::Format f, int k) { return k * quant::format_bits(f) / 8; }
KT_HD constexpr int row_scale_bytes(quant::Format f, int k) {
  return quant::format_group(f) < 0    ? 4
         : quant::format_group(f) == 0 ? 0
                                       : k / quant::format_group(f) * quant::scale_bytes(f);
}
KT_HD constexpr int row_zero_bytes(quant::Format f, int k) {
  return quant::format_element(f) == quant::Format::int4 ? k / 128 : 0;
}
/// gemv: blocks per SM the register allocation is held to (__launch_bounds__ minimum), so that decode-sized grids (a few
/// hundred blocks of 16 output features) are resident in one wave: up to 64 threads -> 8, 128 -> 4, 256 -> 3, 384 -> 2,
/// else 1.
KT_HD constexpr int gemv_min_blocks(int threads) {
  return threads <= 64 ? 8 : threads <= 128 ? 4 : threads <= 256 ? 3 : threads <= 384 ? 2 : 1;
}
/// gemv: registers per thread that gemv_min_blocks leaves: 65536 per SM over the blocks' threads, in units of 8 (ptxas
/// counts a block above 128 threads as a multiple of 128: 224 as 256, 448 as 512), at most 255.
/// Registers per thread when counted_threads threads share an SM's 65536 (units of 8, at most 255).
KT_HD constexpr int gemv_reg_cap_of(int counted_threads) {
  return 65536 / counted_threads / 8 * 8 > 255 ? 255 : 65536 / counted_threads / 8 * 8;
}
KT_HD constexpr int gemv_reg_cap(int threads) {
  return gemv_reg_cap_of((threads <= 128 ? threads : (threads + 127) / 128 * 128) * gemv_min_blocks(threads));
}
/// The formats decoded through a shared-memory table of code-value pairs (nf4, mxfp4, nvfp4; qkv_gemv.cuh).
KT_HD constexpr bool format_uses_table(quant::Format f) {
  return quant::format_element(f) == quant::Format::nf4 || quant::format_element(f) == quant::Format::mxfp4 ||
         quant::format_element(f) == quant::Format::nvfp4;
}
/// Interleaved copies of that 256-pair table in static shared memory (256 x copies x 4 bytes); thread t reads copy
/// t % copies, so threads t and t' can meet in a bank only when t = t' mod copies and their bytes' low bits agree.
/// With 8 copies, 4 lanes of a warp shared each bank group: the table formats' wgmma_ws mainloop ran 4-13% slower.
/// gemv / wgmma: 16 copies (2 lanes per bank group); wgmma_ws: 32, one bank per lane.
constexpr int kGemvTableCopies = 16;
constexpr int kWsTableCopies = 32;
/// Static shared memory of the decode table for format f with `copies` copies (16 bytes of placeholder otherwise).
KT_HD constexpr int table_bytes(quant::Format f, int copies) { return format_uses_table(f) ? 256 * copies * 4 : 16; }
/// gemv: dynamic shared memory cap per block: the per-block opt-in limit less the kernel's static shared
/// memory (the decode table and 1 KB for the rest), which counts against the same limit.
KT_HD constexpr int gemv_smem_cap(int sm) { return max_smem_per_block(sm) - 1024 - 256 * kGemvTableCopies * 4; }
/// gemv bulk_rows: bytes of one row's packed data a block holds in shared memory for K = k split over `cluster`
/// blocks: the whole row, or ceil(K steps / cluster) warp steps (block rank r copies steps [steps r / cluster, steps
/// (r + 1) / cluster) of every row, at most this many).
/// (the balanced tail holds whole rows too: its pieces copy their K range to the start of each row.)
KT_HD constexpr int gemv_seg_bytes(quant::Format f, int k, int cluster) {
  return cluster <= 1 ? row_data_bytes(f, k)
                      : ((k + gemv_step_k(f) - 1) / gemv_step_k(f) + cluster - 1) / cluster *
                            (gemv_step_k(f) * quant::format_bits(f) / 8);
}
/// gemv tma / tma_x: ring slots per warp (the TMA window, prefetch + 1 steps, plus the step being decoded) and the
/// ring's bytes per block: every warp x slots x its m16 tiles x one 1 KB box (16 rows x 64 bytes).
KT_HD constexpr int gemv_ring_slots(const Config& c) { return c.gemv.prefetch + 2; }
KT_HD constexpr int gemv_ring_bytes(const Config& c) {
  return c.gemv.warps_k * c.gemv.warps_n * gemv_ring_slots(c) * gemv_row_tiles(c) * 1024;
}
/// gemv tma_x: bytes of one X box (tile_m tokens x one warp step of K in the activation dtype: 256 bytes per token
/// for 4-bit weights, 128 for int8) and of the per-warp X rings (every warp x prefetch + 1 slots x box: a step's X is
/// read into registers when the step starts, so the window needs no slot more), 1024-byte aligned for the 128-byte
/// swizzle.
KT_HD constexpr int gemv_x_box_bytes(const Config& c, quant::Format f) { return c.tile_m * gemv_step_k(f) * 2; }
KT_HD constexpr int gemv_x_ring_bytes(const Config& c, quant::Format f) {
  return c.gemv.load == GemvLoad::tma_x
             ? c.gemv.warps_k * c.gemv.warps_n * (c.gemv.prefetch + 1) * gemv_x_box_bytes(c, f)
             : 0;
}
/// gemv: the K-independent shared memory: partial sums of the block's K slices 1.. (a float4 per lane per m16 tile
/// per n8 tile), then for a cluster reduction the partial sums of cluster ranks 1.. (read by rank 0).
KT_HD constexpr int gemv_partial_bytes(const Config& c) {
  return (c.gemv.warps_k - 1 + gemv_cluster(c) - 1) * c.gemv.warps_n * gemv_row_tiles(c) * (c.tile_m / 8) * 32 * 16;
}
/// gemv: whether a kernel of `stages` reads each step's per-group scales (and int4 zero points) from a shared-memory
/// copy (qkv_gemv.cuh): bulk_rows, tma and tma_x. The register ring loads their raw bits from global memory with each
/// step's units and converts them where the step uses them (qkv_gemv.cuh, scales_of_bits). Measured on the H100 at M = 1
/// (bf16, tuner timing, a register-ring variant of tile_m 8, 8 warps splitting K, prefetch 1): converted right after the load (the
/// conversion branches on the loaded byte and holds the ring's next loads behind it), mxfp4 ran 9.9 us and nvfp4 10.3;
/// with a per-warp shared-memory copy of their scales 9.0-9.3; with the raw bits in the ring 8.9-9.0 / 8.8-8.9.
KT_HD constexpr bool gemv_smem_scales(GemvLoad load) { return load != GemvLoad::register_ring; }
/// gemv shared memory for K = k: gemv_partial_bytes, then for bulk_rows / tma / tma_x the block's packed data (bulk_rows: its
/// rows, [tiles][16 rows][seg bytes]; tma / tma_x: the per-warp ring, gemv_ring_bytes, 128-byte aligned: 128 bytes of
/// slack; tma_x first the X rings, gemv_x_ring_bytes, 1024-byte aligned: 1024 bytes of slack instead), the rows'
/// whole scales and zero points, each [tiles][16 rows][row bytes] (gemv_smem_scales), and for stages
/// tma / tma_x one mbarrier per (K step, warp column).
KT_HD constexpr int gemv_smem_bytes(const Config& c, quant::Format f, int k) {
  return gemv_partial_bytes(c) +
         (c.gemv.load == GemvLoad::bulk_rows ? c.tile_n * gemv_seg_bytes(f, k, gemv_cluster(c)) : 0) +
         (gemv_smem_scales(c.gemv.load) ? c.tile_n * (row_scale_bytes(f, k) + row_zero_bytes(f, k)) : 0) +
         (gemv_tma(c) ? (c.gemv.load == GemvLoad::tma_x ? 1024 : 128) + gemv_x_ring_bytes(c, f) + gemv_ring_bytes(c) +
                            8 * c.gemv.warps_n * ((k + gemv_step_k(f) - 1) / gemv_step_k(f))
                      : 0);
}

/// gemv GemvReduce::balanced_tail: how a grid of `units` (row block, token tile) units is cut so that every SM
/// decodes about the same number of K steps. A grid of whole units puts ceil(units / sm_count) of them on some SMs and
/// one fewer on the others: Qwen2.5-7B's 288 m16 row blocks on 132 SMs leave 24 SMs with 3 blocks, whose decode ends
/// about 1.4 us after the 2-block SMs'. So the first `full` = units - tail units (a multiple of
/// sm_count) run whole, one block each, and each of the last `tail` = units mod sm_count units is split along K into
/// `split` = min(sm_count / tail, K steps) pieces (piece i: steps [steps i / split, steps (i + 1) / split)), one block
/// each: about one piece per SM. The pieces meet through the workspace (the last to arrive sums them in piece order
/// and runs the epilogue), with one self-resetting counter per (tail unit, warp column). grid = full + tail x split.
/// sm_count < 1 gives split 1 (the caller reports the error; see qkv::launch_dims).
struct GemvBalance {
  int full;   ///< units run whole, blocks [0, full)
  int tail;   ///< units split along K, after the whole ones
  int split;  ///< pieces per tail unit (1: no split)
  KT_HD constexpr long long blocks() const { return full + (long long)tail * split; }
};
KT_HD constexpr GemvBalance gemv_balance(long long units, int steps, int sm_count) {
  if (sm_count < 1 || units < 1) return GemvBalance{int(units), 0, 1};
  const int tail = int(units % sm_count);
  if (tail == 0) return GemvBalance{int(units), 0, 1};
  const int want = sm_count / tail;
  return GemvBalance{int(units - tail), tail, want < 1 ? 1 : want > steps ? (steps < 1 ? 1 : steps) : want};
}

/// Kernel arguments. Strides in elements.
struct QkvParams {
  const void* x;         ///< [M, K] activations, row stride x_row_stride
  const void* w_data;    ///< packed weight data (quant_format.h)
  const void* w_scales;  ///< scales (null for fp16/bf16)
  const void* w_zeros;   ///< int4 zero points (else null)
  const void* bias;      ///< [N] activation dtype, or null when the class has no bias
  const int* positions;  ///< [M] token positions for RoPE (null when the class has no RoPE)
  void* q;               ///< [M, Hq, D]
  void* k;               ///< [M, Hkv, D]; may be null with a slot mapping (below)
  void* v;               ///< [M, Hkv, D]; may be null with a slot mapping (below)
  float* workspace;      ///< split-K partial tiles (workspace_bytes), or null when split_k == 1
  unsigned* counters;    ///< one zero-initialized counter per output tile (self-resetting), or null
  long long x_row_stride, q_row_stride, k_row_stride, v_row_stride;
  int m, k_dim, num_heads, num_kv_heads;
  float tensor_scale;      ///< nvfp4 per-tensor scale (1 otherwise)
  double rope_log2_theta;  ///< log2(rope_theta), double: inverse frequencies must be exact to ~1e-12 for positions ~1e5
  /// 1: wgmma_pairs, wgmma_ws and gemv load the weight with the L2 policy evict_first (ptx::l2_evict_first_if), so
  /// its stream does not displace other data from the L2; 0: no hint. Written by qkv::launch (qkv::weight_evict_first).
  int w_evict_first;
  /// gemv balanced_tail (gemv_balance): units run whole (blocks [0, gemv_full)) and pieces per tail unit; written by
  /// qkv::launch, ignored by every other config.
  int gemv_full, gemv_split;
  /// 1: the packed weight is K-blocked ([K bytes / 64][N][64 bytes], int8_kb64 / *_kb128; quant_format.h), so gemv
  /// tma / tma_x and wgmma_ws address their TMA boxes in that map's coordinates (WsParams) and the gemv register ring its units
  /// at (step N + row) 64 + 16 q; 0: row-major. Written by
  /// qkv::launch from the problem's format. (16-bit K-blocked weights need no flag: their maps share coordinates.)
  int w_k_blocked;
  /// Paged KV-cache write (the vLLM / TensorRT-LLM layout) of the KvCache kernel class (null otherwise). slot_mapping [M] int32:
  /// token m's K (after RoPE) and V heads go to slot s = slot_mapping[m] = page * page_size + offset of k_cache /
  /// v_cache [num_pages, page_size, Hkv, D] (the projection's dtype; element (page, offset, h, d) at page *
  /// *_cache_page_stride + offset * *_cache_slot_stride + h * *_cache_head_stride + d, strides in elements); s = -1
  /// skips the token. The kernels trust the slots (device memory): each must be -1 or in [0, num_pages * page_size),
  /// and no two tokens may share one. With a slot mapping, k and v may be null (only the cache is written, as
  /// TensorRT-LLM's fused QKV does); when non-null they still receive every token, skipped ones included. num_pages
  /// is read by check_params only.
  const int* slot_mapping;
  void* k_cache;
  void* v_cache;
  long long k_cache_page_stride, k_cache_slot_stride, k_cache_head_stride;
  long long v_cache_page_stride, v_cache_slot_stride, v_cache_head_stride;
  int num_pages, page_size;
};

using kt::TmaDescriptor;  // common/kt_types.h
/// Kernel arguments of wgmma_ws, wgmma_pairs and gemv tma / tma_x (passed __grid_constant__): the QkvParams plus two
/// tensor maps, written by qkv::launch (runtime/qkv.cpp); gemv tma uses only w_map, tma_x also x_map, both
/// described at qkv_gemv_tma (qkv_gemv.cuh); wgmma_pairs' w_map: qkv_wgmma_pairs.cuh.
///   x_map  X as a 2-D tensor of 16-bit elements {K, M} (row stride x_row_stride), box {64, tile_m}, 128-byte swizzle;
///          rows past M read as zeros.
///   w_map  the packed weight data: 16-bit formats as {64, N, K / 64} elements (a K step's 64 elements, rows, K
///          steps; the strides of row-major or K-blocked data), box {64, tile_n, 1}, 128-byte swizzle; the others as
///          bytes {K bits / 8, N}, box {64 bits / 8, tile_n}, no swizzle (the rows' K-step bytes, densely), or, K-blocked
///          (QkvParams::w_k_blocked), {64, N, K bits / 8 / 64} bytes (strides 64, 64 N), box {64 bits / 8, tile_n, 1}.
struct WsParams {
  TmaDescriptor x_map, w_map;
  QkvParams p;
};

/// Threads per block: the compute warps, plus the producer warpgroup of wgmma_ws.
KT_HD constexpr int threads(const Config& c) {
  return c.mainloop == Mainloop::mma           ? c.mma.warps_m * c.mma.warps_n * 32
         : c.mainloop == Mainloop::gemv        ? c.gemv.warps_k * c.gemv.warps_n * 32
         : c.mainloop == Mainloop::wgmma       ? c.tile_m / 16 * 32
         : c.mainloop == Mainloop::wgmma_ws    ? c.ws.consumers * c.ws.k_groups * 128 + 128
         : c.mainloop == Mainloop::wgmma_pairs ? c.tile_m / 16 * 32 + 32
                                               : 0;
}

/// Shared memory: max(mainloop = stages X tiles + 2 decoded W tiles, epilogue = fp32 output tile + pad);
/// gemv: the K-independent part (partial sums of K slices 1..); see gemv_smem_bytes for the whole.
KT_HD constexpr int smem_bytes(const Config& c) {
  return c.mainloop == Mainloop::gemv ? gemv_partial_bytes(c)
         : (c.mma.stages * c.tile_m * c.mma.tile_k * 2 + 2 * c.tile_n * c.mma.tile_k * 2) >
                 (c.tile_m * (c.tile_n + 4) * 4)
             ? (c.mma.stages * c.tile_m * c.mma.tile_k * 2 + 2 * c.tile_n * c.mma.tile_k * 2)
             : (c.tile_m * (c.tile_n + 4) * 4);
}

/// 16-byte packed-weight units one block loads per K step.
KT_HD constexpr int w_units(const Config& c, quant::Format f) {
  return c.tile_n * tile_k(c) * quant::format_bits(f) / 8 / 16;
}

/// wgmma: shared-memory buffers of the weight tile: 3 decoded buffers (quantized), or stages + 1 cp.async slots (16-bit).
KT_HD constexpr int wgmma_w_buffers(const Config& c, quant::Format f) {
  return quant::format_bits(f) == 16 ? c.wgmma.stages + 1 : 3;
}
/// wgmma dynamic shared memory: 1024 bytes of alignment slack + max(mainloop = stages X tiles + weight buffers,
/// epilogue = fp32 output tile [tile_m][tile_n + 4]).
KT_HD constexpr int wgmma_smem_bytes(const Config& c, quant::Format f) {
  return 1024 + ((c.wgmma.stages * c.tile_m + wgmma_w_buffers(c, f) * c.tile_n) * c.wgmma.tile_k * 2 >
                         c.tile_m * (c.tile_n + 4) * 4
                     ? (c.wgmma.stages * c.tile_m + wgmma_w_buffers(c, f) * c.tile_n) * c.wgmma.tile_k * 2
                     : c.tile_m * (c.tile_n + 4) * 4);
}
/// wgmma: registers per thread: 40 + tile_n / 2 accumulators (+ 20 for the table formats' fp32 fallback decode) + 7
/// per packed unit in the register ring (4 data, 3 scales) + tile_n / 4 for tile_k 128 on tiles of 16384 elements or
/// more (twice the weight tile copied or decoded per step); must stay within 200 (128 for the 512 threads of tile_m
/// 256) to leave the decode room. The tile_k 128 term: the full compile sweep found 64 x 256 (fp16) and 256 x
/// 128 (fp16, int8, int4) tile_k 128 binaries spilling 48-416 bytes once the table allowance of the shared-memory rule
/// (counted for every format before) no longer rejected them.
KT_HD constexpr int wgmma_reg_estimate(const Config& c, quant::Format f) {
  return 40 + c.tile_n / 2 + (format_uses_table(f) ? 20 : 0) +
         (c.wgmma.tile_k == 128 && c.tile_m * c.tile_n >= 16384 ? c.tile_n / 4 : 0) +
         (quant::format_bits(f) == 16 ? 0
                                      : 7 * c.wgmma.prefetch * ((w_units(c, f) + c.tile_m * 2 - 1) / (c.tile_m * 2)));
}

/// RoPE angle reduction in fixed point (the qkv epilogues; RoFormer rotate-half, angle = pos x theta^(-2i/D)).
/// turns = round(2^64 theta^(-2i/D) / (2 pi)), the angle per position unit as a 64-bit fraction of a turn (< 2^62).
/// Returns the angle of integer position pos reduced mod 2 pi to [-pi, pi): the low 64 bits of pos (sign-extended)
/// x turns are the angle's fraction of a turn, exactly; their top word t, as a signed 32-bit fraction, gives t 2 pi /
/// 2^32 with |error| < 4e-7 rad (the int-to-float conversion 1e-7, the float constant's and the product's roundings
/// 2e-7 and 1.2e-7 at |angle| near pi; the dropped low word < 2^-32 turns).
KT_HD inline float rope_angle(int pos, unsigned long long turns) {
  const unsigned lo = unsigned(turns), hi = unsigned(turns >> 32), up = unsigned(pos);
#ifdef __CUDA_ARCH__
  unsigned t = __umulhi(up, lo) + up * hi;  // bits 32..63 of (unsigned) pos x turns
#else
  unsigned t = unsigned((unsigned long long)up * lo >> 32) + up * hi;
#endif
  if (pos < 0) t -= lo;                            // sign extension: pos - 2^32 adds -2^32 turns
  return float(int(t)) * 1.4629180792671596e-09f;  // 2 pi / 2^32
}

/// wgmma_ws: consumer warpgroups, m64 atoms per consumer warpgroup, bytes of one weight row per K step (64 elements)
/// in the shared-memory ring, and dynamic shared memory: 1024 bytes of alignment slack + max(ring = stages x (X tile
/// [tile_m][64] + weight tile [tile_n][row bytes]), epilogue = fp32 output tile [tile_m][tile_n + 4]).
KT_HD constexpr int ws_consumers(const Config& c) { return c.ws.consumers; }
KT_HD constexpr int ws_atoms(const Config& c) { return c.ws.consumers >= 1 ? c.tile_n / (64 * c.ws.consumers) : 0; }
KT_HD constexpr int ws_w_row_bytes(quant::Format f) { return 64 * quant::format_bits(f) / 8; }
/// wgmma_ws split_k > 1 (a cluster of split_k blocks per tile): the most token rows one rank reduces and finishes.
/// The tile's G = tile_m / 8 groups of 8 tokens are dealt out in contiguous ranges, rank r taking groups
/// [G r / split_k, G (r + 1) / split_k) (ws_group_owner); with more ranks than groups some ranks own none.
KT_HD constexpr int ws_cluster_rows(const Config& c) {
  return ws_cluster(c) > 1 ? 8 * ((c.tile_m / 8 + ws_cluster(c) - 1) / ws_cluster(c)) : c.tile_m;
}
/// The cluster rank that owns 8-token group i of G groups split over `ranks` ranks (the largest r with G r / ranks <= i).
KT_HD constexpr int ws_group_owner(int i, int G, int ranks) { return ((i + 1) * ranks - 1) / G; }
/// wgmma_ws: the ring, stages x (X tile [tile_m][64] + weight rows [tile_n][row bytes]).
KT_HD constexpr int ws_ring_bytes(const Config& c, quant::Format f) {
  return c.ws.stages * (c.tile_m * 128 + c.tile_n * ws_w_row_bytes(f));
}
/// wgmma_ws: static shared memory that holds a tile's epilogue inputs (bias pairs [tile_n / 2] and positions [tile_m];
/// the RoPE table of D / 2 words replaces finish_tile's own), copied with cp.async while the ring fills: by a split-K
/// block before its mainloop, by a stream-K block at the start of each segment.
KT_HD constexpr int ws_epi_pre_bytes(const Config& c) { return c.tile_n * 2 + c.tile_m * 4; }
/// wgmma_ws: whether `dynamic_bytes` of dynamic shared memory fit in one block beside the static arrays (the code
/// table, the epilogue inputs, 1024 bytes for the barriers and the rest).
KT_HD constexpr bool ws_smem_fits(const Config& c, quant::Format f, int dynamic_bytes, int sm = 90) {
  return dynamic_bytes + table_bytes(f, kWsTableCopies) + ws_epi_pre_bytes(c) + 1024 <= max_smem_per_block(sm);
}
/// wgmma_ws: token rows of the fp32 output tile the epilogue goes through at a time: the whole tile_m; for stream-K
/// (whose output tile sits beside the ring) the largest of tile_m, 128 and 64 whose tile fits beside the ring, else
/// 32; for a cluster (split_k > 1) the rank's own rows.
KT_HD constexpr bool ws_stream_k_rows_fit(const Config& c, quant::Format f, int rows) {
  return rows <= c.tile_m && ws_smem_fits(c, f, 1024 + ws_ring_bytes(c, f) + rows * (c.tile_n + 4) * 4);
}
KT_HD constexpr int ws_epilogue_rows(const Config& c, quant::Format f) {
  return !ws_stream_k(c)                        ? (ws_cluster(c) > 1 ? ws_cluster_rows(c) : c.tile_m)
         : c.tile_m <= 32                       ? c.tile_m
         : ws_stream_k_rows_fit(c, f, c.tile_m) ? c.tile_m
         : ws_stream_k_rows_fit(c, f, 128)      ? 128
         : ws_stream_k_rows_fit(c, f, 64)       ? 64
                                                : 32;
}
/// wgmma_ws: the fp32 output tile [ws_epilogue_rows][tile_n + 4].
KT_HD constexpr int ws_tile_bytes(const Config& c, quant::Format f) {
  return ws_epilogue_rows(c, f) * (c.tile_n + 4) * 4;
}
/// wgmma_ws split_k >= 1: the ring and, over it, the fp32 output tile: the larger of the two.
KT_HD constexpr int ws_ring_or_tile_bytes(const Config& c, quant::Format f) {
  return ws_ring_bytes(c, f) > ws_tile_bytes(c, f) ? ws_ring_bytes(c, f) : ws_tile_bytes(c, f);
}
KT_HD constexpr int ws_align16(int b) { return (b + 15) / 16 * 16; }
/// wgmma_ws split_k > 1: bytes of one partial slot, another rank's fp32 partial sums of this rank's token rows
/// (ws_cluster_rows x tile_n, in the accumulator layout); a rank has split_k - 1 of them.
KT_HD constexpr int ws_cluster_slot_bytes(const Config& c) { return ws_cluster_rows(c) * c.tile_n * 4; }
/// wgmma_ws split_k > 1: a rank's split_k - 1 partial slots (the other ranks' partials of its rows, one per source
/// rank, stored by st.async) and the fp32 output tile of its rows. The tile is written after the rank's own mainloop,
/// so it lies over the ring. The slots lie beside the ring when they fit (the other ranks store into them while this
/// rank's mainloop still runs); otherwise over it, first, with the tile after them, and the ranks pass a cluster
/// barrier after their mainloops before any store.
KT_HD constexpr int ws_cluster_area_bytes(const Config& c) { return (ws_cluster(c) - 1) * ws_cluster_slot_bytes(c); }
KT_HD constexpr bool ws_cluster_slots_beside(const Config& c, quant::Format f) {
  return ws_smem_fits(c, f, 1024 + ws_align16(ws_ring_or_tile_bytes(c, f)) + ws_cluster_area_bytes(c));
}
/// Byte offsets from the 1024-aligned base: the partial slots, the output tile.
KT_HD constexpr int ws_cluster_slot_offset(const Config& c, quant::Format f) {
  return ws_cluster_slots_beside(c, f) ? ws_align16(ws_ring_or_tile_bytes(c, f)) : 0;
}
KT_HD constexpr int ws_cluster_tile_offset(const Config& c, quant::Format f) {
  return ws_cluster_slots_beside(c, f) ? 0 : ws_cluster_area_bytes(c);
}
/// wgmma_ws dynamic shared memory (+ 1024 for the 1024-byte alignment of the swizzled tiles). Stream-K keeps
/// the ring and the output tile apart: ring + ws_epilogue_rows x (tile_n + 4) fp32. Split-K: the output tile over the
/// ring, and for split_k > 1 the cluster's split_k - 1 partial slots beside both or over the ring
/// (ws_cluster_slots_beside).
KT_HD constexpr int ws_smem_bytes(const Config& c, quant::Format f) {
  return 1024 + (ws_stream_k(c)                  ? ws_ring_bytes(c, f) + ws_tile_bytes(c, f)
                 : ws_cluster(c) == 1            ? ws_ring_or_tile_bytes(c, f)
                 : ws_cluster_slots_beside(c, f) ? ws_cluster_slot_offset(c, f) + ws_cluster_area_bytes(c)
                                                 : (ws_ring_bytes(c, f) > ws_cluster_area_bytes(c) + ws_tile_bytes(c, f)
                                                        ? ws_ring_bytes(c, f)
                                                        : ws_cluster_area_bytes(c) + ws_tile_bytes(c, f)));
}
/// wgmma_ws: fp32 partial-tile slots of the stream-K workspace for a grid of `blocks`: two per block (a block's range
/// can start and end inside a tile). split_k > 1 reduces through the cluster's shared memory instead: none.
KT_HD constexpr long long ws_workspace_slots(const Config& c, long long blocks) {
  return ws_stream_k(c) ? 2 * blocks : 0;
}
/// wgmma_ws: consumer registers per thread (ptxas, CUDA 13): 40 + accumulators (atoms x tile_m / 2) + for quantized
/// weights 24 per atom (the double-buffered A fragments, partly reused), 20 more per atom for the table formats (their
/// per-slice scales and fp32 fallback), 20 more per atom for stream-K (the segment walk and the partial reduction
/// live beside the accumulators). The CI sweep saw 2-atom x 128-token table and stream-K variants spill 4-52 bytes
/// under smaller terms. Budget: 232 with two consumer warpgroups (setmaxnreg), else 255.
KT_HD constexpr int ws_reg_estimate(const Config& c, quant::Format f) {
  return 40 + ws_atoms(c) * c.tile_m / 2 + (quant::format_bits(f) == 16 ? 0 : 24 * ws_atoms(c)) +
         (format_uses_table(f) ? 20 * ws_atoms(c) : 0) + (ws_stream_k(c) ? 20 * ws_atoms(c) : 0);
}
/// wgmma_ws: registers per thread a consumer warpgroup raises itself to (setmaxnreg) when there are two of them; the
/// producer warpgroup drops to kWsProducerRegs. The block keeps the registers it was launched with (the launch
/// bounds' cap: 168 per thread for 384 threads, 96 for 640), so 128 x 40 + 256 x 232 <= 384 x 168; with four consumer
/// warpgroups (two K groups of two) 128 x 24 + 512 x 112 <= 640 x 96 (24 is setmaxnreg's minimum). A larger request
/// never returns (setmaxnreg.inc waits for registers the block does not have).
constexpr int kWsConsumerRegs = 232, kWsProducerRegs = 40;
constexpr int kWsConsumerRegs4 = 112, kWsProducerRegs4 = 24;
static_assert(128 * kWsProducerRegs + 256 * kWsConsumerRegs <= 384 * 168,
              "wgmma_ws: setmaxnreg beyond the block's registers");
static_assert(128 * kWsProducerRegs4 + 512 * kWsConsumerRegs4 <= 640 * 96,
              "wgmma_ws: setmaxnreg beyond the block's registers");
/// wgmma_ws: K groups (WsConfig::k_groups, 1 or 2): with 2, each feature warpgroup has a twin that takes every other K
/// step of the block's range (twice the decode threads per SM for the same tile and grid); the twins' partial sums meet
/// in shared memory over the ring after the mainloop (ws_kgroup_xfer_bytes).
KT_HD constexpr int ws_kgroups(const Config& c) { return c.ws.k_groups; }
KT_HD constexpr int ws_kgroup_xfer_bytes(const Config& c) {
  return c.ws.k_groups > 1 ? 128 * ws_consumers(c) * ws_atoms(c) * c.tile_m * 2 : 0;
}
/// wgmma_ws: registers per consumer thread: the setmaxnreg target for two or four consumer warpgroups, else 255.
KT_HD constexpr int ws_consumer_reg_budget(const Config& c) {
  return ws_consumers(c) * c.ws.k_groups == 4   ? kWsConsumerRegs4
         : ws_consumers(c) * c.ws.k_groups == 2 ? kWsConsumerRegs
                                                : 255;
}

/// wgmma_pairs: RoPE pairs of a feature tile (tile_n / 2); pairs of each head in the tile (PB: the widest of 16 / 8 /
/// 4 that fits tile_n, so output pieces are as long as possible; all divide D/2 = 32 or 64) and heads in the tile
/// (HN = tile_n / 2 PB): one TMA box {64, PB, 2 halves, HN}; bytes of one row of a warp's output staging tile (both
/// halves' 16-bit values, + 16 bytes against bank conflicts), the ring (stages x (X [tile_m][64] + W [tile_n][64],
/// 16-bit, 128-byte rows)) and the dynamic shared memory (1024 bytes of alignment slack + the larger of the ring and
/// the staging tile [tile_m][row bytes], which lies over it).
KT_HD constexpr int wp_pairs(const Config& c) { return c.tile_n / 2; }
KT_HD constexpr int wp_box_pairs(const Config& c) { return c.tile_n % 32 == 0 ? 16 : c.tile_n % 16 == 0 ? 8 : 4; }
KT_HD constexpr int wp_box_heads(const Config& c) { return c.tile_n / (2 * wp_box_pairs(c)); }
KT_HD constexpr int wp_stage_row_bytes(const Config& c) { return 2 * c.tile_n + 16; }
KT_HD constexpr int wp_ring_bytes(const Config& c) { return c.pairs.stages * (c.tile_m + c.tile_n) * 128; }
/// The epilogue's staging tile [tile_m][wp_stage_row_bytes] lies over the ring: every consumer has waited for the
/// last step's data and its wgmmas have retired by the barrier before the staging writes.
KT_HD constexpr int wp_stage_bytes(const Config& c) { return c.tile_m * wp_stage_row_bytes(c); }
KT_HD constexpr int wp_smem_bytes(const Config& c) {
  return 1024 + (wp_ring_bytes(c) > wp_stage_bytes(c) ? wp_ring_bytes(c) : wp_stage_bytes(c));
}
/// wgmma_pairs static shared memory: 2 x stages mbarriers, bias [tile_n] 16-bit, positions [tile_m], RoPE turns [D/2] (8
/// bytes each), and per box an output pointer and row stride.
KT_HD constexpr int wp_static_bytes(const Config& c, int head_dim) {
  return 16 * c.pairs.stages + 2 * c.tile_n + 4 * c.tile_m + 4 * head_dim + 16 * wp_box_heads(c);
}

/// gemv: registers per thread, a model fitted to NVRTC/ptxas (CUDA 13, sm_90a) over every gemv variant of nvfp4, int4,
/// int8 and fp16 at M 1, 16, 64 so that no variant within gemv_reg_cap spills (it rejects 37 of 442 that would not):
/// 16 + accumulators (6 per row tile x n-tile; int4's step partials 8 more) + the register_ring weight ring (12 per row
/// tile per prefetched step) + the X ring (1.5 x min(prefetch, 2) steps x 64 / bits words per n-tile) + per row tile
/// 20 (register_ring) or, for units read from shared memory, 12 for one row tile and 28 each for two; nvfp4 (two
/// scales per unit) on the register ring with two row tiles 16 more, and its balanced stages-2 variants with 2 or 4 warp
/// columns 24 more (fitted to ptxas: both held 80 registers only just). Not covered: with fp16
/// activations, 7 nvfp4 (row-major) register_ring variants of tile_m 16 without the balanced tail spill 8 bytes at 128
/// registers (the ring carries raw scale bits); their bf16 twins, the same
/// configs, do not spill, and the model has no dtype, so they stay valid (tma_x is M = 16's winner). Likewise 4
/// bf16 int8 stages-3 variants of tile_m 32 (M 17..64) spill 10 bytes at 128 registers (the TMA request sits at the
/// end of the step); their fp16 twins do not, and M = 64's int8 winner is
/// wgmma_ws.
KT_HD constexpr int gemv_reg_estimate(const Config& c, quant::Format f) {
  return 16 + gemv_row_tiles(c) * (c.tile_m / 8) * (quant::format_element(f) == quant::Format::int4 ? 14 : 6) +
         (gemv_ring(c) ? c.gemv.prefetch * 12 * gemv_row_tiles(c) : 0) +
         3 * (c.gemv.prefetch >= 2 ? 2 : 1) * (64 / quant::format_bits(f)) * (c.tile_m / 8) / 2 +
         (gemv_ring(c)             ? 20
          : gemv_row_tiles(c) == 1 ? 12
                                   : 28) *
             gemv_row_tiles(c) +
         // the balanced tail on the register ring: its runtime K range per block held the table formats' variants 4-24
         // bytes over the cap (the CI nvrtc test); the balanced tma variants compile without spills (except nvfp4's
         // with several warp columns, below)
         (gemv_balanced(c) && gemv_ring(c) ? 8 * gemv_row_tiles(c) : 0) +
         // (the K-blocked unit address costs these 8-16 bytes at 128 registers)
         (quant::format_element(f) == quant::Format::nvfp4 && gemv_ring(c) && gemv_row_tiles(c) == 2 ? 16 : 0) +
         // (nvfp4's balanced tma variants with 2 or 4 warp columns at 256 threads: the straight-line step makes fp16's
         // spill 14 bytes at 80 registers without this term)
         (quant::format_element(f) == quant::Format::nvfp4 && c.gemv.load == GemvLoad::tma && gemv_balanced(c) &&
                  c.gemv.warps_n > 1
              ? 24
              : 0);
}

/// nullptr if (class, config, arch) is valid, else the rule it breaks. flash-style single source of truth:
/// the generator prunes with it, every qkv kernel static_asserts it.
KT_HD constexpr const char* invalid_reason(DType dt, quant::Format f, int head_dim, bool rope, const Config& c,
                                           ArchId arch) {
  // activations: fp16 or bf16.
  if (dt != DType::f16 && dt != DType::bf16) return "activation dtype must be fp16 or bf16";
  // 16-bit weights are stored in the activation dtype.
  if ((quant::element_of(f) == quant::Element::fp16 && dt != DType::f16) ||
      (quant::element_of(f) == quant::Element::bf16 && dt != DType::bf16))
    return "fp16/bf16 weights must match the activation dtype";
  // K-blocked weights (quant_format.h) are read through TMA tensor maps only.
  const bool k_blocked = quant::layout_of(f) == quant::Layout::k_blocked;
  if (k_blocked && quant::format_bits(f) == 16 && c.mainloop != Mainloop::wgmma_ws &&
      c.mainloop != Mainloop::wgmma_pairs)
    return "K-blocked 16-bit weights (fp16_kb64 / bf16_kb64): wgmma_ws or wgmma_pairs only (read through TMA tensor maps)";
  if (k_blocked && quant::format_bits(f) < 16 && c.mainloop != Mainloop::wgmma_ws &&
      !(c.mainloop == Mainloop::gemv && c.gemv.load != GemvLoad::bulk_rows))
    return "K-blocked packed weights (int8_kb64, int4_kb128, nf4_kb128, mxfp4_kb128, nvfp4_kb128): gemv register_ring, tma "
           "or tma_x, or wgmma_ws only (bulk_rows and the other mainloops copy whole row-major rows)";
  // head_dim: 64 or 128.
  if (head_dim != 64 && head_dim != 128) return "head_dim must be 64 or 128";
  // mma.sync m16n8k16 needs sm_80+.
  if (arch.sm < 80) return "needs sm_80 or newer";
  if (c.mainloop == Mainloop::gemv) {
    const GemvConfig& g = c.gemv;
    // tokens: 8 to 64 per block (1..8 mma n-tiles).
    if (c.tile_m != 8 && c.tile_m != 16 && c.tile_m != 32 && c.tile_m != 64)
      return "gemv: tile_m must be 8, 16, 32 or 64";
    if (g.warps_k != 1 && g.warps_k != 2 && g.warps_k != 4 && g.warps_k != 7 && g.warps_k != 8 && g.warps_k != 14 &&
        g.warps_k != 16)
      return "gemv: warps_k (warps splitting K) must be 1, 2, 4, 7, 8, 14 or 16";
    if (g.warps_n != 1 && g.warps_n != 2 && g.warps_n != 4) return "gemv: warps_n must be 1, 2 or 4";
    if (g.warps_k * g.warps_n > 16) return "gemv: at most 16 warps per block";
    if (c.tile_n != g.warps_n * 16 && c.tile_n != g.warps_n * 32)
      return "gemv: tile_n must be warps_n x 16 or warps_n x 32";
    if (g.load != GemvLoad::register_ring && g.load != GemvLoad::bulk_rows && g.load != GemvLoad::tma &&
        g.load != GemvLoad::tma_x)
      return "gemv: load must be register_ring, bulk_rows, tma or tma_x";
    if (g.load != GemvLoad::register_ring && arch.sm < 90)
      return "gemv: bulk_rows, tma and tma_x (cp.async.bulk / TMA) need sm_90";
    if (g.load == GemvLoad::tma_x && (quant::format_bits(f) == 16 || (c.tile_m != 16 && c.tile_m != 32)))
      return "gemv tma_x (X by TMA): packed weights and tile_m 16 or 32 only (at tile_m 8 the box is mostly zero rows: "
             "slower than tma at M = 1)";
    if (g.reduce != GemvReduce::none && g.reduce != GemvReduce::cluster && g.reduce != GemvReduce::balanced_tail)
      return "gemv: reduce must be none, cluster or balanced_tail";
    if (g.reduce == GemvReduce::cluster && g.cluster != 2 && g.cluster != 4 && g.cluster != 8)
      return "gemv: a cluster reduction takes cluster 2, 4 or 8 blocks splitting K";
    if (g.reduce != GemvReduce::cluster && g.cluster != 1) return "gemv: cluster must be 1 without a cluster reduction";
    if (g.reduce == GemvReduce::cluster && (g.load != GemvLoad::bulk_rows || arch.sm < 90))
      return "gemv: a cluster reduction (a thread-block cluster splitting K) needs bulk_rows and sm_90";
    if (g.prefetch != 1 && g.prefetch != 2 && g.prefetch != 4) return "gemv: prefetch must be 1, 2 or 4";
    if (gemv_reg_estimate(c, f) > gemv_reg_cap(threads(c)))
      return "gemv: accumulators + weight prefetch registers exceed the budget";
    if (smem_bytes(c) > max_smem_per_block(arch.sm)) return "shared memory exceeds the per-block limit";
    return nullptr;
  }
  if (c.mainloop == Mainloop::wgmma) {
    const WgmmaConfig& w = c.wgmma;
    if (arch.sm != 90 || !arch.arch_specific) return "wgmma: needs sm_90a (wgmma.mma_async)";
    if (c.tile_m != 64 && c.tile_m != 128 && c.tile_m != 256)
      return "wgmma: tile_m must be 64, 128 or 256 (one warpgroup per 64 tokens)";
    if (c.tile_n != 64 && c.tile_n != 128 && c.tile_n != 256) return "wgmma: tile_n must be 64, 128 or 256";
    if (c.tile_n % head_dim != 0 && head_dim % c.tile_n != 0) return "tile_n and head_dim must divide one another";
    if (rope && c.tile_n % head_dim != 0) return "RoPE needs tile_n to be a multiple of head_dim";
    if (w.tile_k != 64 && w.tile_k != 128) return "wgmma: tile_k must be 64 or 128";
    if (w.stages < 2 || w.stages > 4) return "wgmma: stages must be 2, 3 or 4";
    if (w.split_k < 1 || w.split_k > 16) return "wgmma: split_k must be 1..16";
    if (w.prefetch != 1 && w.prefetch != 2) return "wgmma: prefetch must be 1 or 2";
    if (quant::format_bits(f) == 16 && w.prefetch != 1)
      return "wgmma: 16-bit weights are copied by cp.async: prefetch must be 1";
    if (quant::format_bits(f) != 16 && (w_units(c, f) % threads(c) != 0 || w_units(c, f) / threads(c) > 4) &&
        threads(c) % w_units(c, f) != 0)
      return "wgmma: packed weight units must divide evenly over the threads (at most 4 each), or the threads over the units";
    if (wgmma_reg_estimate(c, f) > (c.tile_m >= 256 ? 128 : 200))
      return "wgmma: accumulators + weight register ring exceed the register budget";
    if (wgmma_smem_bytes(c, f) + table_bytes(f, kGemvTableCopies) + 1024 > max_smem_per_block(arch.sm))
      return "shared memory exceeds the per-block limit";
    return nullptr;
  }
  if (c.mainloop == Mainloop::wgmma_ws) {
    const WsConfig& w = c.ws;
    if (arch.sm != 90 || !arch.arch_specific) return "wgmma_ws: needs sm_90a (wgmma.mma_async, setmaxnreg)";
    if (c.tile_m != 8 && c.tile_m != 16 && c.tile_m != 32 && c.tile_m != 64 && c.tile_m != 96 && c.tile_m != 128 &&
        c.tile_m != 192 && c.tile_m != 256)
      return "wgmma_ws: tile_m (tokens, the wgmma N) must be 8, 16, 32, 64, 96, 128, 192 or 256";
    if (w.consumers != 1 && w.consumers != 2) return "wgmma_ws: consumers (consumer warpgroups) must be 1 or 2";
    if (w.k_groups != 1 && w.k_groups != 2) return "wgmma_ws: k_groups must be 1 or 2";
    if (w.split != WsSplit::split_k && w.split != WsSplit::stream_k && w.split != WsSplit::split_k_tail)
      return "wgmma_ws: split must be split_k, stream_k or split_k_tail";
    if (w.split == WsSplit::split_k_tail && (w.split_k < 2 || w.split_k > 8))
      return "wgmma_ws: split_k_tail splits the last wave's tiles over 2..8 blocks (split_k)";
    if (w.split == WsSplit::stream_k && w.split_k != 1)
      return "wgmma_ws: stream-K takes split_k 1 (its grid is one block per SM)";
    if (w.k_groups == 2 && w.split == WsSplit::stream_k) return "wgmma_ws: two K groups need split_k (not stream-K)";
    if (w.k_groups == 2 && ws_kgroup_xfer_bytes(c) > ws_ring_or_tile_bytes(c, f))
      return "wgmma_ws: the K groups' partial sums must fit over the ring";
    if (c.tile_n != 64 * w.consumers && c.tile_n != 128 * w.consumers)
      return "wgmma_ws: tile_n must be 64 or 128 per consumer warpgroup (1 or 2 m64 atoms)";
    if (c.tile_n % head_dim != 0 && head_dim % c.tile_n != 0) return "tile_n and head_dim must divide one another";
    if (rope && c.tile_n % head_dim != 0) return "RoPE needs tile_n to be a multiple of head_dim";
    if (w.stages < 2 || w.stages > 8) return "wgmma_ws: stages must be 2..8";
    if (w.split_k < 1 || w.split_k > 8)
      return "wgmma_ws: split_k must be 1..8 (split_k > 1: a thread-block cluster of that many blocks, at most the "
             "portable cluster size 8)";
    if (ws_atoms(c) * c.tile_m / 2 > 128) return "wgmma_ws: accumulators exceed 128 registers";
    if (ws_reg_estimate(c, f) > ws_consumer_reg_budget(c))
      return "wgmma_ws: accumulators + A fragments exceed the register budget";
    if (!ws_smem_fits(c, f, ws_smem_bytes(c, f), arch.sm)) return "shared memory exceeds the per-block limit";
    return nullptr;
  }
  if (c.mainloop == Mainloop::wgmma_pairs) {
    const PairsConfig& w = c.pairs;
    if (arch.sm != 90 || !arch.arch_specific) return "wgmma_pairs: needs sm_90a (wgmma.mma_async)";
    if (quant::format_bits(f) != 16)
      return "wgmma_pairs: 16-bit (fp16 / bf16) weights only (copied by TMA straight into the B operand)";
    if (c.tile_m != 64 && c.tile_m != 128)
      return "wgmma_pairs: tile_m must be 64 or 128 (64 tokens per consumer warpgroup)";
    if (c.tile_n != 32 && c.tile_n != 40 && c.tile_n != 48 && c.tile_n != 56 && c.tile_n != 64 && c.tile_n != 72 &&
        c.tile_n != 80 && c.tile_n != 96 && c.tile_n != 128)
      return "wgmma_pairs: tile_n must be 32, 40, 48, 56, 64, 72, 80, 96 or 128 (a wgmma N of wgmma.cuh; 4+ RoPE pairs)";
    if (w.stages < 2 || w.stages > 16) return "wgmma_pairs: stages must be 2..16";
    if (w.cluster_m != 1 && w.cluster_m != 2 && w.cluster_m != 4) return "wgmma_pairs: cluster_m must be 1, 2 or 4";
    if (wp_smem_bytes(c) + wp_static_bytes(c, head_dim) >
        max_smem_per_block(arch.sm))  // (alignment slack: in wp_smem_bytes)
      return "shared memory exceeds the per-block limit";
    return nullptr;
  }
  if (c.mainloop != Mainloop::mma) return "mainloop must be mma, gemv, wgmma, wgmma_ws or wgmma_pairs";
  const MmaConfig& m = c.mma;
  // every head of a tile lies in one of Q, K, V: tile_n a multiple of head_dim, or smaller and dividing it.
  if (c.tile_n <= 0 || (c.tile_n % head_dim != 0 && head_dim % c.tile_n != 0))
    return "tile_n and head_dim must divide one another";
  // RoPE pairs (i, i + D/2) of a head must be in one block: tile_n a multiple of head_dim.
  if (rope && c.tile_n % head_dim != 0) return "RoPE needs tile_n to be a multiple of head_dim";
  // split-K: 1 to 16.
  if (m.split_k < 1 || m.split_k > 16) return "split_k must be 1..16";
  // tile_k: 64 or 128 (the swizzle works on rows of 8 or 16 chunks of 16 bytes).
  if (m.tile_k != 64 && m.tile_k != 128) return "tile_k must be 64 or 128";
  // warps: 4 or 8 per block.
  if (m.warps_m < 1 || m.warps_n < 1 || (m.warps_m * m.warps_n != 4 && m.warps_m * m.warps_n != 8))
    return "warps_m * warps_n must be 4 or 8";
  // warp tiles: 16/32/64 rows, a multiple of 16 columns (ldmatrix.x4 feeds two n8 tiles).
  if (c.tile_m % m.warps_m != 0 || (c.tile_m / m.warps_m) % 16 != 0 || c.tile_m / m.warps_m > 64)
    return "tile_m / warps_m must be 16, 32 or 64";
  if (c.tile_n % m.warps_n != 0 || (c.tile_n / m.warps_n) % 16 != 0) return "tile_n / warps_n must be a multiple of 16";
  // accumulators: (tile_m / warps_m / 16) * (tile_n / warps_n / 8) * 4 fp32 registers <= 128.
  if ((c.tile_m / m.warps_m / 16) * (c.tile_n / m.warps_n / 8) * 4 > 128) return "accumulators exceed 128 registers";
  // weight units divide evenly over the threads; at most 4 per thread (prefetch registers).
  if (w_units(c, f) % threads(c) != 0 || w_units(c, f) / threads(c) > 4)
    return "packed weight units must divide evenly over the threads (at most 4 each)";
  // prefetch depth: 1, 2 or 4 K tiles.
  if (m.prefetch != 1 && m.prefetch != 2 && m.prefetch != 4) return "prefetch must be 1, 2 or 4";
  // at most 4 weight units (64 bytes) in flight per thread: more spills on sm_90.
  if (m.prefetch * (w_units(c, f) / threads(c)) > 4) return "prefetch x weight units per thread must be <= 4";
  // registers: accumulators + 7 per prefetched unit (16 data bytes + scales) within 136, or the variant spills.
  if ((c.tile_m / m.warps_m / 16) * (c.tile_n / m.warps_n / 8) * 4 + 7 * m.prefetch * (w_units(c, f) / threads(c)) >
      136)
    return "accumulators + weight prefetch registers exceed the budget";
  // X ring: 2 or 3 stages.
  if (m.stages != 2 && m.stages != 3) return "stages must be 2 or 3";
  // shared memory within the per-block limit.
  if (smem_bytes(c) > max_smem_per_block(arch.sm)) return "shared memory exceeds the per-block limit";
  return nullptr;
}

}  // namespace qkv
}  // namespace kt
