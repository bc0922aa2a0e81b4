// Fused Q/K/V projection, Hopper tiled mainloop ("wgmma", Config::mainloop = Mainloop::wgmma; sm_90a only).
//
//   Y[m, n] = sum_k X[m, k] W[n, k]: one block computes tokens m0 .. m0 + tile_m - 1 (tile_m / 64 warpgroups, 64 rows
//   each, up to 4) by features n0 .. n0 + tile_n - 1, with wgmma.mma_async.m64n{tile_n}k16 (fp32 accumulators in registers,
//   tile_n / 2 per thread). Both operands are read from shared memory in the K-major 128-byte swizzle layout
//   (wgmma.cuh): X [tile_m rows][tile_k] (A) and the dequantized weight [tile_n rows][tile_k] (B = W^T, K-major).
//
//   X tiles stream through a cp.async ring of `stages` slots; each warpgroup loads only its own 64 rows, so a slot
//   may be refilled as soon as the warpgroup's own wgmma of the step before has retired (wgmma.wait_group 1).
//   Weight, quantized formats: the packed 16-byte units (and their scales) of step j are loaded into a register ring
//   `prefetch` steps ahead, then dequantized by every thread into one of 3 shared-memory buffers while the tensor
//   cores work on step j - 1 (wgmma is asynchronous: the decode overlaps the MMA). A buffer written in iteration j
//   was last read by the wgmma of step j - 2, which every warpgroup retired before the barrier of iteration j.
//   Weight, 16-bit formats: cp.async straight into a ring of stages + 1 slots, in the same groups as X.
//   One barrier per K step. Split-K over gridDim.z and the epilogue (bias, RoPE, split into Q/K/V) are the tiled
//   kernel's finish_tile (qkv_proj.cuh).
//
// Decode into shared memory (natural K order; the X operand is not permuted):
//   int4   (n - z) from the magic-number pair (prmt + lop3: 1024 + n or 128 + n, exact), minus (magic + z) exactly,
//          times the group scale rounded to the operand dtype (one rounding in fp16: exact scale; bf16 activations
//          round the fp16 scale to bf16 first).
//   int8   the exact integer b (decode_chunk2); the per-row scale multiplies the fp32 accumulators in the epilogue.
//   nf4, mxfp4, nvfp4: the 256-pair code table times the scale in the operand dtype (decode_chunk2), or the fp32
//          decode_chunk for a unit whose scale fp16 cannot hold.
// Sources: PTX ISA 8.x (wgmma.mma_async, matrix descriptors, cp.async, fence.proxy.async); the weight formats as in
// quant_format.h.
#pragma once
#include "common/wgmma.cuh"
#include "qkv_proj/qkv_gemv.cuh"

