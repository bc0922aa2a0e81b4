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
#include "common/ptx.cuh"
#include "qkv_proj/qkv_proj_config.h"
#include "qkv_proj/quant_format.h"

namespace kt {
namespace qkv {

template <int TK>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * TK + ((chunk ^ (row & 7)) << 3);
}

/// FP8 E4M3 (OCP FP8: bias 7, no infinities, 0x7F/0xFF NaN) to float.
__device__ __forceinline__ float e4m3_to_float(unsigned b) {
  const unsigned e = (b >> 3) & 15u, m = b & 7u;
  float v = e == 0 ? float(m) * 0.001953125f /* 2^-9 */ : __int_as_float(int(((e + 120u) << 23) | (m << 20)));
  if ((b & 0x7fu) == 0x7fu) v = __int_as_float(0x7fc00000);
  return (b & 0x80u) ? -v : v;
}

/// E8M0 scale (OCP MX v1.0: 2^(e - 127), e = 255 NaN) to float; e = 0 is 2^-127, a denormal.
__device__ __forceinline__ float e8m0_to_float(unsigned e) {
  return e == 255u ? __int_as_float(0x7fc00000) : (e == 0u ? 5.877471754111438e-39f : __int_as_float(int(e << 23)));
}

/// Scales of one 16-byte unit: s0 for its first group, s1 for a second group inside the unit (nvfp4), z (int4).
struct UnitScales {
  float s0, s1, z;
};

template <quant::Format F>
__device__ __forceinline__ UnitScales load_scales(const QkvParams& p, int row, int k0) {
  UnitScales s{1.f, 1.f, 0.f};
  if (F == quant::Format::int8) {
    s.s0 = __ldg(static_cast<const float*>(p.w_scales) + row);
  } else if (F == quant::Format::int4) {
    const long long g = (long long)row * (p.k_dim / 128) + k0 / 128;
    s.s0 = ptx::to_float<DType::f16>(__ldg(static_cast<const unsigned short*>(p.w_scales) + g));
    s.z = float(__ldg(static_cast<const unsigned char*>(p.w_zeros) + g));
  } else if (F == quant::Format::nf4) {
    s.s0 = __ldg(static_cast<const float*>(p.w_scales) + (long long)row * (p.k_dim / 64) + k0 / 64);
  } else if (F == quant::Format::mxfp4) {
    s.s0 = e8m0_to_float(__ldg(static_cast<const unsigned char*>(p.w_scales) + (long long)row * (p.k_dim / 32) + k0 / 32));
  } else if (F == quant::Format::nvfp4) {
    const unsigned char* sc = static_cast<const unsigned char*>(p.w_scales) + (long long)row * (p.k_dim / 16) + k0 / 16;
    s.s0 = e4m3_to_float(__ldg(sc)) * p.tensor_scale;
    s.s1 = e4m3_to_float(__ldg(sc + 1)) * p.tensor_scale;
  }
  return s;
}

/// Entry i (0..15) of the decode table in shared memory: the NF4 code value (nf4) or the signed E2M1 value (the
/// other 4-bit formats).
template <quant::Format F>
__device__ __forceinline__ float lut_value(int i) {
  return F == quant::Format::nf4 ? quant::nf4_code(i) : (i & 8 ? -1.f : 1.f) * quant::e2m1_magnitude(i & 7);
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

/// The end of every qkv kernel, run by all kThreads threads of the block once sC [TileM, TileN + 4] (fp32, tokens x
/// output features, shared memory) holds the block's partial product for tokens m0.. and features n0..:
///  - split-K (gridDim.z > 1): the block writes its partial tile (valid token rows only) to the workspace; the last
///    block of the tile to arrive (atomic counter, threadfence reduction) sums the partials in split order and goes
///    on, the others return. The last block resets the counter for the next launch.
///  - epilogue: + bias, RoPE rotate-half on Q and K heads (Su et al., RoFormer, 2021; Llama/Qwen pairing
///    (i, i + D/2), angle = pos * theta^(-2i/D), angles reduced mod 2 pi in double), split into Q/K/V.
/// Must be called by every thread of the block (it has barriers), or with kBarrierId > 0 by threads 0 .. kThreads - 1
/// only (named barrier kBarrierId: the block's other warps have left). kMaxBatch: items per thread whose global loads
/// (bias, positions) are issued together before their arithmetic (more registers, fewer dependent round trips).
template <DType DT, int D, bool HasBias, bool Rope, int TileM, int TileN, int kThreads, int kBarrierId = 0,
          int kMaxBatch = 1>
__device__ __forceinline__ void finish_tile(const QkvParams& p, float* sC, int m0, int n0) {
  auto sync = [] {
    if (kBarrierId == 0) __syncthreads();
    else ptx::named_barrier(kBarrierId, kThreads);
  };
  __shared__ double s_inv_freq[D / 2];
  __shared__ int s_last;
  constexpr int kLd = TileN + 4;
  const int tid = threadIdx.x;
  const int N = (p.num_heads + 2 * p.num_kv_heads) * D;
  const int SplitK = gridDim.z;
  const int rows = p.m - m0 < TileM ? p.m - m0 : TileM;  // valid token rows of this tile
  // ---- split-K: partial tiles through the workspace; the last block reduces ----
  if (SplitK > 1) {
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
        const float4 v = __ldcg(reinterpret_cast<const float4*>(base + (long long)s * TileM * TileN + e));
        sum.x += v.x;
        sum.y += v.y;
        sum.z += v.z;
        sum.w += v.w;
      }
      const int r = e / TileN, c = e % TileN;
      *reinterpret_cast<float4*>(sC + r * kLd + c) = sum;
    }
    if (tid == 0) p.counters[tile] = 0u;  // ready for the next launch
  }
  if (Rope) {
    for (int i = tid; i < D / 2; i += kThreads)
      s_inv_freq[i] = exp2(-double(2 * i) / double(D) * p.rope_log2_theta);
  }
  sync();

