// Quantized fused Q/K/V projection family: the part shared by host and device (NVRTC). No standard headers.
//
//   Y = X W^T + b,  X [M, K] fp16/bf16 (M = tokens), W [(Hq + 2 Hkv) * D, K] in a weight format
//   (quant_format.h), b [N] in the activation dtype (optional). Epilogue: bias, optional RoPE (rotate-half,
//   Llama/Qwen convention) on the Q and K heads, and the split into the attention family's layout:
//   Q [M, Hq, D], K [M, Hkv, D], V [M, Hkv, D] (row strides are parameters: KV-cache slots work).
//
// Kernel class (compiled in): activation dtype, weight format, head_dim, has_bias, rope.
// Config (speed only): tile_m, tile_n, tile_k, warps_m, warps_n, stages (X cp.async ring), split_k.
#pragma once
#include "common/kt_types.h"
#include "qkv_proj/quant_format.h"

namespace kt {
namespace qkv {

struct Config {
  int tile_m;   ///< tokens per block
  int tile_n;   ///< output features per block
  int tile_k;   ///< K step (64 or 128)
  int warps_m;  ///< warps along M
  int warps_n;  ///< warps along N
  int stages;   ///< X tiles in flight (cp.async ring)
  int split_k;  ///< blocks sharing one output tile along K (serial reduction through a workspace)
  int prefetch; ///< K tiles of packed weight in flight per thread (register ring): hides HBM latency at small M
};

/// Kernel arguments. Strides in elements.
struct QkvParams {
  const void* x;            ///< [M, K] activations, row stride x_row_stride
  const void* w_data;       ///< packed weight data (quant_format.h)
  const void* w_scales;     ///< scales (null for fp16/bf16)
  const void* w_zeros;      ///< int4 zero points (else null)
  const void* bias;         ///< [N] activation dtype, or null when the class has no bias
  const int* positions;     ///< [M] token positions for RoPE (null when the class has no RoPE)
  void* q;                  ///< [M, Hq, D]
  void* k;                  ///< [M, Hkv, D]
  void* v;                  ///< [M, Hkv, D]
  float* workspace;         ///< split-K partial tiles (workspace_bytes), or null when split_k == 1
  unsigned* counters;       ///< one zero-initialized counter per output tile (self-resetting), or null
  long long x_row_stride, q_row_stride, k_row_stride, v_row_stride;
  int m, k_dim, num_heads, num_kv_heads;
  float tensor_scale;       ///< nvfp4 per-tensor scale (1 otherwise)
  double rope_log2_theta;   ///< log2(rope_theta), double: inverse frequencies must be exact to ~1e-12 for positions ~1e5
};

KT_HD constexpr int threads(const Config& c) { return c.warps_m * c.warps_n * 32; }

/// Shared memory: max(mainloop = stages X tiles + 2 decoded W tiles, epilogue = fp32 output tile + pad).
KT_HD constexpr int smem_bytes(const Config& c) {
  return (c.stages * c.tile_m * c.tile_k * 2 + 2 * c.tile_n * c.tile_k * 2) > (c.tile_m * (c.tile_n + 4) * 4)
             ? (c.stages * c.tile_m * c.tile_k * 2 + 2 * c.tile_n * c.tile_k * 2)
             : (c.tile_m * (c.tile_n + 4) * 4);
}

/// 16-byte packed-weight units one block loads per K step.
KT_HD constexpr int w_units(const Config& c, quant::Format f) { return c.tile_n * c.tile_k * quant::format_bits(f) / 8 / 16; }

/// nullptr if (class, config, arch) is valid, else the rule it breaks. flash-style single source of truth:
/// the generator prunes with it, qkv_proj.cuh static_asserts it.
KT_HD constexpr const char* invalid_reason(DType dt, quant::Format f, int head_dim, bool rope, const Config& c, ArchId arch) {
  // activations: fp16 or bf16.
  if (dt != DType::f16 && dt != DType::bf16) return "activation dtype must be fp16 or bf16";
  // 16-bit weights are stored in the activation dtype.
  if ((f == quant::Format::fp16 && dt != DType::f16) || (f == quant::Format::bf16 && dt != DType::bf16))
    return "fp16/bf16 weights must match the activation dtype";
  // head_dim: 64 or 128.
  if (head_dim != 64 && head_dim != 128) return "head_dim must be 64 or 128";
  // mma.sync m16n8k16 needs sm_80+.
  if (arch.sm < 80) return "needs sm_80 or newer";
  // tile_k: 64 or 128 (the swizzle works on rows of 8 or 16 chunks of 16 bytes).
  if (c.tile_k != 64 && c.tile_k != 128) return "tile_k must be 64 or 128";
  // warps: 4 or 8 per block.
  if (c.warps_m * c.warps_n != 4 && c.warps_m * c.warps_n != 8) return "warps_m * warps_n must be 4 or 8";
  // warp tiles: 16/32/64 rows, a multiple of 16 columns (ldmatrix.x4 feeds two n8 tiles).
  if (c.tile_m % c.warps_m != 0 || (c.tile_m / c.warps_m) % 16 != 0 || c.tile_m / c.warps_m > 64)
    return "tile_m / warps_m must be 16, 32 or 64";
  if (c.tile_n % c.warps_n != 0 || (c.tile_n / c.warps_n) % 16 != 0) return "tile_n / warps_n must be a multiple of 16";
  // accumulators: (tile_m / warps_m / 16) * (tile_n / warps_n / 8) * 4 fp32 registers <= 128.
  if ((c.tile_m / c.warps_m / 16) * (c.tile_n / c.warps_n / 8) * 4 > 128) return "accumulators exceed 128 registers";
  // RoPE pairs (i, i + D/2) of a head must be in one block: tile_n a multiple of head_dim.
  if (rope && c.tile_n % head_dim != 0) return "RoPE needs tile_n to be a multiple of head_dim";
  // every head of a tile lies in one of Q, K, V: tile_n a multiple of head_dim, or smaller and dividing it.
  if (c.tile_n % head_dim != 0 && head_dim % c.tile_n != 0) return "tile_n and head_dim must divide one another";
  // weight units divide evenly over the threads; at most 4 per thread (prefetch registers).
  if (w_units(c, f) % threads(c) != 0 || w_units(c, f) / threads(c) > 4)
    return "packed weight units must divide evenly over the threads (at most 4 each)";
  // prefetch depth: 1, 2 or 4 K tiles.
  if (c.prefetch != 1 && c.prefetch != 2 && c.prefetch != 4) return "prefetch must be 1, 2 or 4";
  // at most 4 weight units (64 bytes) in flight per thread: more spills on sm_90.
  if (c.prefetch * (w_units(c, f) / threads(c)) > 4) return "prefetch x weight units per thread must be <= 4";
  // registers: accumulators + 7 per prefetched unit (16 data bytes + scales) within 136, or the variant spills.
  if ((c.tile_m / c.warps_m / 16) * (c.tile_n / c.warps_n / 8) * 4 + 7 * c.prefetch * (w_units(c, f) / threads(c)) > 136)
    return "accumulators + weight prefetch registers exceed the budget";
  // X ring: 2 or 3 stages.
  if (c.stages != 2 && c.stages != 3) return "stages must be 2 or 3";
  // split-K: 1 to 16.
  if (c.split_k < 1 || c.split_k > 16) return "split_k must be 1..16";
  // shared memory within the per-block limit.
  if (smem_bytes(c) > max_smem_per_block(arch.sm)) return "shared memory exceeds the per-block limit";
  return nullptr;
}

}  // namespace qkv
}  // namespace kt