namespace kt {
namespace qkv {

/// Decodes one 16-byte packed unit (4-bit: 32 elements, int8: 16) into kChunks 8-element chunks of operand pairs in
/// natural K order (out[c] = elements 8c .. 8c + 7), as described at the top of this file.
template <DType DT, quant::Format F>
__device__ __forceinline__ void wgmma_decode_unit(const uint4& u, const UnitScales& s,
                                                  const PairTable<kGemvTableCopies>& tab, const float* lut,
                                                  uint4 (&out)[128 / quant::format_bits(F) / 8]) {
  constexpr int kChunks = 128 / quant::format_bits(F) / 8;
  if (F == quant::Format::int4) {
    const float mz = -((DT == DType::f16 ? 1024.f : 128.f) + s.z);  // exact: z is 0..15
    const unsigned zz = ptx::pack2<DT>(mz, mz), sc = ptx::pack2<DT>(s.s0, s.s0);
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      unsigned o[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        o[i] = int4_pair<DT>(w[c], unsigned(i | (i << 4) | ((4 + i) << 8) | ((4 + i) << 12)), zz, sc);
      out[c] = make_uint4(o[0], o[1], o[2], o[3]);
    }
  } else {
    const UnitScales2 s2 = unit_scales2<DT, F>(s);
    const bool fast = gemv_scale_mode(F) != kScaleOperand || s2.ok;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      unsigned o[4];
      if (fast) decode_chunk2<DT, F>(u, s2, tab, c, o);
      else decode_chunk<DT, F>(u, s, lut, c, o);
      out[c] = make_uint4(o[0], o[1], o[2], o[3]);
    }
  }
}

template <DType DT, quant::Format F, int D, bool HasBias, bool Rope, bool KvCache, int TileM, int TileN, int TileK,
          int Stages, int Prefetch>
__global__ void __launch_bounds__(TileM * 2, 1) qkv_wgmma(const QkvParams p) {
  constexpr Config C = make_config(TileM, TileN, WgmmaConfig{TileK, Stages, 1, Prefetch});  // split_k: gridDim.z
  // Preconditions
#ifdef __CUDA_ARCH__  // device pass (NVRTC compiles only that; nvcc also parses for the host)
  static_assert(invalid_reason(DT, F, D, Rope, C, ArchId{__CUDA_ARCH__ / 10, KT_ARCH_SPECIFIC}) == nullptr,
                "invalid qkv_wgmma variant: see invalid_reason() in qkv_proj_config.h");
#endif
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kThreads = TileM * 2;  // one warpgroup (128 threads) per 64 token rows
  constexpr int kBits = quant::FormatTraits<F>::kBits;
  constexpr bool kCopyW = kBits == 16;  // 16-bit weight: cp.async, no decode
  constexpr int kSub = TileK / 64;      // 64-wide swizzle atoms along K
  constexpr unsigned kXTileBytes = TileM * TileK * 2, kWTileBytes = TileN * TileK * 2;
  constexpr int kWBufs = wgmma_w_buffers(C, F);
  constexpr int kUnitElems = 128 / kBits;
  constexpr int kChunksPerUnit = kUnitElems / 8;
  constexpr int kUnitsPerRow = TileK / kUnitElems;
  constexpr int kUnitsTotal = kCopyW ? 1 : w_units(C, F);
  constexpr int kUnitsPerThread = kCopyW ? 1 : (kUnitsTotal + kThreads - 1) / kThreads;  // tile_m 256: may be < 1 unit
  constexpr int kRing = kCopyW ? 1 : Prefetch;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ float s_lut[16];
  __shared__ __align__(16) unsigned s_tab[gemv_uses_table(F) ? 256 * kGemvTableCopies : 4];
  // 1024-byte aligned base for the swizzled tiles (the launch requests wgmma_smem_bytes, which includes the slack).
  const unsigned raw = ptx::smem_u32(smem_raw);
  const unsigned base = (raw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (base - raw);
  const unsigned sX = base;                         // Stages x [kSub][TileM][64]
  const unsigned sW = base + Stages * kXTileBytes;  // kWBufs x [kSub][TileN][64]
  unsigned char* sW_ptr = smem + Stages * kXTileBytes;

  const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128;
  const int n0 = blockIdx.x * TileN, m0 = blockIdx.y * TileM;
  const int N = (p.num_heads + 2 * p.num_kv_heads) * D;
  const int SplitK = gridDim.z;
  const int nk_total = p.k_dim / TileK;
  const int kt_begin = (int)((long long)nk_total * blockIdx.z / SplitK);
  const int kt_end = (int)((long long)nk_total * (blockIdx.z + 1) / SplitK);
  const int nk = kt_end - kt_begin;

  // ---- X: each warpgroup copies its own 64 rows of a step (zero-filled past M) ----
  const unsigned short* x = static_cast<const unsigned short*>(p.x);
  const unsigned char* wdata = static_cast<const unsigned char*>(p.w_data);
  const long long w_row_bytes = (long long)p.k_dim * kBits / 8;
  auto load_x = [&](int step) {  // step: 0 .. nk - 1 of this block
    const int slot = step % Stages, kt = kt_begin + step;
    constexpr int kChunks = 64 * TileK / 8;
#pragma unroll
    for (int c0 = 0; c0 < kChunks; c0 += 128) {
      const int c = c0 + wtid;
      const int r = wg * 64 + c / (TileK / 8), ch = c % (TileK / 8);
      const bool in = m0 + r < p.m;
      const unsigned short* src = in ? x + (long long)(m0 + r) * p.x_row_stride + kt * TileK + ch * 8 : x;
      ptx::cp_async_16(sX + slot * kXTileBytes + (ch / 8) * TileM * 128 + r * 128 + (((ch % 8) ^ (r & 7)) << 4), src,
                       in ? 16u : 0u);
    }
    if (kCopyW) {  // 16-bit weight rows of the step, shared by the warpgroups: every thread copies its share
      const int wslot = step % kWBufs;
      constexpr int kWChunks = TileN * TileK / 8;
#pragma unroll
      for (int c0 = 0; c0 < kWChunks; c0 += kThreads) {
        const int c = c0 + tid;
        const int r = c / (TileK / 8), ch = c % (TileK / 8);
        const bool in = n0 + r < N;
        const unsigned char* src =
            in ? wdata + (long long)(n0 + r) * w_row_bytes + (long long)(kt * TileK + ch * 8) * 2 : wdata;
        ptx::cp_async_16(sW + wslot * kWTileBytes + (ch / 8) * TileN * 128 + r * 128 + (((ch % 8) ^ (r & 7)) << 4), src,
                         in ? 16u : 0u);
      }
    }
    ptx::cp_async_commit();
  };

  // ---- quantized weight: register ring of packed units + scales, decoded into shared memory ----
  uint4 wreg[kRing][kUnitsPerThread];
  UnitScales sreg[kRing][kUnitsPerThread];
  auto load_w = [&](int slot, int step) {
    const int kt = kt_begin + step;
#pragma unroll
    for (int i = 0; i < kUnitsPerThread; ++i) {
      const int u = tid + i * kThreads;
      const int r = u / kUnitsPerRow, seg = u % kUnitsPerRow;
      const int row = u < kUnitsTotal ? n0 + r : N;  // N: no unit for this thread
      const int k0 = kt * TileK + seg * kUnitElems;
      if (row < N) {
        wreg[slot][i] = __ldg(reinterpret_cast<const uint4*>(wdata + row * w_row_bytes + (long long)k0 * kBits / 8));
        sreg[slot][i] = gemv_scale_mode(F) == kScaleRow ? UnitScales{1.f, 1.f, 0.f} : load_scales<F>(p, row, k0);
      } else {
        wreg[slot][i] = make_uint4(0, 0, 0, 0);
        sreg[slot][i] = UnitScales{0.f, 0.f, 0.f};
      }
    }
  };
  const PairTable<kGemvTableCopies> tab(s_tab, gemv_uses_table(F) ? tid % kGemvTableCopies : 0);
  auto store_w = [&](int slot, int step) {
    unsigned char* dst = sW_ptr + (step % kWBufs) * kWTileBytes;
#pragma unroll
    for (int i = 0; i < kUnitsPerThread; ++i) {
      const int u = tid + i * kThreads;
      if (kUnitsTotal % kThreads != 0 && u >= kUnitsTotal) break;
      const int r = u / kUnitsPerRow, seg = u % kUnitsPerRow;
      uint4 chunks[kChunksPerUnit];
      wgmma_decode_unit<DT, F>(wreg[slot][i], sreg[slot][i], tab, s_lut, chunks);
#pragma unroll
      for (int c = 0; c < kChunksPerUnit; ++c) {
        const int ch = seg * kChunksPerUnit + c;  // 16-byte chunk along the row's tile_k
        *reinterpret_cast<uint4*>(dst + (ch / 8) * TileN * 128 + r * 128 + (((ch % 8) ^ (r & 7)) << 4)) = chunks[c];
      }
    }
  };

  float acc[TileN / 2];
#pragma unroll
  for (int i = 0; i < TileN / 2; ++i) acc[i] = 0.f;

  if (nk > 0) {
    // Prologue: X (and 16-bit W) steps 0 .. Stages - 2 in flight; packed weight steps 0 .. Prefetch - 1 in registers.
#pragma unroll
    for (int s = 0; s < Stages - 1; ++s) {
      if (s < nk) load_x(s);
      else ptx::cp_async_commit();
    }
    if (!kCopyW) {
#pragma unroll
      for (int pp = 0; pp < kRing; ++pp)
        if (pp < nk) load_w(pp, pp);
      build_decode_tables<DT, F, kGemvTableCopies>(s_lut, s_tab, tid, kThreads);
      __syncthreads();  // s_lut, s_tab
      store_w(0, 0);
      if (kRing < nk) load_w(0, kRing);
    }

    const unsigned a_base = sX + wg * 64 * 128;  // this warpgroup's 64 rows
    // The loop is unrolled by the register ring's depth so that every ring index is a compile-time constant.
    for (int j0 = 0; j0 < nk; j0 += kRing) {
#pragma unroll
      for (int pp = 0; pp < kRing; ++pp) {
        const int j = j0 + pp;
        if (j < nk) {
          ptx::cp_async_wait<Stages - 2>();  // this thread's copies of step j landed
          wgmma::fence_proxy_async();        // ... and this thread's decoded weight: visible to the async proxy
          __syncthreads();
          wgmma::fence();
          const unsigned xa = a_base + (j % Stages) * kXTileBytes, wb = sW + (j % kWBufs) * kWTileBytes;
#pragma unroll
          for (int sub = 0; sub < kSub; ++sub)
#pragma unroll
            for (int ks = 0; ks < 4; ++ks)
              wgmma::Mma<DT, TileN>::run(acc, wgmma::make_desc_sw128(xa + sub * TileM * 128 + ks * 32),
                                         wgmma::make_desc_sw128(wb + sub * TileN * 128 + ks * 32));
          wgmma::commit_group();
          // While the tensor cores work: dequantize step j + 1, refill its ring slot.
          if (!kCopyW && j + 1 < nk) {
            store_w((pp + 1) % kRing, j + 1);
            if (j + 1 + kRing < nk) load_w((pp + 1) % kRing, j + 1 + kRing);
          }
          wgmma::wait_group<1>();  // this warpgroup's step j - 1 retired: its X slot may be refilled
          wgmma::fence_operands(acc);
          if (j + Stages - 1 < nk) load_x(j + Stages - 1);
          else ptx::cp_async_commit();
        }
      }
    }
    wgmma::wait_group<0>();
    wgmma::fence_operands(acc);
  }
  ptx::cp_async_wait<0>();
  __syncthreads();  // every warpgroup is done with the tiles: the space becomes the fp32 output tile

  // ---- accumulators -> shared fp32 tile [TileM, TileN + 4]; int8: times the row scale of each feature ----
  constexpr int kLd = TileN + 4;
  float* sC = reinterpret_cast<float*>(smem);
  {
    const int warp = wtid / 32, lane = tid % 32;
    const int r0 = wg * 64 + warp * 16 + lane / 4;
#pragma unroll
    for (int i = 0; i < TileN / 8; ++i) {
      const int c = 8 * i + 2 * (lane % 4);
      float s0 = 1.f, s1 = 1.f;
      if (gemv_scale_mode(F) == kScaleRow) {
        const float* rs = static_cast<const float*>(p.w_scales);
        s0 = n0 + c < N ? __ldg(rs + n0 + c) : 0.f;
        s1 = n0 + c + 1 < N ? __ldg(rs + n0 + c + 1) : 0.f;
      }
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<float2*>(sC + (r0 + 8 * h) * kLd + c) =
            make_float2(acc[4 * i + 2 * h] * s0, acc[4 * i + 2 * h + 1] * s1);
    }
  }
  __syncthreads();

  finish_tile<DT, D, HasBias, Rope, KvCache, TileM, TileN, kThreads>(p, sC, m0, n0);
#endif
}

}  // namespace qkv
}  // namespace kt
