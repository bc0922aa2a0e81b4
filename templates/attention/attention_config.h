// Flash-attention prefill family: the part shared by host (generator, runtime) and device (NVRTC).
// No standard headers: compiled by NVRTC too.
//
// Split of the family's parameters (ARCHITECTURE.md, "A kernel family"):
//  * Problem (result-defining, host side, generator/attention_family.h): dtype, batch, seqlen_q,
//    seqlen_k, num_heads, num_kv_heads, head_dim, causal. Of these the kernel is compiled for the
//    *kernel class* (dtype, head_dim, causal); everything else is a run-time argument (FwdParams).
//  * Config (speed-only knobs): tile_m, tile_n, warps, stages, mainloop.
// invalid_reason() is the single source of truth for which (class, config, arch) are valid: the
// generator prunes with it and flash_fwd.cuh static_asserts it.
#pragma once
#include "common/kt_types.h"

namespace kt {
namespace attn {

/// Mainloop implementation. kMmaSync: FlashAttention-2 style, mma.sync.m16n8k16 tensor-core
/// instructions fed by ldmatrix from a cp.async multi-stage shared-memory pipeline (sm_80+), flash_fwd.cuh.
/// kWgmmaWs: Hopper (sm_90a), a TMA producer warpgroup and wgmma consumer warpgroups, flash_fwd_ws.cuh.
enum Mainloop : int { kMmaSync = 0, kWgmmaWs = 1 };

/// Speed-only knobs. Never part of the database key. The wgmma_ws fields default to 0 (their value for mma.sync),
/// so an mma.sync config is spelled with its first six fields.
struct Config {
  int tile_m;    ///< query rows per thread block
  int tile_n;    ///< key/value rows per mainloop iteration
  int warps;     ///< warps that own query rows (tile_m / warps each); kWgmmaWs adds a producer warpgroup
  int stages;    ///< K/V shared-memory buffers (1 = load-then-compute, >= 2 = a prefetch ring: cp.async or TMA)
  int mainloop;  ///< Mainloop
  int raster;    ///< block order: 0 = m-block fastest (per (batch, head), causal heaviest first),
                 ///<              1 = m-block slowest (causal: heaviest blocks of every head first)
  /// kWgmmaWs: 1 = intra-warpgroup overlap (tile j's softmax runs while tile j - 1's P V is on the tensor cores;
  /// FlashAttention-3, Algorithm 2), 0 = each GEMM waited for. kMmaSync: 0.
  int overlap = 0;
  /// kWgmmaWs with two consumer warpgroups and overlap: 1 = they take turns issuing GEMMs (one's softmax under the
  /// other's GEMMs; FlashAttention-3's warp-scheduler barriers), 0 = not. Otherwise 0.
  int pingpong = 0;
  /// kWgmmaWs: 1 = at most one block per SM loops over the tiles in the raster's order, loading the next tile's Q
  /// under this tile's last GEMMs and epilogue; 0 = one block per tile. kMmaSync: 0.
  int persistent = 0;
  /// kWgmmaWs: 1 = a tile's query rows are the group = num_heads / num_kv_heads query heads of one KV head at
  /// consecutive positions (FlashAttention-3's PackGQA): each 64-row box holds 64 / group positions of every head of
  /// the group (ws_packed_positions), so a short or few-head problem fills its tiles and reads each K/V tile once per
  /// KV head rather than once per query head. Needs persistent 0, and a problem with 2 <= group <= 64
  /// (pack_gqa_reason); 0 = a tile's rows are consecutive positions of one query head. kMmaSync: 0.
  int pack_gqa = 0;
};

/// Run-time arguments of the kernel. All strides are in elements; the last dimension (head_dim) of
/// every tensor is contiguous. Layouts (FlashAttention's):
///   q   [batch, seqlen_q, num_heads,    head_dim]  dtype
///   k,v [batch, seqlen_k, num_kv_heads, head_dim]  dtype
///   o   [batch, seqlen_q, num_heads,    head_dim]  dtype
///   lse [batch, num_heads, seqlen_q] fp32, contiguous; may be null.
/// Query head h reads key/value head h / (num_heads / num_kv_heads) (GQA; MQA when num_kv_heads == 1).
struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  long long q_batch_stride, q_row_stride, q_head_stride;
  long long k_batch_stride, k_row_stride, k_head_stride;
  long long v_batch_stride, v_row_stride, v_head_stride;
  long long o_batch_stride, o_row_stride, o_head_stride;
  int batch, seqlen_q, seqlen_k, num_heads, num_kv_heads;
  float softmax_scale;  ///< multiplies Q K^T before the softmax (default 1/sqrt(head_dim))
  float scale_log2;     ///< softmax_scale * log2(e): the kernel works with exp2
};

/// Kernel arguments of the Hopper mainloop (flash_fwd_ws.cuh, passed __grid_constant__): the FwdParams plus TMA maps of
/// Q, K, V and O, each a 4-D tensor {head_dim, seqlen, heads, batch} of 16-bit elements with the FwdParams strides and
/// the 128-byte swizzle; box {64, 64, 1, 1} for Q and O (O: stored by the epilogue), {64, tile_n, 1, 1} for K and V.
/// With pack_gqa, Q and O are mapped {head_dim, heads, seqlen, batch} with box {64, group, 64 / group, 1}: one box is
/// the 64 / group positions of a whole group of query heads, a position's heads in consecutive rows.
struct FwdTmaParams {
  FwdParams p;
  TmaDescriptor q_map, k_map, v_map, o_map;
};

/// pack_gqa: query positions per 64-row box (64 / group; the box's last 64 % group rows are unused).
KT_HD constexpr int ws_packed_positions(int group) { return 64 / group; }

/// Query positions one tile covers: tile_m, or with pack_gqa (tile_m / 64) boxes of ws_packed_positions(group) each.
KT_HD constexpr int tile_positions(const Config& c, int group) {
  return c.pack_gqa == 1 ? (c.tile_m / 64) * ws_packed_positions(group) : c.tile_m;
}

/// nullptr when config c can run a problem with num_heads query heads over num_kv_heads KV heads, otherwise the rule
/// it breaks: pack_gqa packs a whole group of query heads into each 64-row box, so it needs 2 to 64 query heads per KV
/// head. The rules that depend on the kernel class alone are invalid_reason's.
KT_HD constexpr const char* pack_gqa_reason(int num_heads, int num_kv_heads, const Config& c) {
  if (c.pack_gqa != 1) return nullptr;
  if (num_kv_heads < 1 || num_heads % num_kv_heads != 0) return "pack_gqa needs num_heads a multiple of num_kv_heads";
  const int group = num_heads / num_kv_heads;
  if (group < 2 || group > 64) return "pack_gqa needs 2 to 64 query heads per KV head (num_heads / num_kv_heads)";
  return nullptr;
}

/// Query-row fragments of 16 rows that each warp owns.
KT_HD constexpr int m_frags_per_warp(const Config& c) { return c.tile_m / (16 * c.warps); }

/// Shared memory of the Q tile and the K/V buffers in bytes: [tile_m, head_dim] + stages * 2 * [tile_n, head_dim]
/// elements of 2 bytes.
KT_HD constexpr int qkv_smem_bytes(const Config& c, int head_dim) {
  return (c.tile_m * head_dim + (c.stages < 1 ? 1 : c.stages) * 2 * c.tile_n * head_dim) * 2;
}

/// kWgmmaWs: bytes of the buffer in which a persistent block's epilogue stages O [tile_m, head_dim] for its TMA
/// store, beside Q and the ring (and the 1 KB alignment slack) when that fits under sm_90's 227 KB; 0 otherwise. A
/// block that holds one tile stages O in its Q tile instead (Q is dead after the tile's last Q K^T), and a persistent
/// block without the buffer stores O from registers (its next tile's Q is loaded under the epilogue).
KT_HD constexpr int ws_o_stage_bytes(const Config& c, int head_dim) {
  return c.mainloop == kWgmmaWs && c.persistent == 1 &&
                 qkv_smem_bytes(c, head_dim) + 1024 + c.tile_m * head_dim * 2 <= max_smem_per_block(90)
             ? c.tile_m * head_dim * 2
             : 0;
}

/// Dynamic shared memory of a block in bytes: qkv_smem_bytes; kWgmmaWs adds the O staging buffer
/// (ws_o_stage_bytes) and 1 KB of slack to align the tiles to the 128-byte swizzle's 1024 bytes.
KT_HD constexpr int smem_bytes(const Config& c, int head_dim) {
  return qkv_smem_bytes(c, head_dim) + (c.mainloop == kWgmmaWs ? 1024 + ws_o_stage_bytes(c, head_dim) : 0);
}

/// Fp32 registers a thread holds for the output accumulator and the score tile, plus the Q
/// fragments when they are kept in registers (one m-fragment per warp). Used to prune variants that
/// would spill.
KT_HD constexpr int accumulator_registers(const Config& c, int head_dim) {
  return m_frags_per_warp(c) * (head_dim / 8) * 4 + m_frags_per_warp(c) * (c.tile_n / 8) * 4 +
         (m_frags_per_warp(c) == 1 ? (head_dim / 16) * 4 : 0);
}

/// The rules of the Hopper mainloop (invalid_reason's kWgmmaWs part).
KT_HD constexpr const char* invalid_reason_ws(int head_dim, const Config& c, ArchId arch) {
  // wgmma, TMA and setmaxnreg: sm_90a (arch-specific) only.
  if (arch.sm != 90 || !arch.arch_specific) return "the wgmma_ws mainloop needs sm_90a";
  // warps: one, two or three consumer warpgroups, each owning 64 query rows (16 per warp).
  if (c.warps != 4 && c.warps != 8 && c.warps != 12)
    return "warps must be 4, 8 or 12 (one, two or three consumer warpgroups)";
  if (c.tile_m != 16 * c.warps) return "tile_m must be 16 * warps (64 query rows per consumer warpgroup)";
  // tile_n: the score tile's wgmma N and one TMA box's rows per 64-column block of K and V; 176 is FlashAttention-3's
  // non-causal head_dim 128 tile (more keys per softmax step and per O rescale, within the consumers' 240 registers).
  if (c.tile_n != 64 && c.tile_n != 128 && c.tile_n != 176) return "tile_n must be 64, 128 or 176";
  // stages: 2..4 K/V ring slots.
  if (c.stages < 2 || c.stages > 4) return "stages must be 2, 3 or 4";
  // Three consumer warpgroups get 160 registers each (setmaxnreg; the producer keeps 24, 512 threads share the 64 K
  // registers): a thread's O accumulator (head_dim / 2), scores (tile_n / 2) and packed P (tile_n / 4) must stay
  // within 128 of them.
  if (c.warps == 12 && head_dim / 2 + 3 * c.tile_n / 4 > 128)
    return "three consumer warpgroups need head_dim / 2 + 3 tile_n / 4 <= 128 (head_dim 128: tile_n 64)";
  if (c.raster != 0 && c.raster != 1) return "raster must be 0 or 1";
  if (c.overlap != 0 && c.overlap != 1) return "overlap must be 0 or 1";
  if (c.pingpong != 0 && c.pingpong != 1) return "pingpong must be 0 or 1";
  if (c.pingpong == 1 && (c.warps == 4 || c.overlap != 1))
    return "pingpong needs two or three consumer warpgroups (warps 8 or 12) and overlap";
  if (c.persistent != 0 && c.persistent != 1) return "persistent must be 0 or 1";
  if (c.pack_gqa != 0 && c.pack_gqa != 1) return "pack_gqa must be 0 or 1";
  if (c.pack_gqa == 1 && c.persistent != 0) return "pack_gqa needs persistent 0";
  if (smem_bytes(c, head_dim) > max_smem_per_block(arch.sm)) return "shared memory exceeds the per-block limit";
  return nullptr;
}

/// nullptr if (kernel class, config, arch) is a valid variant, otherwise the rule it breaks.
/// One clause per rule; flash_fwd.cuh static_asserts the same function.
KT_HD constexpr const char* invalid_reason(DType dtype, int head_dim, bool causal, const Config& c, ArchId arch) {
  // dtype: 16-bit floating-point inputs only (fp32 accumulation).
  if (dtype != DType::f16 && dtype != DType::bf16) return "dtype must be fp16 or bf16";
  // head_dim: 64 or 128 (the shared-memory swizzle works on 8 chunks of 16 bytes per 64 columns).
  if (head_dim != 64 && head_dim != 128) return "head_dim must be 64 or 128";
  if (c.mainloop == kWgmmaWs) return invalid_reason_ws(head_dim, c, arch);
  // mainloop: mma.sync m16n8k16 with bf16 needs sm_80 or newer.
  if (c.mainloop != kMmaSync) return "unknown mainloop (mma.sync or wgmma_ws)";
  if (arch.sm < 80) return "mma.sync mainloop needs sm_80 or newer";
  // warps: 4 or 8 warps per block.
  if (c.warps != 4 && c.warps != 8) return "warps must be 4 or 8";
  // tile_m: each warp owns 16 or 32 query rows (one or two m16 fragments).
  if (c.tile_m % (16 * c.warps) != 0) return "tile_m must be a multiple of 16 * warps";
  if (m_frags_per_warp(c) < 1 || m_frags_per_warp(c) > 2) return "tile_m / warps must be 16 or 32";
  // tile_n: a multiple of 16 (the P.V product steps over keys 16 at a time), 32..128.
  if (c.tile_n % 16 != 0 || c.tile_n < 32 || c.tile_n > 128) return "tile_n must be 32, 48, ..., 128";
  // raster: one of the two block orders.
  if (c.raster != 0 && c.raster != 1) return "raster must be 0 or 1";
  // overlap and pingpong are wgmma_ws schedules.
  if (c.overlap != 0 || c.pingpong != 0 || c.persistent != 0 || c.pack_gqa != 0)
    return "overlap, pingpong, persistent and pack_gqa must be 0 for the mma.sync mainloop";
  // stages: 1 (no prefetch) to 3 K/V buffers.
  if (c.stages < 1 || c.stages > 3) return "stages must be 1, 2 or 3";
  // cp.async tile loads: every thread moves the same number of 16-byte chunks.
  if ((c.tile_n * head_dim / 8) % (32 * c.warps) != 0 || (c.tile_m * head_dim / 8) % (32 * c.warps) != 0)
    return "tile sizes must give every thread the same number of 16-byte chunks";
  // shared memory: Q + stages * (K + V) tiles must fit the architecture's per-block limit.
  if (smem_bytes(c, head_dim) > max_smem_per_block(arch.sm)) return "shared memory exceeds the per-block limit";
  // registers: accumulators must leave room under the 255-register cap, or the variant spills.
  if (accumulator_registers(c, head_dim) > 200) return "accumulator registers exceed 200 per thread";
  (void)causal;  // causal and non-causal share every rule
  return nullptr;
}

}  // namespace attn
}  // namespace kt
