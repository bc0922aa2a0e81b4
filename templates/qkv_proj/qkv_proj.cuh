// Fused Q/K/V projection with block-quantized weights: Y = X W^T + b, RoPE on Q/K, split into Q/K/V.
//
// Mainloop: X tiles [tile_m, tile_k] stream through a cp.async ring (stages); packed W units (16 bytes per
// thread per K step) and their scales are prefetched into registers one K step ahead, dequantized in
// registers (quant_format.h value rules) and stored as fp16/bf16 into a double-buffered swizzled tile
// [tile_n, tile_k]; mma.sync.m16n8k16 with ldmatrix operands, fp32 accumulation. The weight is never
// materialized dequantized in global memory. One barrier per K step.
// Split-K (grid.z, chosen at launch): each block writes its fp32 partial tile to the workspace; the last block to arrive
// (atomic counter, threadfence reduction) sums them and runs the epilogue, then resets the counter.
// Epilogue (through shared memory): + bias, RoPE rotate-half on Q and K heads (Su et al., RoFormer, 2021;
// Llama/Qwen pairing (i, i + D/2), angle = pos * theta^(-2i/D)), write Q/K/V.
#pragma once
#include "common/format_traits.cuh"
#include "common/ptx.cuh"
#include "qkv_proj/qkv_proj_config.h"
#include "qkv_proj/quant_format.h"

namespace kt {
namespace qkv {

template <int TK>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * TK + ((chunk ^ (row & 7)) << 3);
}

using quant::UnitScales;

/// The unit's scales, converted at load (the tiled mainloops' register rings; the gemv rings keep the raw bits).
template <quant::Format F>
__device__ __forceinline__ UnitScales load_scales(const QkvParams& p, int row, int k0) {
  using T = quant::FormatTraits<F>;
  return T::unit_scales(T::global_bits(p.w_scales, p.w_zeros, p.k_dim, row, k0), p.tensor_scale);
}

/// Dequantizes chunk c (compile-time after unrolling; 0 .. words per unit / 4 - 1) of one 16-byte unit into four
/// dtype pairs: out[i] = (element 2 (4c + i), element 2 (4c + i) + 1) of the unit, low half first. A unit holds
/// 32 elements (4-bit: 4 chunks), 16 (int8: 2 chunks) or 8 (16-bit: 1 chunk, copied). Values follow quant_format.h,
/// computed in fp32 and rounded to the mma operand dtype. lut: 16-entry value table (NF4 code or signed E2M1).
template <DType DT, quant::Format F>
__device__ __forceinline__ void decode_chunk(const uint4& u, const UnitScales& s, const float* lut, int c, unsigned (&out)[4]) {
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
  if (quant::format_bits(F) == 16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = w[i];
  } else if (F == quant::Format::int8) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const unsigned word = w[2 * c + i / 2], j = i % 2;  // elements 4 (2c + i/2) + 2j, + 1
      const float a = float(int((signed char)((word >> (16 * j)) & 0xff))) * s.s0;
      const float b = float(int((signed char)((word >> (16 * j + 8)) & 0xff))) * s.s0;
      out[i] = ptx::pack2<DT>(a, b);
    }
  } else {
    const float sc = (F == quant::Format::nvfp4 && c >= 2) ? s.s1 : s.s0;  // nvfp4: elements 16..31 are a second group
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const unsigned q0 = (w[c] >> (8 * j)) & 15u, q1 = (w[c] >> (8 * j + 4)) & 15u;
      float a, b;
      if (F == quant::Format::int4) {
        a = (float(q0) - s.z) * sc;
        b = (float(q1) - s.z) * sc;
      } else {
        a = lut[q0] * sc;
        b = lut[q1] * sc;
      }
      out[j] = ptx::pack2<DT>(a, b);
    }
  }
}

/// Dequantizes one 16-byte unit into dtype pairs: 4-bit -> 16 words (32 elements), int8 -> 8 words, 16-bit -> 4
/// words (copied); out[i] = elements (2i, 2i + 1). See decode_chunk.
template <DType DT, quant::Format F>
__device__ __forceinline__ void decode_unit(const uint4& u, const UnitScales& s, const float* lut, unsigned (&out)[16]) {
  constexpr int kChunks = 128 / quant::format_bits(F) / 8;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    unsigned part[4];
    decode_chunk<DT, F>(u, s, lut, c, part);
#pragma unroll
    for (int i = 0; i < 4; ++i) out[4 * c + i] = part[i];
  }
}

