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
#include "common/swizzle.cuh"
#include "qkv_proj/qkv_epilogue.cuh"
#include "qkv_proj/qkv_proj_config.h"
#include "qkv_proj/quant_format.h"

namespace kt {
namespace qkv {

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
__device__ __forceinline__ void decode_chunk(const uint4& u, const UnitScales& s, const float* lut, int c,
                                             unsigned (&out)[4]) {
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
__device__ __forceinline__ void decode_unit(const uint4& u, const UnitScales& s, const float* lut,
                                            unsigned (&out)[16]) {
  constexpr int kChunks = 128 / quant::format_bits(F) / 8;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    unsigned part[4];
    decode_chunk<DT, F>(u, s, lut, c, part);
#pragma unroll
    for (int i = 0; i < 4; ++i) out[4 * c + i] = part[i];
  }
}

template <DType DT, quant::Format F, int D, bool HasBias, bool Rope, bool KvCache, int TileM, int TileN, int TileK,
          int WarpsM, int WarpsN, int Stages, int Prefetch>
__global__ void __launch_bounds__(WarpsM* WarpsN * 32) qkv_proj(const QkvParams p) {
  constexpr Config C =
      make_config(TileM, TileN, MmaConfig{TileK, WarpsM, WarpsN, Stages, 1, Prefetch});  // split_k: gridDim.z
  const int SplitK = gridDim.z;
  // Preconditions
#ifdef __CUDA_ARCH__  // device pass (NVRTC compiles only that; nvcc also parses for the host)
  static_assert(invalid_reason(DT, F, D, Rope, C, ArchId{__CUDA_ARCH__ / 10, KT_ARCH_SPECIFIC}) == nullptr,
                "invalid qkv_proj variant: see invalid_reason() in qkv_proj_config.h");
#endif
  static_assert(TileM % (16 * WarpsM) == 0 && TileN % (16 * WarpsN) == 0,
                "qkv_proj: whole m16 / n16 fragments per warp");
  constexpr int kThreads = WarpsM * WarpsN * 32;
  constexpr int WM = TileM / WarpsM, WN = TileN / WarpsN;
  constexpr int MF = WM / 16, NF = WN / 8;
  constexpr int kBits = quant::FormatTraits<F>::kBits;
  constexpr int kUnitElems = 128 / kBits;  // elements per 16-byte unit
  constexpr int kUnitsPerRow = TileK / kUnitElems;
  constexpr int kUnitsPerThread = w_units(C, F) / kThreads;
  constexpr int kWordsPerUnit = kUnitElems / 2;  // dtype pairs
  constexpr unsigned kXTileBytes = TileM * TileK * 2, kWTileBytes = TileN * TileK * 2;

  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ float s_lut[16];
  const unsigned sX = ptx::smem_u32(smem);        // [Stages][TileM, TileK] 16-bit, swizzled (swz)
  const unsigned sW = sX + Stages * kXTileBytes;  // [2][TileN, TileK] decoded 16-bit, swizzled
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

  float acc[MF][NF][4];  // [m16 fragment][n8 fragment][C fragment] of the warp's [WM, WN]
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
          store_w(pp, j & 1);                                // dequantize tile j into its smem buffer
          if (j + Prefetch < nk) load_w(pp, kt + Prefetch);  // refill the slot: Prefetch tiles in flight
          ptx::cp_async_wait<Stages - 2>();                  // X tile j landed
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
              ptx::ldmatrix_x4(((xs + a_lane) ^ (ks * 32)) + a * 16 * TileK * 2, af[a][0], af[a][1], af[a][2],
                               af[a][3]);
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

  finish_tile<DT, D, HasBias, Rope, KvCache, TileM, TileN, kThreads>(p, sC, m0, n0);
}

}  // namespace qkv
}  // namespace kt