  // ---- epilogue: bias, RoPE (Q, K heads), split into Q/K/V ----
  // Item (token r, head part hh, column pair j) covers columns c1 = 2j, 2j + 1 and c2 = c1 + kCols / 2 of the head
  // (part): for a rotated head those are the RoPE pairs (i, i + D/2) of i = 2j and 2j + 1, otherwise just four
  // columns; each pair is one 4-byte load of the bias and one 4-byte store (a warp stores 128 contiguous bytes).
  // The thread's items are taken kBatch at a time: first every global load of the batch (bias pairs, positions),
  // then the arithmetic and the stores, so the loads' latencies overlap instead of adding up item by item (a
  // 64 x 128 wgmma_ws tile was 8 dependent rounds per thread, about 4 us on the H100; NOTES qkv_proj 17).
  const unsigned* bias2 = static_cast<const unsigned*>(p.bias);
  constexpr int kHeadsPerTile = TileN >= D ? TileN / D : 1;
  constexpr int kCols = TileN >= D ? D : TileN;  // columns of one head inside the tile
  constexpr int kPairs = kCols / 4;
  constexpr int kItems = TileM * kHeadsPerTile * kPairs;
  constexpr int kIters = (kItems + kThreads - 1) / kThreads;
  // kMaxBatch is the caller's: 1 (the default) in the mma.sync / wgmma kernels, where 4 items made a register-capped
  // variant spill; up to 8 in the warp-specialized kernel where its accumulators leave room.
  constexpr int kBatch = kIters < kMaxBatch ? kIters : kMaxBatch;
  struct Item {
    int r, m, col0, head, c1, c2, lc;
    bool valid, is_q, is_k, rotate;
  };
  auto item_of = [&](int it) {
    Item x;
    x.r = it / (kHeadsPerTile * kPairs);
    const int rest = it % (kHeadsPerTile * kPairs);
    const int hh = rest / kPairs, j = rest % kPairs;
    x.m = m0 + x.r;
    x.col0 = n0 + hh * kCols;  // first column of this head (part) in Y
    x.valid = it < kItems && x.m < p.m && x.col0 < N;
    x.head = x.col0 / D;  // global head index in [Q | K | V]
    x.is_q = x.head < p.num_heads;
    x.is_k = !x.is_q && x.head < p.num_heads + p.num_kv_heads;
    x.rotate = Rope && (x.is_q || x.is_k);
    x.c1 = 2 * j, x.c2 = 2 * j + kCols / 2;  // within the head (part)
    x.lc = hh * kCols;
    return x;
  };
  for (int i0 = 0; i0 < kIters; i0 += kBatch) {
    unsigned bl1[kBatch], bl2[kBatch];
    int pos[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const Item x = item_of((i0 + u) * kThreads + tid);
      bl1[u] = bl2[u] = 0u;
      pos[u] = 0;
      if (i0 + u < kIters && x.valid) {
        if (HasBias) bl1[u] = __ldg(bias2 + (x.col0 + x.c1) / 2), bl2[u] = __ldg(bias2 + (x.col0 + x.c2) / 2);
        if (x.rotate) pos[u] = __ldg(p.positions + x.m);
      }
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const Item x = item_of((i0 + u) * kThreads + tid);
      if (i0 + u >= kIters || !x.valid) continue;
      const float2 a = *reinterpret_cast<const float2*>(sC + x.r * kLd + x.lc + x.c1);
      const float2 b = *reinterpret_cast<const float2*>(sC + x.r * kLd + x.lc + x.c2);
      float y1[2] = {a.x, a.y}, y2[2] = {b.x, b.y};  // y1[e]: column c1 + e, y2[e]: column c2 + e
      if (HasBias) {
        y1[0] += ptx::to_float<DT>((unsigned short)(bl1[u] & 0xffffu));
        y1[1] += ptx::to_float<DT>((unsigned short)(bl1[u] >> 16));
        y2[0] += ptx::to_float<DT>((unsigned short)(bl2[u] & 0xffffu));
        y2[1] += ptx::to_float<DT>((unsigned short)(bl2[u] >> 16));
      }
      if (x.rotate) {
        const double dpos = double(pos[u]);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          double ang = dpos * s_inv_freq[x.c1 + e];
          ang -= 6.283185307179586 * rint(ang * 0.15915494309189535);  // exact reduction to [-pi, pi] in double
          float sn, cs;
          __sincosf(float(ang), &sn, &cs);  // |error| < 2^-21 on [-pi, pi] (CUDA C Programming Guide, intrinsic functions)
          const float o1 = y1[e] * cs - y2[e] * sn, o2 = y2[e] * cs + y1[e] * sn;
          y1[e] = o1;
          y2[e] = o2;
        }
      }
      unsigned short* out;
      long long off;
      const int d0 = (x.col0 % D);
      if (x.is_q) {
        out = static_cast<unsigned short*>(p.q);
        off = (long long)x.m * p.q_row_stride + (long long)x.head * D + d0;
      } else if (x.is_k) {
        out = static_cast<unsigned short*>(p.k);
        off = (long long)x.m * p.k_row_stride + (long long)(x.head - p.num_heads) * D + d0;
      } else {
        out = static_cast<unsigned short*>(p.v);
        off = (long long)x.m * p.v_row_stride + (long long)(x.head - p.num_heads - p.num_kv_heads) * D + d0;
      }
      *reinterpret_cast<unsigned*>(out + off + x.c1) = ptx::pack2<DT>(y1[0], y1[1]);
      *reinterpret_cast<unsigned*>(out + off + x.c2) = ptx::pack2<DT>(y2[0], y2[1]);
    }
  }
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

  if (tid < 16) s_lut[tid] = lut_value<F>(tid);

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