/// RoPE inverse frequency theta^(-2i/D) of rotation pair i < D/2, in double (RoFormer; Llama/Qwen rope_theta).
template <int D>
__device__ __forceinline__ double rope_inv_freq(const QkvParams& p, int i) {
  return exp2(-double(2 * i) / double(D) * p.rope_log2_theta);
}

/// The RoPE angle of pair i per position unit as a 64-bit fixed-point fraction of a turn: round(2^64 theta^(-2i/D) /
/// (2 pi)) (< 2^62; relative error about 2^-52). With it the angle of any integer position reduces mod 2 pi exactly in
/// integer arithmetic (rope_sincos).
template <int D>
__device__ __forceinline__ unsigned long long rope_turns(const QkvParams& p, int i) {
  return __double2ull_rn(rope_inv_freq<D>(p, i) * (18446744073709551616.0 / 6.283185307179586));
}

/// sin and cos of the RoPE angle pos x theta^(-2i/D), turns = rope_turns(i): the angle reduced mod 2 pi in fixed
/// point (rope_angle, qkv_proj_config.h; 2 integer multiplies where the double reduction it replaces took 5
/// double-precision operations and 2 conversions), then __sincosf (|error| < 2^-21.4 on [-pi, pi], CUDA C Programming
/// Guide, intrinsic functions).
__device__ __forceinline__ void rope_sincos(int pos, unsigned long long turns, float& s, float& c) {
  __sincosf(rope_angle(pos, turns), &s, &c);
}

/// d[0..3] += v, and s += v: a float4 partial sum added to four accumulators, component by component (one order, so
/// the split-K, stream-K, cluster and K-group reductions stay deterministic).
__device__ __forceinline__ void add_f4(float* d, const float4& v) { d[0] += v.x, d[1] += v.y, d[2] += v.z, d[3] += v.w; }
__device__ __forceinline__ void add_f4(float4& s, const float4& v) { s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w; }

#ifndef KT_EPI_TRACE  // timeline experiments only (bench/ws_trace): points 10-12 of finish_tile
#define KT_EPI_TRACE(i) \
  do {                  \
  } while (0)
#endif

/// The end of every qkv kernel, run by all kThreads threads of the block once sC [TileM, TileN + 4] (fp32, tokens x
/// output features, shared memory) holds the block's partial product for tokens m0.. and features n0..:
///  - split-K (gridDim.z > 1): the block writes its partial tile (valid token rows only) to the workspace; the last
///    block of the tile to arrive (atomic counter, threadfence reduction) sums the partials in split order and goes
///    on, the others return. The last block resets the counter for the next launch.
///  - epilogue: + bias, RoPE rotate-half on Q and K heads (Su et al., RoFormer, 2021; Llama/Qwen pairing
///    (i, i + D/2), angle = pos * theta^(-2i/D), reduced mod 2 pi in fixed point: rope_sincos), split into Q/K/V.
/// Must be called by every thread of the block (it has barriers), or with kBarrierId > 0 by threads 0 .. kThreads - 1
/// only (named barrier kBarrierId: the block's other warps have left). kMaxBatch: token rows per thread whose position
/// loads are issued together before their arithmetic (more registers, fewer dependent round trips).
/// kPre (no split-K through the workspace): the caller has loaded the epilogue's inputs into shared memory before its
/// mainloop -- pre_bias2 = bias pairs of columns n0 .. n0 + TileN - 1 (0 past N or without bias), pre_pos = positions
/// of tokens m0 .. m0 + TileM - 1, pre_turns = rope_turns(i) for i < D/2 (Rope) -- and made them visible with
/// the barrier after it wrote sC, so the epilogue has no global loads and no table to build.
/// row_limit (<= TileM): only token rows r < row_limit of sC are finished (a cluster rank's share of a tile).
template <DType DT, int D, bool HasBias, bool Rope, int TileM, int TileN, int kThreads, int kBarrierId = 0,
          int kMaxBatch = 1, bool kPre = false>
__device__ __forceinline__ void finish_tile(const QkvParams& p, float* sC, int m0, int n0, const unsigned* pre_bias2 = nullptr,
                                            const int* pre_pos = nullptr, const unsigned long long* pre_turns = nullptr,
                                            int row_limit = TileM) {
  auto sync = [] {
    if (kBarrierId == 0) __syncthreads();
    else ptx::named_barrier(kBarrierId, kThreads);
  };
  __shared__ unsigned long long s_turns[kPre ? 1 : D / 2];
  const unsigned long long* turns = kPre ? pre_turns : s_turns;
  __shared__ int s_last;
  constexpr int kLd = TileN + 4;
  const int tid = threadIdx.x;
  const int N = (p.num_heads + 2 * p.num_kv_heads) * D;
  const int SplitK = gridDim.z;
  const int rows = p.m - m0 < TileM ? p.m - m0 : TileM;  // valid token rows of this tile
  // ---- split-K: partial tiles through the workspace; the last block reduces ----
  if (!kPre && SplitK > 1) {
    const int tile = blockIdx.y * gridDim.x + blockIdx.x;
    float* ws = p.workspace + ((long long)tile * SplitK + blockIdx.z) * TileM * TileN;
    for (int e = tid * 4; e < rows * TileN; e += kThreads * 4) {
      const int r = e / TileN, c = e % TileN;
      __stcg(reinterpret_cast<float4*>(ws + e), *reinterpret_cast<const float4*>(sC + r * kLd + c));
    }
    __threadfence();
    sync();
    if (tid == 0) s_last = atomicAdd(p.counters + tile, 1u) == unsigned(SplitK - 1);
    sync();
    if (!s_last) return;
    __threadfence();
    const float* base = p.workspace + (long long)tile * SplitK * TileM * TileN;
    for (int e = tid * 4; e < rows * TileN; e += kThreads * 4) {
      float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int s = 0; s < SplitK; ++s) {
        add_f4(sum, __ldcg(reinterpret_cast<const float4*>(base + (long long)s * TileM * TileN + e)));
      }
      const int r = e / TileN, c = e % TileN;
      *reinterpret_cast<float4*>(sC + r * kLd + c) = sum;
    }
    if (tid == 0) p.counters[tile] = 0u;  // ready for the next launch
  }
  if (!kPre) {
    if (Rope) {
      for (int i = tid; i < D / 2; i += kThreads) s_turns[i] = rope_turns<D>(p, i);
    }
    sync();
  }
  KT_EPI_TRACE(10);

  // ---- epilogue: bias, RoPE (Q, K heads), split into Q/K/V ----
  // Item (token r, head part hh, column pair j) covers columns c1 = 2j, 2j + 1 and c2 = c1 + kCols / 2 of the head
  // (part): for a rotated head those are the RoPE pairs (i, i + D/2) of i = 2j and 2j + 1, otherwise just four
  // columns; each pair is one 4-byte store (a warp stores 128 contiguous bytes). Items are numbered row-major and
  // dealt out round robin, and kThreads is a multiple of a row's items, so a thread keeps its (hh, j) in every row:
  // its columns' output address, bias and RoPE frequencies are set up once, and each row adds only the token's
  // position, the arithmetic and the stores. The rows' position loads are issued kBatch at a time before their
  // arithmetic, so their latencies overlap (NOTES qkv_proj 17, 18).
  constexpr int kHeadsPerTile = TileN >= D ? TileN / D : 1;
  constexpr int kCols = TileN >= D ? D : TileN;  // columns of one head inside the tile
  constexpr int kPairs = kCols / 4;
  constexpr int kRowItems = kHeadsPerTile * kPairs;  // items of one token row
  static_assert(kThreads % kRowItems == 0, "finish_tile: the block's threads must cover whole token rows");
  constexpr int kRowStep = kThreads / kRowItems;  // token rows per round
  constexpr int kIters = (TileM + kRowStep - 1) / kRowStep;
  // kMaxBatch is the caller's: 1 (the default) in the mma.sync / wgmma kernels, where 4 items made a register-capped
  // variant spill; up to 8 in the warp-specialized kernel where its accumulators leave room.
  constexpr int kBatch = kIters < kMaxBatch ? kIters : kMaxBatch;
  const int ri = tid % kRowItems, r0 = tid / kRowItems;
  const int hh = ri / kPairs, c1 = 2 * (ri % kPairs), c2 = c1 + kCols / 2, lc = hh * kCols;
  const int col0 = n0 + lc;  // first column of this head (part) in Y
  const bool col_ok = col0 < N;
  const int head = col0 / D;  // global head index in [Q | K | V]
  const bool is_q = head < p.num_heads, is_k = !is_q && head < p.num_heads + p.num_kv_heads;
  const bool rotate = Rope && (is_q || is_k);
  unsigned short* out;
  long long ld, off;  // row stride (elements) and the head part's first column in the output
  if (is_q) {
    out = static_cast<unsigned short*>(p.q), ld = p.q_row_stride;
    off = (long long)head * D + col0 % D;
  } else if (is_k) {
    out = static_cast<unsigned short*>(p.k), ld = p.k_row_stride;
    off = (long long)(head - p.num_heads) * D + col0 % D;
  } else {
    out = static_cast<unsigned short*>(p.v), ld = p.v_row_stride;
    off = (long long)(head - p.num_heads - p.num_kv_heads) * D + col0 % D;
  }
  float bias1[2] = {0.f, 0.f}, bias2[2] = {0.f, 0.f};  // columns c1 + e, c2 + e
  if (HasBias && col_ok) {
    const unsigned* b = static_cast<const unsigned*>(p.bias);
    const unsigned w1 = kPre ? pre_bias2[(lc + c1) / 2] : __ldg(b + (col0 + c1) / 2);
    const unsigned w2 = kPre ? pre_bias2[(lc + c2) / 2] : __ldg(b + (col0 + c2) / 2);
    bias1[0] = ptx::to_float<DT>((unsigned short)(w1 & 0xffffu)), bias1[1] = ptx::to_float<DT>((unsigned short)(w1 >> 16));
    bias2[0] = ptx::to_float<DT>((unsigned short)(w2 & 0xffffu)), bias2[1] = ptx::to_float<DT>((unsigned short)(w2 >> 16));
  }
  unsigned long long tp[2] = {0ull, 0ull};  // RoPE turns per position of pairs c1 and c1 + 1
  if (rotate) tp[0] = turns[c1], tp[1] = turns[c1 + 1];
  for (int i0 = 0; i0 < kIters; i0 += kBatch) {
    int pos[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int r = r0 + (i0 + u) * kRowStep;
      pos[u] = 0;
      if (rotate && i0 + u < kIters && r < row_limit && m0 + r < p.m) pos[u] = kPre ? pre_pos[r] : __ldg(p.positions + m0 + r);
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int r = r0 + (i0 + u) * kRowStep;
      if (i0 + u >= kIters || r >= row_limit || m0 + r >= p.m || !col_ok) continue;
      const float2 a = *reinterpret_cast<const float2*>(sC + r * kLd + lc + c1);
      const float2 b = *reinterpret_cast<const float2*>(sC + r * kLd + lc + c2);
      float y1[2] = {a.x + bias1[0], a.y + bias1[1]}, y2[2] = {b.x + bias2[0], b.y + bias2[1]};
      if (rotate) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float sn, cs;
          rope_sincos(pos[u], tp[e], sn, cs);
          const float o1 = y1[e] * cs - y2[e] * sn, o2 = y2[e] * cs + y1[e] * sn;
          y1[e] = o1;
          y2[e] = o2;
        }
      }
      unsigned short* row = out + (long long)(m0 + r) * ld + off;
      *reinterpret_cast<unsigned*>(row + c1) = ptx::pack2<DT>(y1[0], y1[1]);
      *reinterpret_cast<unsigned*>(row + c2) = ptx::pack2<DT>(y2[0], y2[1]);
    }
    if (i0 == 0) KT_EPI_TRACE(11);
  }
  KT_EPI_TRACE(12);
}

template <DType DT, int F_, int D, bool HasBias, bool Rope, int TileM, int TileN, int TileK, int WarpsM, int WarpsN,
          int Stages, int Prefetch>
__global__ void __launch_bounds__(WarpsM * WarpsN * 32) qkv_proj(const QkvParams p) {
  constexpr quant::Format F = static_cast<quant::Format>(F_);
  constexpr Config C{TileM, TileN, TileK, WarpsM, WarpsN, Stages, 1, Prefetch};  // split_k is gridDim.z (run time)
  const int SplitK = gridDim.z;
#ifdef __CUDA_ARCH__  // device pass (NVRTC compiles only that; nvcc also parses for the host)
  static_assert(invalid_reason(DT, F, D, Rope, C, ArchId{__CUDA_ARCH__ / 10, KT_ARCH_SPECIFIC}) == nullptr,
                "invalid qkv_proj variant: see invalid_reason() in qkv_proj_config.h");
#endif
  constexpr int kThreads = WarpsM * WarpsN * 32;
  constexpr int WM = TileM / WarpsM, WN = TileN / WarpsN;
  constexpr int MF = WM / 16, NF = WN / 8;
  constexpr int kBits = quant::format_bits(F);
  constexpr int kUnitElems = 128 / kBits;                  // elements per 16-byte unit
  constexpr int kUnitsPerRow = TileK / kUnitElems;
  constexpr int kUnitsPerThread = w_units(C, F) / kThreads;
  constexpr int kWordsPerUnit = kUnitElems / 2;            // dtype pairs
  constexpr unsigned kXTileBytes = TileM * TileK * 2, kWTileBytes = TileN * TileK * 2;

  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ float s_lut[16];
  const unsigned sX = ptx::smem_u32(smem);                  // Stages x [TileM, TileK]
  const unsigned sW = sX + Stages * kXTileBytes;            // 2 x [TileN, TileK] decoded
  unsigned char* sW_ptr = smem + Stages * kXTileBytes;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / WarpsN, wn = warp % WarpsN;
  const int n0 = blockIdx.x * TileN, m0 = blockIdx.y * TileM;
  const int N = (p.num_heads + 2 * p.num_kv_heads) * D;
  const int nk_total = p.k_dim / TileK;
  const int kt_begin = (int)((long long)nk_total * blockIdx.z / SplitK);
  const int kt_end = (int)((long long)nk_total * (blockIdx.z + 1) / SplitK);
  const int nk = kt_end - kt_begin;

  if (tid < 16) s_lut[tid] = quant::lut_value<F>(tid);

  // ---- X loader (cp.async, zero-filled past M) ----
  const unsigned short* x = static_cast<const unsigned short*>(p.x);
  auto load_x = [&](int slot, int kt) {
    constexpr int kChunks = TileM * TileK / 8;
#pragma unroll
    for (int c0 = 0; c0 < kChunks; c0 += kThreads) {
      const int c = c0 + tid;
      if (kChunks % kThreads == 0 || c < kChunks) {
        const int r = c / (TileK / 8), ch = c % (TileK / 8);
        const bool in = m0 + r < p.m;
        const unsigned short* src = in ? x + (long long)(m0 + r) * p.x_row_stride + kt * TileK + ch * 8 : x;
        ptx::cp_async_16(sX + slot * kXTileBytes + swz<TileK>(r, ch) * 2, src, in ? 16u : 0u);
      }
    }
  };
  // ---- W prefetch (registers) ----
  uint4 wreg[Prefetch][kUnitsPerThread];  // ring of K tiles in flight (slot = tile % Prefetch)
  UnitScales sreg[Prefetch][kUnitsPerThread];
  const unsigned char* wdata = static_cast<const unsigned char*>(p.w_data);
  const long long w_row_bytes = (long long)p.k_dim * kBits / 8;
  auto load_w = [&](int slot, int kt) {
#pragma unroll
    for (int i = 0; i < kUnitsPerThread; ++i) {
      const int u = tid + i * kThreads;
      const int r = u / kUnitsPerRow, seg = u % kUnitsPerRow;
      const int row = n0 + r;
      const int k0 = kt * TileK + seg * kUnitElems;
      if (row < N) {
        wreg[slot][i] = __ldg(reinterpret_cast<const uint4*>(wdata + row * w_row_bytes + (long long)k0 * kBits / 8));
        sreg[slot][i] = load_scales<F>(p, row, k0);
      } else {
        wreg[slot][i] = make_uint4(0, 0, 0, 0);
        sreg[slot][i] = UnitScales{0.f, 0.f, 0.f};
      }
    }
  };
  auto store_w = [&](int slot, int buf) {
#pragma unroll
    for (int i = 0; i < kUnitsPerThread; ++i) {
      const int u = tid + i * kThreads;
      const int r = u / kUnitsPerRow, seg = u % kUnitsPerRow;
      unsigned words[16];
      decode_unit<DT, F>(wreg[slot][i], sreg[slot][i], s_lut, words);
#pragma unroll
      for (int c = 0; c < kWordsPerUnit / 4; ++c) {
        const int chunk = seg * (kUnitElems / 8) + c;
        *reinterpret_cast<uint4*>(sW_ptr + buf * kWTileBytes + swz<TileK>(r, chunk) * 2) =
            make_uint4(words[4 * c], words[4 * c + 1], words[4 * c + 2], words[4 * c + 3]);
      }
    }
  };

  float acc[MF][NF][4];
#pragma unroll
  for (int a = 0; a < MF; ++a)
#pragma unroll
    for (int b = 0; b < NF; ++b)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[a][b][e] = 0.f;

  // ldmatrix lane addressing (see flash_fwd.cuh: address for k-step s = base ^ (s * 32)).
  const unsigned a_lane = swz<TileK>(wm * WM + lane % 16, lane / 16) * 2;
  const unsigned b_lane = swz<TileK>(wn * WN + lane % 8 + (lane / 16) * 8, (lane / 8) % 2) * 2;

  if (nk > 0) {
#pragma unroll
    for (int s = 0; s < Stages - 1; ++s) {
      if (s < nk) load_x(s, kt_begin + s);
      ptx::cp_async_commit();
    }
#pragma unroll
    for (int pp = 0; pp < Prefetch; ++pp)
      if (pp < nk) load_w(pp, kt_begin + pp);
    __syncthreads();  // s_lut
    // The loop is unrolled by Prefetch so that every register-ring slot index is a compile-time constant.
    for (int j0 = 0; j0 < nk; j0 += Prefetch) {
#pragma unroll
      for (int pp = 0; pp < Prefetch; ++pp) {
        const int j = j0 + pp;
        if (j < nk) {
          const int kt = kt_begin + j;
          store_w(pp, j & 1);                                 // dequantize tile j into its smem buffer
          if (j + Prefetch < nk) load_w(pp, kt + Prefetch);   // refill the slot: Prefetch tiles in flight
          ptx::cp_async_wait<Stages - 2>();                   // X tile j landed
          __syncthreads();
          {
            const int jn = j + Stages - 1;  // refill the X slot consumed in iteration j - 1
            if (jn < nk) load_x(jn % Stages, kt_begin + jn);
            ptx::cp_async_commit();
          }
          const unsigned xs = sX + (j % Stages) * kXTileBytes;
          const unsigned ws = sW + (j & 1) * kWTileBytes;
#pragma unroll
          for (int ks = 0; ks < TileK / 16; ++ks) {
            unsigned af[MF][4];
#pragma unroll
            for (int a = 0; a < MF; ++a)
              ptx::ldmatrix_x4(((xs + a_lane) ^ (ks * 32)) + a * 16 * TileK * 2, af[a][0], af[a][1], af[a][2], af[a][3]);
#pragma unroll
            for (int np = 0; np < NF / 2; ++np) {
              unsigned b0, b1, b2, b3;
              ptx::ldmatrix_x4(((ws + b_lane) ^ (ks * 32)) + np * 16 * TileK * 2, b0, b1, b2, b3);
#pragma unroll
              for (int a = 0; a < MF; ++a) {
                ptx::mma_16816<DT>(acc[a][2 * np], af[a], b0, b1);
                ptx::mma_16816<DT>(acc[a][2 * np + 1], af[a], b2, b3);
              }
            }
          }
        }
      }
    }
  }
  ptx::cp_async_wait<0>();
  __syncthreads();  // mainloop shared memory is reused for the fp32 output tile

  // ---- accumulators -> shared fp32 tile [TileM, TileN + 4] ----
  constexpr int kLd = TileN + 4;
  float* sC = reinterpret_cast<float*>(smem);
  {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int a = 0; a < MF; ++a)
#pragma unroll
      for (int b = 0; b < NF; ++b)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = wm * WM + a * 16 + g + 8 * h, c = wn * WN + b * 8 + 2 * t;
          *reinterpret_cast<float2*>(sC + r * kLd + c) = make_float2(acc[a][b][2 * h], acc[a][b][2 * h + 1]);
        }
  }
  __syncthreads();

  finish_tile<DT, D, HasBias, Rope, TileM, TileN, kThreads>(p, sC, m0, n0);
}

}  // namespace qkv
}  // namespace kt
