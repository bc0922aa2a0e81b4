// Fused Q/K/V projection, warp-specialized Hopper mainloop ("wgmma_ws", Config::mainloop = Mainloop::wgmma_ws; sm_90a).
//
//   Swap-AB: Y^T[n, m] = sum_k W[n, k] X[m, k]. The weight is wgmma's A operand (M = 64 output features per atom), the
//   tokens are its N (tile_m = 8 .. 256), so decode-sized M wastes no tensor-core rows and the dequantized weight never
//   touches shared memory: it is decoded straight into A-fragment registers (wgmma.mma_async with A in registers).
//
//   Block: Consumers (1 or 2) consumer warpgroups per K group, then one producer warpgroup (threads 128 Consumers
//   KGroups ..). One producer thread streams each 64-wide K step -- the X tile [tile_m][64] in the 128-byte swizzle
//   layout (the B operand, K-major) and the weight rows [tile_n][64 elements] (packed bytes as stored; 16-bit weights
//   in the 128-byte swizzle layout, the A operand through a descriptor) -- into a ring of `stages` slots with two TMA
//   tensor copies (WsParams' tensor maps; rows past M or N arrive as zeros) on slot s's full mbarrier (expect_tx);
//   consumer warps release the slot on its empty mbarrier once the wgmma that read it retired. With two or four consumer
//   warpgroups the producer warpgroup gives its registers to them (setmaxnreg).
//
//   K groups (KGroups = WsConfig::k_groups, 1 or 2; WsSplit::split_k): with 2, each consumer warpgroup has a twin (warpgroups
//   Consumers .. 2 Consumers - 1) that takes the odd K steps of the block's range while the first group takes the even
//   ones: twice the decode threads per SM for the same tiles and grid (packed weights at decode sizes are bound by the
//   decode's instructions). A slot is released by the warps of the group that read it. After the
//   mainloops group 1 hands its fp32 partial sums to group 0 through shared memory over the ring (the ring is free once
//   both groups have passed a named barrier) and exits; group 0 adds them and runs the rest as with one group.
//
//   Consumer warpgroup cw owns features (cw Atoms + a) 64 .. + 63 of the tile, a < Atoms. Per K step it waits for the
//   slot, reads its weight rows (thread (warp w, lane l): rows 16 w + l / 4 and + 8 of each atom, the whole 64-element
//   row segment) and builds the A fragments of the four k16 slices: the fragment pairs of thread l are elements
//   (2 (l % 4), + 1) and (2 (l % 4) + 8, + 9) of the slice, i.e. byte l % 4 of every 4-byte word of a 4-bit row, the
//   bytes (2 (l % 4), + 1) of every 8-byte pair of an int8 row. Decoding of step j + 1 overlaps the asynchronous wgmma
//   of step j (A fragments double-buffered in registers); scales are loaded from global memory two steps ahead.
//     int4  (n - z) s: magic-number pair (int4_pair), the zero point subtracted exactly, one rounding by the scale.
//     int8  the exact integer (int8_pair); the per-row scale multiplies the fp32 accumulators in the epilogue.
//     nf4, mxfp4, nvfp4: the 256-pair code table times the scale in the dtype; fp16 activations with a scale outside
//           fp16's normal range take the fp32 path (code value x scale in fp32, one rounding) for the whole step.
//   Work split: the block's contiguous range of (tile, K step) units (qkv_proj_config.h): one K slice of one tile
//   (split_k >= 1) or, stream-K (split_k 0, one block per SM), a range that crosses tile boundaries, after whole-tile
//   rounds when there are 2 or more waves of tiles; the producer's ring runs on across tiles. split_k > 1: the split_k
//   blocks of a tile are one thread-block cluster (qkv_wgmma_ws_cluster); each rank reduces and finishes a contiguous
//   range of the tile's 8-token groups, the other ranks' partials arriving in its shared memory by st.async.
//   split_k_tail: the full waves' tiles whole, one block each (the grid's first blocks, in clusters that do not
//   interact), then the last wave's tiles as split_k > 1.
//   Stream-K tiles shared by several blocks are reduced through the workspace (qkv_streamk.cuh): fp32 partials in
//   the accumulator layout, a counter per tile; the tile's owner (the block holding its first K steps, the last
//   segment of the owner's range) adds the others' partials to its own registers in block order.
//   Epilogue: the accumulators (features x tokens) go transposed into the shared fp32 tile, then finish_tile (bias,
//   RoPE, split into Q/K/V) on the consumer warps (named barrier 1).
//
// Sources: PTX ISA 8.x (wgmma.mma_async with A in registers, register fragments and matrix descriptors, mbarrier,
// cp.async.bulk.tensor, setmaxnreg); CUDA Driver API cuTensorMapEncodeTiled; the weight formats as in quant_format.h.
#pragma once
#include "common/tma_ring.cuh"
#include "common/wgmma.cuh"
#include "qkv_proj/qkv_gemv.cuh"
#include "qkv_proj/qkv_streamk.cuh"

namespace kt {
namespace qkv {

/// Scale bits of one weight row for one 64-element K step (FormatTraits<F>::step_bits).
using WsScaleRaw = quant::StepScaleBits;

/// The packed bytes of one weight row for one 64-element K step: 8 words for a 4-bit element, 16 for int8 (32 for a
/// 16-bit weight, which is never decoded).
template <quant::Format F>
using WsRowWords = unsigned[64 * quant::format_bits(F) / 32];

/// How ws_decode_atom turns a weight element into A fragments: one WsAtomDecode specialization per kind.
enum class WsDecode {
  none,   ///< 16-bit weights: wgmma reads A from shared memory
  int8,   ///< the exact integer; the row scale multiplies the accumulators in the epilogue
  int4,   ///< (n - z) s with a magic-number pair
  table,  ///< nf4, mxfp4, nvfp4: the 256-pair code table times the scale
};
KT_HD constexpr WsDecode ws_decode_of(quant::Format f) {
  return f == quant::Format::int8   ? WsDecode::int8
         : f == quant::Format::int4 ? WsDecode::int4
         : gemv_uses_table(f)       ? WsDecode::table
                                    : WsDecode::none;
}

/// A fragments of one m64 atom for one K step: a[sl] = the four registers of k16 slice sl (wgmma.cuh's layout) for
/// this thread's rows lo = 16 w + l / 4 and hi = lo + 8. wlo / whi: the rows' packed bytes of the step; rlo / rhi their
/// scale bits; q = lane % 4. The primary template is the 16-bit case: nothing to decode.
template <DType DT, quant::Format F, WsDecode Kind = ws_decode_of(F)>
struct WsAtomDecode {
  __device__ __forceinline__ static void run(const WsRowWords<F>&, const WsRowWords<F>&, const WsScaleRaw&,
                                             const WsScaleRaw&, int, const PairTable<kWsTableCopies>&, const float*,
                                             float, unsigned (&)[4][4]) {}
};

/// int8: the exact integer (int8_pair) of bytes (2q, 2q + 1) of every 8-byte pair of the row.
template <DType DT, quant::Format F>
struct WsAtomDecode<DT, F, WsDecode::int8> {
  __device__ __forceinline__ static void run(const WsRowWords<F>& wlo, const WsRowWords<F>& whi, const WsScaleRaw&,
                                             const WsScaleRaw&, int q, const PairTable<kWsTableCopies>&, const float*,
                                             float, unsigned (&a)[4][4]) {
    const unsigned sel = unsigned(2 * q) | unsigned(2 * q + 1) << 4;  // bytes (2q, 2q + 1) of an 8-byte pair
#pragma unroll
    for (int sl = 0; sl < 4; ++sl) {
      a[sl][0] = int8_pair<DT>(ptx::prmt(wlo[4 * sl], wlo[4 * sl + 1], sel), 0x4140u);
      a[sl][1] = int8_pair<DT>(ptx::prmt(whi[4 * sl], whi[4 * sl + 1], sel), 0x4140u);
      a[sl][2] = int8_pair<DT>(ptx::prmt(wlo[4 * sl + 2], wlo[4 * sl + 3], sel), 0x4140u);
      a[sl][3] = int8_pair<DT>(ptx::prmt(whi[4 * sl + 2], whi[4 * sl + 3], sel), 0x4140u);
    }
  }
};

/// int4: (n - z) s from byte q of every word, the zero point subtracted exactly, one rounding by the scale.
template <DType DT, quant::Format F>
struct WsAtomDecode<DT, F, WsDecode::int4> {
  __device__ __forceinline__ static void run(const WsRowWords<F>& wlo, const WsRowWords<F>& whi, const WsScaleRaw& rlo,
                                             const WsScaleRaw& rhi, int q, const PairTable<kWsTableCopies>&,
                                             const float*, float, unsigned (&a)[4][4]) {
    const unsigned sel = unsigned(q) | unsigned(q) << 4 | unsigned(4 + q) << 8 | unsigned(4 + q) << 12;  // byte q
    const float magic = DT == DType::f16 ? 1024.f : 128.f;
    const float mzl = -(magic + float(rlo.z)), mzh = -(magic + float(rhi.z));  // exact: z is 0..15
    const float sl_ = quant::FormatTraits<F>::slice_scale(rlo, 0), sh_ = quant::FormatTraits<F>::slice_scale(rhi, 0);
    const unsigned zzl = ptx::pack2<DT>(mzl, mzl), zzh = ptx::pack2<DT>(mzh, mzh);
    const unsigned scl = ptx::pack2<DT>(sl_, sl_), sch = ptx::pack2<DT>(sh_, sh_);
#pragma unroll
    for (int sl = 0; sl < 4; ++sl) {
      a[sl][0] = int4_pair<DT>(wlo[2 * sl], sel, zzl, scl);
      a[sl][1] = int4_pair<DT>(whi[2 * sl], sel, zzh, sch);
      a[sl][2] = int4_pair<DT>(wlo[2 * sl + 1], sel, zzl, scl);
      a[sl][3] = int4_pair<DT>(whi[2 * sl + 1], sel, zzh, sch);
    }
  }
};

/// The scale s of k16 slice sl as an operand pair (s, s) of DT. mxfp4 with bf16: an E8M0 byte e is bf16's exponent
/// field, so 2^(e - 127) is the bits e << 7 (e = 0: the subnormal 2^-127, 0x0040; e = 255: NaN), with no float
/// conversion.
template <DType DT, quant::Format F>
__device__ __forceinline__ unsigned ws_scale_pair(const WsScaleRaw& r, float s, int sl) {
  if constexpr (F == quant::Format::mxfp4 && DT == DType::bf16) {
    const unsigned e = (r.s >> (8 * (sl / 2))) & 255u;
    const unsigned b = e == 0u ? 0x0040u : e == 255u ? 0x7FC0u : e << 7;
    return b | b << 16;
  } else {
    return ptx::pack2<DT>(s, s);
  }
}

/// Table formats (nf4, mxfp4, nvfp4): byte q of each word indexes the pair table, times the scale in the dtype; fp16
/// activations with a scale outside fp16's normal range take the fp32 path (code value x scale in fp32, one rounding)
/// for the whole step.
template <DType DT, quant::Format F>
struct WsAtomDecode<DT, F, WsDecode::table> {
  __device__ __forceinline__ static void run(const WsRowWords<F>& wlo, const WsRowWords<F>& whi, const WsScaleRaw& rlo,
                                             const WsScaleRaw& rhi, int q, const PairTable<kWsTableCopies>& tab,
                                             const float* lut, float tensor_scale, unsigned (&a)[4][4]) {
    const unsigned bsel = 0x4440u | unsigned(q);  // byte q, zero-extended
    float s[2][4];
    bool ok = true;
    quant::FormatTraits<F>::step_scales(rlo, tensor_scale, s[0]);
    quant::FormatTraits<F>::step_scales(rhi, tensor_scale, s[1]);
#pragma unroll
    for (int sl = 0; sl < 4; ++sl) ok = ok && dtype_holds_scale<DT>(s[0][sl]) && dtype_holds_scale<DT>(s[1][sl]);
    if (ok) {
      unsigned sp[2][4];  // the scales as operand pairs
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int sl = 0; sl < 4; ++sl) sp[h][sl] = ws_scale_pair<DT, F>(h ? rhi : rlo, s[h][sl], sl);
#pragma unroll
      for (int sl = 0; sl < 4; ++sl)
#pragma unroll
        for (int r = 0; r < 4; ++r) {  // r: (lo, hi) x (first, second 8 elements of the slice)
          const unsigned x = (r & 1) ? whi[2 * sl + r / 2] : wlo[2 * sl + r / 2];
          a[sl][r] = ptx::fma2<DT>(tab[ptx::prmt(x, 0u, bsel)], sp[r & 1][sl], 0x80008000u);
        }
    } else {
#pragma unroll
      for (int sl = 0; sl < 4; ++sl)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const unsigned x = (r & 1) ? whi[2 * sl + r / 2] : wlo[2 * sl + r / 2];
          const unsigned b = ptx::prmt(x, 0u, bsel);
          const float sc = s[r & 1][sl];
          a[sl][r] = ptx::pack2<DT>(lut[b & 15u] * sc, lut[b >> 4] * sc);
        }
    }
  }
};

/// A fragments of one m64 atom for one K step (WsAtomDecode<DT, F>; 16-bit weights: a no-op).
template <DType DT, quant::Format F>
__device__ __forceinline__ void ws_decode_atom(const WsRowWords<F>& wlo, const WsRowWords<F>& whi,
                                               const WsScaleRaw& rlo, const WsScaleRaw& rhi, int q,
                                               const PairTable<kWsTableCopies>& tab, const float* lut,
                                               float tensor_scale, unsigned (&a)[4][4]) {
  WsAtomDecode<DT, F>::run(wlo, whi, rlo, rhi, q, tab, lut, tensor_scale, a);
}

// Timeline experiments only (never defined by the generator): KT_WS_TRACE(i) records %globaltimer at point i of the
// block into kt_ws_trace[block * 16 + i] (a global __device__ array the experiment defines before including this
// header), from consumer thread 0: 0 entry, 1 first slot full, 2 last mainloop end, 3 last partial counted (a cluster:
// its cluster barrier passed), 4 last reduction end, 5 end; 6 the SM id; 7 segments run; 8 the producer's first copy
// issued (producer thread); 9 the output tile in shared memory; 10-12 finish_tile (KT_EPI_TRACE, qkv_proj.cuh);
// producer thread: 13 its entry, 14 barriers initialized, 15 the ring's first copies issued.
#ifdef KT_WS_TRACE_ON
#define KT_WS_TRACE(i)                                             \
  do {                                                             \
    unsigned long long t_;                                         \
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));         \
    if (threadIdx.x == 0) kt_ws_trace[blockIdx.x * 16 + (i)] = t_; \
  } while (0)
#define KT_WS_TRACE_VAL(i, v)                                       \
  do {                                                              \
    if (threadIdx.x == 0) kt_ws_trace[blockIdx.x * 16 + (i)] = (v); \
  } while (0)
#define KT_WS_TRACE_THIS(i)                                \
  do {                                                     \
    unsigned long long t_;                                 \
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_)); \
    kt_ws_trace[blockIdx.x * 16 + (i)] = t_;               \
  } while (0)
#else
#define KT_WS_TRACE_THIS(i) \
  do {                      \
  } while (0)
#define KT_WS_TRACE(i) \
  do {                 \
  } while (0)
#define KT_WS_TRACE_VAL(i, v) \
  do {                        \
  } while (0)
#endif

/// Two K groups: group 1 hands its partial sums to group 0 through shared memory over the ring (every step is
/// consumed once both groups passed the first named barrier); group 0 adds them (one order: deterministic). Returns
/// false for group 1, which then exits; group 0 goes on as the block's only consumers.
template <int kAtoms, int TileM, int kCThreads, int kAllC>
__device__ __forceinline__ bool ws_exchange_k_groups(float (&acc)[kAtoms][TileM / 2], unsigned char* smem, int kgrp,
                                                     int ctid) {
  // Float4 v of the thread's accumulators (kAtoms x TileM / 2 floats), as in the block's partial tiles.
  auto acc4 = [&](int v) -> float* { return &acc[(4 * v) / (TileM / 2)][(4 * v) % (TileM / 2)]; };
  constexpr int kVec = kAtoms * TileM / 8;  // float4s per thread
  float4* xfer = reinterpret_cast<float4*>(smem);
  ptx::named_barrier(2, kAllC);
  if (kgrp == 1) {
#pragma unroll
    for (int v = 0; v < kVec; ++v)
      xfer[v * kCThreads + ctid] = make_float4(acc4(v)[0], acc4(v)[1], acc4(v)[2], acc4(v)[3]);
  }
  ptx::named_barrier(2, kAllC);
  if (kgrp == 1) return false;
#pragma unroll
  for (int v = 0; v < kVec; ++v) {
    add_f4(acc4(v), xfer[v * kCThreads + ctid]);
  }
  return true;
}

/// The producer thread's start, before the block-wide barrier (and the decode tables), so that the weight stream starts
/// as early as it can: the first copies' data is what the consumers wait for longest. It prefetches the tensor maps,
/// initializes the ring's barriers (and a cluster rank's reduction barrier s_red_bar, which expects the other ranks'
/// partials of its live token groups as st.async transactions) and fills the empty ring with steps 0 .. n_first - 1
/// (issue(j): step j's copies). Its own arrivals and copies follow the inits in program order; the init fence makes
/// them visible to the async proxy and, with the caller's __syncthreads, to the consumers.
template <int TileM, int Consumers, int Stages, int ClusterK, int kAtoms, int kCThreads, class Issue>
__device__ __forceinline__ void ws_producer_start(const WsParams& wp, const pipe::TmaRing<Stages>& ring,
                                                  unsigned long long& s_red_bar, int tile, bool split, int n_tiles,
                                                  int n_first, Issue& issue) {
  const QkvParams& p = wp.p;
  constexpr int kGroups = TileM / 8;

  KT_WS_TRACE_THIS(13);
  ptx::prefetch_tensormap(&wp.x_map);
  ptx::prefetch_tensormap(&wp.w_map);
  ring.init(4 * Consumers);     // empty: one arrival per consumer warp of the step's K group
  if (ClusterK > 1 && split) {  // the other ranks' partials of this rank's live token groups, as st.async transactions
    const int rank = int(ptx::cluster_rank());
    const int live = min(kGroups, (p.m - (tile / n_tiles) * TileM + 7) / 8);
    const int g_lo = kGroups * rank / ClusterK, g_hi = min(kGroups * (rank + 1) / ClusterK, live);
    ptx::mbarrier_init(ptx::smem_u32(&s_red_bar), 1);
    ptx::mbarrier_arrive_expect_tx(
        ptx::smem_u32(&s_red_bar),
        g_hi > g_lo ? unsigned((ClusterK - 1) * kAtoms * (g_hi - g_lo) * kCThreads * 16) : 0u);
  }
  ptx::mbarrier_init_fence();
  wgmma::fence_proxy_async();
  KT_WS_TRACE_THIS(14);
  for (int j = 0; j < n_first; ++j) {
    issue(j);
    if (j == 0) KT_WS_TRACE_THIS(8);
  }
  KT_WS_TRACE_THIS(15);
}

/// Epilogue inputs of tile t, copied into shared memory with cp.async by consumer thread ctid of K group 0's kCThreads:
/// the bias pairs of the tile's features, its tokens' positions and, where `turns`, the RoPE turns (computed; the same
/// for every tile). Copied before the tile's mainloop so that nothing waits for them (a load under the weight stream
/// takes 2-3 us); waited for (cp_async_wait_all) and made visible (the epilogue's named barrier) only before the
/// epilogue.
template <int D, bool HasBias, bool Rope, int TileM, int TileN, int kCThreads>
__device__ __forceinline__ void ws_preload_epilogue(const QkvParams& p, int t, int n_tiles, int N, int ctid,
                                                    unsigned* s_pre_bias2, int* s_pre_pos,
                                                    unsigned long long* s_pre_turns, bool turns) {
  const int n0 = (t % n_tiles) * TileN, m0 = (t / n_tiles) * TileM;
  for (int i = ctid; i < TileN / 2; i += kCThreads) {
    if (HasBias && n0 + 2 * i < N)
      ptx::cp_async_4(ptx::smem_u32(s_pre_bias2 + i), static_cast<const unsigned*>(p.bias) + n0 / 2 + i);
    else s_pre_bias2[i] = 0u;
  }
  if (Rope) {
    for (int i = ctid; i < TileM; i += kCThreads) {
      if (m0 + i < p.m) ptx::cp_async_4(ptx::smem_u32(s_pre_pos + i), p.positions + m0 + i);
      else s_pre_pos[i] = 0;
    }
    if (turns)
      for (int i = ctid; i < D / 2; i += kCThreads) s_pre_turns[i] = rope_turns<D>(p, i);
  }
}

/// The consumer mainloop of one segment: this K group's steps of the segment's K steps k0 .. k0 + nks - 1 (ring steps
/// g0 ..; K group kgrp takes steps kgrp, kgrp + KGroups, ..) of feature tile n0, added into acc (zeroed by the caller:
/// kAtoms m64 atoms x the TileM / 2 accumulators of wgmma's C fragment). Packed weights: scales loaded two steps
/// ahead, the decode of step j + 1 (A fragments in registers, double-buffered) under the wgmma of step j; 16-bit
/// weights: A from shared memory. Every slot the group read is released; on return every wgmma has retired.
/// row_lo0: the thread's first feature row of the tile; fwg: its feature warpgroup.
template <DType DT, quant::Format F, int TileM, int TileN, int Consumers, int Stages, int KGroups>
__device__ __forceinline__ void ws_mainloop(float (&acc)[TileN / (64 * Consumers)][TileM / 2], const QkvParams& p,
                                            const unsigned char* smem, unsigned sX, unsigned sW,
                                            const pipe::TmaRing<Stages>& ring, const PairTable<kWsTableCopies>& tab,
                                            const float* s_lut, int g0, int k0, int nks, int n0, int N, int row_lo0,
                                            int q, int lane, int kgrp, int fwg) {
  constexpr bool kWide = quant::FormatTraits<F>::kBits == 16;  // 16-bit weight: A from shared memory, no decode
  constexpr int kAtoms = TileN / (64 * Consumers);
  constexpr int kRowB = ws_w_row_bytes(F);  // bytes of one weight row per K step: 32, 64 or 128
  constexpr int kRowWords = kRowB / 4;
  constexpr unsigned kXB = TileM * 128, kWB = TileN * kRowB;
  unsigned afrag[kWide ? 1 : 2][kAtoms][4][4];  // A fragments, double-buffered (step parity)
  WsScaleRaw sraw[2][kAtoms][2];                // scales of steps j, j + 1 (ring by step parity) x atom x (lo, hi)
  auto load_scales_of = [&](int buf, int j) {
    if (kWide || F == quant::Format::int8 || j >= nks) return;
#pragma unroll
    for (int a = 0; a < kAtoms; ++a)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = min(n0 + row_lo0 + 64 * a + 8 * h, N - 1);  // rows past N: any valid row (outputs dropped)
        sraw[buf][a][h] = quant::FormatTraits<F>::step_bits(p.w_scales, p.w_zeros, p.k_dim, row, k0 + j);
      }
  };
  auto decode = [&](int buf, int j) {  // step j's slot is full
    const unsigned char* wslot = smem + Stages * kXB + ((g0 + j) % Stages) * kWB;
#pragma unroll
    for (int a = 0; a < kAtoms; ++a) {
      unsigned wlo[kRowWords], whi[kRowWords];
      const int r = row_lo0 + 64 * a;
#pragma unroll
      for (int v = 0; v < kRowWords / 4; ++v) {
        const uint4 lo = *reinterpret_cast<const uint4*>(wslot + r * kRowB + 16 * v);
        const uint4 hi = *reinterpret_cast<const uint4*>(wslot + (r + 8) * kRowB + 16 * v);
        wlo[4 * v] = lo.x, wlo[4 * v + 1] = lo.y, wlo[4 * v + 2] = lo.z, wlo[4 * v + 3] = lo.w;
        whi[4 * v] = hi.x, whi[4 * v + 1] = hi.y, whi[4 * v + 2] = hi.z, whi[4 * v + 3] = hi.w;
      }
      ws_decode_atom<DT, F>(wlo, whi, sraw[buf][a][0], sraw[buf][a][1], q, tab, s_lut, p.tensor_scale,
                            afrag[kWide ? 0 : buf][a]);
    }
  };
  // This K group's steps of the segment: local step i is segment step sj(i); nloc of them (a group may have none).
  auto sj = [&](int i) { return KGroups * i + kgrp; };
  const int nloc = (nks - kgrp + KGroups - 1) / KGroups;

  if (!kWide && (KGroups == 1 || nloc > 0)) {  // one group: every segment has a step
    load_scales_of(0, sj(0));
    load_scales_of(1, sj(1));
    ring.wait(g0 + sj(0));
    decode(0, sj(0));
    load_scales_of(0, sj(2));
  }
  // Unrolled by 2 so that the double buffers' index (local step parity) is a compile-time constant.
  for (int i0 = 0; i0 < nloc; i0 += 2) {
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const int i = i0 + b, j = sj(i);
      if (i < nloc) {
        const int slot = (g0 + j) % Stages;
        if (kWide) ring.wait(g0 + j);
#ifdef KT_WS_TRACE_ON
        if (g0 + j == 0) KT_WS_TRACE(1);
#endif
        wgmma::fence();
        const unsigned xs = sX + slot * kXB;
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
#pragma unroll
          for (int a = 0; a < kAtoms; ++a) {
            const unsigned long long bdesc = wgmma::make_desc_sw128(xs + ks * 32);
            if (kWide)
              wgmma::Mma<DT, TileM>::run(
                  acc[a], wgmma::make_desc_sw128(sW + slot * kWB + (fwg * kAtoms + a) * 64 * 128 + ks * 32), bdesc);
            else wgmma::MmaRS<DT, TileM>::run(acc[a], afrag[kWide ? 0 : b][a][ks], bdesc);
          }
        wgmma::commit_group();
        wgmma::wait_group<1>();  // step j - 1 retired: its slot and A buffer are free
#pragma unroll
        for (int a = 0; a < kAtoms; ++a) {
          wgmma::fence_operands(acc[a]);
          if (!kWide)
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) wgmma::fence_operands(afrag[kWide ? 0 : 1 - b][a][ks]);
        }
        if (i >= 1 && lane == 0) ring.release(g0 + sj(i - 1));
        if (!kWide && i + 1 < nloc) {  // decode the group's next step while the tensor cores work on step j
          ring.wait(g0 + sj(i + 1));
          decode(1 - b, sj(i + 1));
          load_scales_of(1 - b, sj(i + 3));
        }
      }
    }
  }
  wgmma::wait_group<0>();
#pragma unroll
  for (int a = 0; a < kAtoms; ++a) wgmma::fence_operands(acc[a]);
  if ((KGroups == 1 || nloc > 0) && lane == 0)  // the group's last slot
    ring.release(g0 + sj(nloc - 1));
}

/// One rank's exchange and sum of ws_cluster_reduce, with its rank kRank a compile-time constant: every group's owner
/// and every slot index is then known at compile time. The remote addresses are mapped once per owner (not per store),
/// and the sum's shared loads carry no branch, so they issue together instead of one group's round trip at a time (a
/// run-time rank left a branch and a dependent load chain per group: 1.6 us of a 256-token tile's sum on the H200).
/// The rank sends its partial sums of the other ranks' live groups (stores predicated on i < live: the transaction
/// bytes its owner expects), then waits on its own mbarrier and adds the ranks' partials of its groups [kLo, kHi) in
/// rank order (the same order for every owner: deterministic). Groups at or past `live` have no token < M: their sums
/// (of slots nobody wrote) are never stored, since the rank's epilogue rows end at its last live group.
template <int kRank, int kAtoms, int TileM, int ClusterK, int kCThreads, int kOwnMax, unsigned kSlotB,
          unsigned kSlotOff>
__device__ __forceinline__ void ws_cluster_exchange(float (&acc)[kAtoms][TileM / 2], unsigned base,
                                                    const unsigned char* smem, unsigned red_bar, int live, int ctid) {
  constexpr int kGroups = TileM / 8;
  constexpr int kLo = kGroups * kRank / ClusterK, kHi = kGroups * (kRank + 1) / ClusterK;
  // Owner o's slot for this rank's partials (at this thread's first float4) and its reduction barrier.
  unsigned dst[ClusterK], bar[ClusterK];
#pragma unroll
  for (int o = 0; o < ClusterK; ++o) {
    if (o == kRank) continue;
    dst[o] = ptx::cluster_map(base + kSlotOff + unsigned(kRank < o ? kRank : kRank - 1) * kSlotB + unsigned(ctid) * 16u,
                              unsigned(o));
    bar[o] = ptx::cluster_map(red_bar, unsigned(o));
  }
#pragma unroll
  for (int i = 0; i < kGroups; ++i) {
    const int o = ws_group_owner(i, kGroups, ClusterK);
    if (o == kRank) continue;
#pragma unroll
    for (int a = 0; a < kAtoms; ++a)
      ptx::st_async_f4(dst[o] + unsigned((a * kOwnMax + i - kGroups * o / ClusterK) * kCThreads) * 16u,
                       make_float4(acc[a][4 * i], acc[a][4 * i + 1], acc[a][4 * i + 2], acc[a][4 * i + 3]), bar[o],
                       i < live);
  }
  ptx::mbarrier_wait(red_bar, 0u);
#pragma unroll
  for (int i = kLo; i < kHi; ++i)
#pragma unroll
    for (int a = 0; a < kAtoms; ++a) {
      float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int r = 0; r < ClusterK; ++r) {
        float4 x;
        if (r == kRank) {
          x = make_float4(acc[a][4 * i], acc[a][4 * i + 1], acc[a][4 * i + 2], acc[a][4 * i + 3]);
        } else {
          const float4* part = reinterpret_cast<const float4*>(smem + kSlotOff + (r < kRank ? r : r - 1) * kSlotB);
          x = part[(a * kOwnMax + i - kLo) * kCThreads + ctid];
        }
        if (r == 0) sum = x;
        else add_f4(sum, x);
      }
      acc[a][4 * i] = sum.x, acc[a][4 * i + 1] = sum.y, acc[a][4 * i + 2] = sum.z, acc[a][4 * i + 3] = sum.w;
    }
}

/// ws_cluster_exchange for the rank `rank` (one instantiation per rank; the rank is uniform over the block).
template <int kRank, int kAtoms, int TileM, int ClusterK, int kCThreads, int kOwnMax, unsigned kSlotB,
          unsigned kSlotOff>
__device__ __forceinline__ void ws_cluster_exchange_rank(int rank, float (&acc)[kAtoms][TileM / 2], unsigned base,
                                                         const unsigned char* smem, unsigned red_bar, int live,
                                                         int ctid) {
  if constexpr (kRank + 1 < ClusterK) {
    if (rank != kRank) {
      ws_cluster_exchange_rank<kRank + 1, kAtoms, TileM, ClusterK, kCThreads, kOwnMax, kSlotB, kSlotOff>(
          rank, acc, base, smem, red_bar, live, ctid);
      return;
    }
  }
  ws_cluster_exchange<kRank, kAtoms, TileM, ClusterK, kCThreads, kOwnMax, kSlotB, kSlotOff>(acc, base, smem, red_bar,
                                                                                            live, ctid);
}

/// Split-K over a cluster (ClusterK > 1 ranks = the K slices of tile m0): the tile's 8-token groups are dealt out in
/// contiguous ranges (ws_group_owner). Each rank st.asyncs its partial sums of the other ranks' live groups into
/// their slots (kSlotOff + slot kSlotB each, ws_cluster_slot_offset; kOwnMax groups per slot), completing on the
/// owner's reduction mbarrier s_red_bar, then waits on its own barrier alone and adds the ranks' partials of its
/// groups in rank order (ws_cluster_exchange). Slots beside the ring (kSlotsBeside): no cluster barrier after the
/// mainloops (the slower block's mainloop end is the only wait); slots over the ring: one, so that no rank stores into
/// a ring still being read. (A bulk copy per slot instead of the st.asyncs is no faster.) Sets [e_lo, e_lo + e_rows)
/// to the rank's token rows: its epilogue covers 1 / ClusterK of the tile.
template <int kAtoms, int TileM, int ClusterK, int kCThreads, int kOwnMax, unsigned kSlotB, unsigned kSlotOff,
          bool kSlotsBeside>
__device__ __forceinline__ void ws_cluster_reduce(float (&acc)[kAtoms][TileM / 2], const QkvParams& p, int m0,
                                                  unsigned base, const unsigned char* smem,
                                                  unsigned long long& s_red_bar, int ctid, int& e_lo, int& e_rows) {
  constexpr int kGroups = TileM / 8;
  const int rank = int(ptx::cluster_rank());
  // Groups with a token < M (the others are neither sent nor stored).
  const int live = min(kGroups, (p.m - m0 + 7) / 8);
  const int g_lo = kGroups * rank / ClusterK, g_hi = min(kGroups * (rank + 1) / ClusterK, live);
  ptx::cluster_wait();  // the entry arrivals: every rank runs, its reduction barrier initialized
  if (!kSlotsBeside) {  // the slots lie over the rings: every rank's wgmmas have retired
    ptx::cluster_arrive_release();
    ptx::cluster_wait();
  }
  KT_WS_TRACE(3);
  ws_cluster_exchange_rank<0, kAtoms, TileM, ClusterK, kCThreads, kOwnMax, kSlotB, kSlotOff>(
      rank, acc, base, smem, ptx::smem_u32(&s_red_bar), live, ctid);
  e_lo = 8 * g_lo, e_rows = g_hi > g_lo ? 8 * (g_hi - g_lo) : 0;
  KT_WS_TRACE(4);
}

/// The epilogue of tile (m0, n0): the accumulators (features x tokens) -> the shared fp32 tile sC [kEpiRows tokens]
/// [TileN + 4], kEpiRows at a time (rank_rows, a cluster rank of a split tile: its own rows [e_lo, e_lo + e_rows) at
/// once), int8 times the row scale, then finish_tile (bias, RoPE, split into Q/K/V) on the kCThreads consumer threads
/// (named barrier 1).
/// Split-K: every consumer's wgmma retired, so the ring can be the tile. Stream-K: the previous chunk's epilogue has
/// read sC. The epilogue inputs were copied by ws_preload_epilogue.
template <DType DT, quant::Format F, int D, bool HasBias, bool Rope, bool KvCache, int TileM, int TileN, int kAtoms,
          int kCThreads, int kEpiRows, bool kWide>
__device__ __forceinline__ void ws_epilogue(const float (&acc)[kAtoms][TileM / 2], const QkvParams& p, float* sC,
                                            int n0, int m0, int N, int row_lo0, int q, bool rank_rows, int e_lo,
                                            int e_rows, const unsigned* s_pre_bias2, const int* s_pre_pos,
                                            const unsigned long long* s_pre_turns) {
  constexpr int kGroups = TileM / 8;
  constexpr int kLd = TileN + 4;
  // The epilogue's load batch (finish_tile): 8 token rows, or 1 for packed weights with 2 atoms of 96+ tokens, whose
  // 96-128 accumulator registers plus the decode's left no room (int4 / int8 variants spilled 16-216 bytes).
  constexpr int kEpiBatch = !kWide && kAtoms == 2 && TileM >= 96 ? 1 : 8;
  float rs[kAtoms][2];
#pragma unroll
  for (int a = 0; a < kAtoms; ++a)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int f = n0 + row_lo0 + 64 * a + 8 * h;
      rs[a][h] = gemv_scale_mode(F) != kScaleRow ? 1.f : f < N ? __ldg(static_cast<const float*>(p.w_scales) + f) : 0.f;
    }
  ptx::cp_async_wait_all();  // this thread's copies of the epilogue inputs (the barrier below: everyone's)
#pragma unroll
  for (int c0 = 0; c0 < TileM; c0 += kEpiRows) {
    // (kEpiRows need not divide TileM: a cluster rank's rows rounded up to 8-token groups)
    const int lo = rank_rows ? e_lo : c0, rows = rank_rows ? e_rows : min(kEpiRows, TileM - c0);
    if (rows == 0 || m0 + lo >= p.m) break;  // no tokens left for this block (uniform over the block)
    ptx::named_barrier(1, kCThreads);
#pragma unroll
    for (int a = 0; a < kAtoms; ++a)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int i = 0; i < kGroups; ++i) {
          if (8 * i < lo || 8 * i >= lo + rows) continue;  // compile-time except in a cluster kernel
#pragma unroll
          for (int e = 0; e < 2; ++e)
            sC[(8 * i - lo + 2 * q + e) * kLd + row_lo0 + 64 * a + 8 * h] = acc[a][4 * i + 2 * h + e] * rs[a][h];
        }
    ptx::named_barrier(1, kCThreads);
    KT_WS_TRACE(9);
    finish_tile<DT, D, HasBias, Rope, KvCache, kEpiRows, TileN, kCThreads, 1, kEpiBatch, true>(
        p, sC, m0 + lo, n0, s_pre_bias2, s_pre_pos + lo, s_pre_turns, rows);
    if (rank_rows) break;
  }
}

/// The kernel body: the producer warpgroup streams the block's K steps into the ring (ws_producer_start, then the loop
/// below); the consumer warpgroups run one segment per tile the block's range touches: ws_mainloop, the K-group
/// exchange (ws_exchange_k_groups), the tile's reduction -- a cluster's (ClusterK > 1, qkv_wgmma_ws_cluster:
/// ws_cluster_reduce) or stream-K's through the workspace (ws_stream_k_publish / ws_stream_k_fixup, qkv_streamk.cuh)
/// -- and ws_epilogue.
template <DType DT, quant::Format F, int D, bool HasBias, bool Rope, bool KvCache, int TileM, int TileN, int Consumers,
          int Stages, bool StreamK, int ClusterK, int KGroups>
__device__ __forceinline__ void ws_body(const WsParams& wp) {
  const QkvParams& p = wp.p;
  constexpr Config C = make_config(
      TileM, TileN,
      WsConfig{Consumers, KGroups, Stages, StreamK ? WsSplit::stream_k : WsSplit::split_k, StreamK ? 1 : ClusterK});
  // Preconditions
  static_assert(ClusterK == 1 || !StreamK, "stream-K blocks do not form clusters");
#ifdef __CUDA_ARCH__  // device pass (NVRTC compiles only that; nvcc also parses for the host)
  static_assert(invalid_reason(DT, F, D, Rope, C, ArchId{__CUDA_ARCH__ / 10, KT_ARCH_SPECIFIC}) == nullptr,
                "invalid qkv_wgmma_ws variant: see invalid_reason() in qkv_proj_config.h");
#endif
  static_assert(TileN % (64 * Consumers) == 0, "wgmma_ws: each consumer warpgroup owns whole m64 atoms of features");
  static_assert(TileM % 8 == 0, "wgmma_ws: the tokens are the wgmma N, a multiple of 8");
  static_assert(KGroups == 1 || KGroups == 2, "wgmma_ws: one or two K groups");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kBits = quant::FormatTraits<F>::kBits;
  constexpr bool kWide = kBits == 16;  // 16-bit weight: A from shared memory, no decode
  constexpr int kAtoms = TileN / (64 * Consumers);
  constexpr int kRowB = ws_w_row_bytes(F);  // bytes of one weight row per K step: 32, 64 or 128
  constexpr unsigned kXB = TileM * 128, kWB = TileN * kRowB;
  constexpr int kCThreads = 128 * Consumers;  // the consumer threads of one K group (the epilogue's threads)
  constexpr int kAllC = kCThreads * KGroups;  // every consumer thread; the producer warpgroup follows them

  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ float s_lut[16];
  __shared__ __align__(16) unsigned s_tab[gemv_uses_table(F) ? 256 * kWsTableCopies : 4];
  __shared__ __align__(8) unsigned long long s_bar[2 * Stages];  // the ring's full and empty mbarriers
  __shared__ __align__(8) unsigned long long s_red_bar;          // split-K cluster: rank 0's partials have landed
  // 1024-byte aligned base for the swizzled tiles (the launch requests ws_smem_bytes, which includes the slack).
  const unsigned raw = ptx::smem_u32(smem_raw);
  const unsigned base = (raw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (base - raw);
  const unsigned sX = base;  // [Stages][TileM tokens][64 K] 16-bit, 128-byte swizzle (B, K-major)
  const unsigned sW =
      base + Stages * kXB;  // [Stages][TileN features][kRowB bytes] packed as stored (16-bit: swizzled A)
  const pipe::TmaRing<Stages> ring(s_bar);
  // fp32 output tile [ws_epilogue_rows][TileN + 4]: after the ring for stream-K (the ring stays busy), else over it
  // (a cluster whose partial slots lie over the ring: after the slots, ws_cluster_tile_offset).
  constexpr int kTileOff = StreamK ? Stages * (kXB + kWB) : ClusterK > 1 ? ws_cluster_tile_offset(C, F) : 0;
  float* sC = reinterpret_cast<float*>(smem + kTileOff);  // [ws_epilogue_rows tokens][TileN + 4 features] fp32

  KT_WS_TRACE(0);
  const int tid = threadIdx.x, wg = tid / 128;
  const int N = (p.num_heads + 2 * p.num_kv_heads) * D;
  const int n_tiles = (N + TileN - 1) / TileN;
  const int nk = p.k_dim / 64;  // K steps per tile
  // Units (tile, K step), tile-major; tile t = (token tile t / n_tiles, feature tile t % n_tiles). Block b owns
  // [units b / G, units (b + 1) / G): with G = tiles x split_k that is K slice b % split_k of tile b / split_k.
  // Stream-K with at least 2 G tiles first runs whole tiles b, b + G, .. for dp_rounds = tiles / G - 1 rounds (the
  // "data-parallel + stream-K" hybrid of Osama et al.: one wave of neighbouring tiles at a time) and splits only
  // the remaining G .. 2 G tiles' units; u_begin, u_end and the split below are counted from dp_units.
  const int tiles = n_tiles * ((p.m + TileM - 1) / TileM);
  const int G = gridDim.x, blk = blockIdx.x;
  const int dp_rounds = StreamK && tiles / G > 1 ? tiles / G - 1 : 0;
  const int dp_units = dp_rounds * G * nk;
  const int units = tiles * nk - dp_units;  // units of the split; < 2^31 (checked on the host)
  // Split-K: the first `whole` blocks (ws_whole_tiles: WsSplit::split_k_tail's full waves; none for split_k, where G =
  // tiles x ClusterK) run one whole tile each, the others K slice (blk - whole) % ClusterK of tile whole + (blk -
  // whole) / ClusterK, in 32-bit arithmetic by constants (the 64-bit divisions by G are a slow subroutine on the path to
  // the first copy). `whole` is a multiple of ClusterK, so a cluster's blocks are all whole or all split.
  const int whole = ClusterK > 1 ? ws_whole_tiles(tiles, ClusterK, G) : 0;
  const bool split = ClusterK > 1 && blk >= whole;
  const int my_tile = split ? whole + (blk - whole) / ClusterK : blk;  // (split-K only)
  const int slice = split ? (blk - whole) % ClusterK : 0, slices = split ? ClusterK : 1;
  const int u_begin = StreamK ? dp_units + int((long long)units * blk / G) : my_tile * nk + nk * slice / slices;
  const int u_end =
      StreamK ? dp_units + int((long long)units * (blk + 1) / G) : my_tile * nk + nk * (slice + 1) / slices;

  // The producer thread: the ring's steps j = 0 .. n_steps - 1, (tile t, K step kt) each, issued in order.
  const int n_steps = dp_rounds * nk + u_end - u_begin;
  int t_next = !StreamK ? my_tile : dp_rounds > 0 ? blk : u_begin / nk;
  int kt_next = !StreamK ? u_begin - t_next * nk : dp_rounds > 0 ? 0 : u_begin % nk;
  // The weight's L2 policy: evict_first or none (QkvParams::w_evict_first, qkv::weight_evict_first).
  const ptx::L2Hint wl2 = ptx::l2_evict_first_if(p.w_evict_first != 0);
  auto issue = [&](int j) {  // step j's two tensor copies into slot j % Stages (free), then the walk's next step
    const int slot = ring.slot(j);
    const unsigned bar = ring.arm(slot, kXB + kWB);
    ptx::tma_load_2d(sX + slot * kXB, &wp.x_map, kt_next * 64, (t_next / n_tiles) * TileM, bar);
    if (kWide)  // 16-bit: the 3-D map {64, N, K / 64} (row-major or K-blocked: the host's strides say which)
      ptx::tma_load_3d(sW + slot * kWB, &wp.w_map, 0, (t_next % n_tiles) * TileN, kt_next, bar, wl2);
    else if (p.w_k_blocked)  // packed, K-blocked: the 3-D map {64, N, K bytes / 64} (WsParams)
      ptx::tma_load_3d(sW + slot * kWB, &wp.w_map, kt_next * kRowB % 64, (t_next % n_tiles) * TileN,
                       kt_next * kRowB / 64, bar, wl2);
    else ptx::tma_load_2d(sW + slot * kWB, &wp.w_map, kt_next * kRowB, (t_next % n_tiles) * TileN, bar, wl2);
    if (++kt_next == nk) {
      kt_next = 0;
      t_next = j + 1 < dp_rounds * nk ? t_next + G : j + 1 == dp_rounds * nk ? u_begin / nk : t_next + 1;
      if (j + 1 == dp_rounds * nk) kt_next = u_begin % nk;
    }
  };
  // The producer thread starts the weight stream before the block-wide barrier (ws_producer_start).
  const int n_first = n_steps < Stages ? n_steps : Stages;
  if (tid == kAllC)
    ws_producer_start<TileM, Consumers, Stages, ClusterK, kAtoms, kCThreads>(wp, ring, s_red_bar, my_tile, split,
                                                                             n_tiles, n_first, issue);
  // Every block of the cluster is running, with its barriers initialized (the init fence above), before any block
  // stores into another's shared memory (the consumers wait on this before their stores; every thread arrives here).
  // The blocks of whole tiles never touch one another's shared memory: they skip the cluster barrier.
  if (split) ptx::cluster_arrive_relaxed();
  if (!kWide) build_decode_tables<DT, F, kWsTableCopies>(s_lut, s_tab, tid, kAllC + 128);
  __syncthreads();

  constexpr int kConsumerWgs = Consumers * KGroups;
  if (wg == kConsumerWgs) {
    // ---------------- producer warpgroup ----------------
    if (kConsumerWgs == 2) wgmma::setmaxnreg_dec<kWsProducerRegs>();
    if (kConsumerWgs == 4) wgmma::setmaxnreg_dec<kWsProducerRegs4>();
    if (tid == kAllC) {  // the rest of the block's steps, each into a slot whose last use retired
      for (int j = n_first; j < n_steps; ++j) {
        ring.acquire(j);
        issue(j);
      }
    }
    return;  // the consumers' barriers below are named barriers over their own threads
  }

  // ---------------- consumer warpgroups ----------------
  if (kConsumerWgs == 2) wgmma::setmaxnreg_inc<kWsConsumerRegs>();
  if (kConsumerWgs == 4) wgmma::setmaxnreg_inc<kWsConsumerRegs4>();
  // K group kgrp (KGroups > 1) takes the segment's K steps kgrp, kgrp + KGroups, ..; fwg: the feature warpgroup
  const int kgrp = KGroups > 1 ? wg / Consumers : 0, fwg = KGroups > 1 ? wg % Consumers : wg;
  const int ctid = KGroups > 1 ? tid % kCThreads : tid, warp = (tid % 128) / 32, lane = tid % 32, q = lane % 4;
  const int row_lo0 = fwg * kAtoms * 64 + warp * 16 + lane / 4;  // tile row (feature) of atom 0, + 64 a, + 8 for hi
  const PairTable<kWsTableCopies> tab(s_tab, gemv_uses_table(F) ? lane % kWsTableCopies : 0);

  // Epilogue inputs of a tile, copied with cp.async before its mainloop, so that nothing waits for them (a load under
  // the weight stream takes 2-3 us), and waited for only before the epilogue, instead of loaded after the mainloop
  // where their latency (and the frequency table) added to the time after the weight stream. The epilogue's named
  // barrier makes them visible to every consumer thread. Split-K: the block's one tile, now (every cluster rank
  // finishes its own token rows, so every rank copies them); stream-K: each segment's tile, at the segment's start.
  __shared__ unsigned s_pre_bias2[TileN / 2];
  __shared__ int s_pre_pos[TileM];
  __shared__ unsigned long long s_pre_turns[Rope ? D / 2 : 1];
  if (!StreamK && kgrp == 0)
    ws_preload_epilogue<D, HasBias, Rope, TileM, TileN, kCThreads>(p, my_tile, n_tiles, N, ctid, s_pre_bias2, s_pre_pos,
                                                                   s_pre_turns, true);

  // One segment per tile: the data-parallel rounds' whole tiles, then each tile the range touches: K steps
  // [k0, k0 + nks) of tile t, ring steps g0 .. g0 + nks - 1.
  int g_next = 0;
  for (int r = 0, u0 = u_begin; r < dp_rounds || u0 < u_end;) {
    int t, k0, nks;
    if (r < dp_rounds) {
      t = blk + r * G, k0 = 0, nks = nk;
      ++r;
    } else {
      t = u0 / nk, k0 = u0 % nk;
      const int seg_end = min(u_end, (t + 1) * nk);
      nks = seg_end - u0;
      u0 = seg_end;
    }
    const int g0 = g_next;
    g_next += nks;
    const int n0 = (t % n_tiles) * TileN, m0 = (t / n_tiles) * TileM;
    if (StreamK) {  // (stream-K has one K group)
      // The previous segment's copies have landed (a segment whose tile another block finishes never waited for
      // them) and every consumer thread has finished reading them (its epilogue) before they are overwritten.
      ptx::cp_async_wait_all();
      ptx::named_barrier(1, kCThreads);
      ws_preload_epilogue<D, HasBias, Rope, TileM, TileN, kCThreads>(p, t, n_tiles, N, ctid, s_pre_bias2, s_pre_pos,
                                                                     s_pre_turns, g0 == 0);
    }

    float acc[kAtoms][TileM / 2];  // [m64 atom][wgmma C fragment: 64 features x TileM tokens over 128 threads]
#pragma unroll
    for (int a = 0; a < kAtoms; ++a)
#pragma unroll
      for (int i = 0; i < TileM / 2; ++i) acc[a][i] = 0.f;
    ws_mainloop<DT, F, TileM, TileN, Consumers, Stages, KGroups>(acc, p, smem, sX, sW, ring, tab, s_lut, g0, k0, nks,
                                                                 n0, N, row_lo0, q, lane, kgrp, fwg);
    KT_WS_TRACE(2);

    // ---- K groups (KGroups > 1, split_k >= 1): group 1 hands its partial sums to group 0 and exits ----
    if constexpr (KGroups > 1) {
      static_assert(KGroups == 2 && !StreamK, "wgmma_ws: K groups are 1 or 2, with split_k >= 1");
      if (!ws_exchange_k_groups<kAtoms, TileM, kCThreads, kAllC>(acc, smem, kgrp, ctid)) return;
    }

    // ---- split-K over a cluster: each rank reduces and finishes its own token rows ----
    int e_lo = 0, e_rows = TileM;  // token rows [e_lo, e_lo + e_rows) of the tile this block finishes
    if (split)
      ws_cluster_reduce<kAtoms, TileM, ClusterK, kCThreads, ws_cluster_rows(C) / 8, ws_cluster_slot_bytes(C),
                        ws_cluster_slot_offset(C, F), ws_cluster_slots_beside(C, F)>(acc, p, m0, base, smem, s_red_bar,
                                                                                     ctid, e_lo, e_rows);

    // ---- stream-K: a tile shared with other blocks: partials through the workspace, its owner reduces ----
    if (StreamK && nks != nk) {
      const WsStreamK sk{nk, dp_units, units, G};
      const WsTileBlocks blocks = ws_tile_blocks(sk, t);
      if (blk != blocks.first) {
        ws_stream_k_publish<kAtoms, TileM, TileN, kCThreads>(acc, p, sk, t, blk, ctid);
        KT_WS_TRACE(3);
        continue;
      }
      ws_stream_k_fixup<kAtoms, TileM, TileN, kCThreads>(acc, p, sk, t, blocks, ctid);
      KT_WS_TRACE(4);
    }

    // ---- the epilogue: accumulators -> shared fp32 tile -> finish_tile ----
    ws_epilogue<DT, F, D, HasBias, Rope, KvCache, TileM, TileN, kAtoms, kCThreads, ws_epilogue_rows(C, F), kWide>(
        acc, p, sC, n0, m0, N, row_lo0, q, split, e_lo, e_rows, s_pre_bias2, s_pre_pos, s_pre_turns);
    if (!StreamK) break;  // split-K: one segment per block, so nothing of the loop lives across its mainloop
  }
#ifdef KT_WS_TRACE_ON
  KT_WS_TRACE(5);
  unsigned smid_;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid_));
  KT_WS_TRACE_VAL(6, smid_);
  KT_WS_TRACE_VAL(7, g_next);
#endif
#endif
}

template <DType DT, quant::Format F, int D, bool HasBias, bool Rope, bool KvCache, int TileM, int TileN, int Consumers,
          int Stages, bool StreamK, int KGroups = 1>
__global__ void __launch_bounds__(128 * (Consumers * KGroups + 1), 1)
    qkv_wgmma_ws(const __grid_constant__ WsParams wp) {
  ws_body<DT, F, D, HasBias, Rope, KvCache, TileM, TileN, Consumers, Stages, StreamK, 1, KGroups>(wp);
}

/// split_k = ClusterK > 1: grid.x = tiles x ClusterK (WsSplit::split_k) or whole + (tiles - whole) x ClusterK
/// (split_k_tail: whole tiles first), cluster dims (ClusterK, 1, 1) fixed at compile time, so a plain launch forms the
/// clusters (the ClusterK K slices of one tile, or ClusterK whole tiles that do not interact).
template <DType DT, quant::Format F, int D, bool HasBias, bool Rope, bool KvCache, int TileM, int TileN, int Consumers,
          int Stages, int ClusterK, int KGroups = 1>
__global__ void __cluster_dims__(ClusterK, 1, 1) __launch_bounds__(128 * (Consumers * KGroups + 1), 1)
    qkv_wgmma_ws_cluster(const __grid_constant__ WsParams wp) {
  ws_body<DT, F, D, HasBias, Rope, KvCache, TileM, TileN, Consumers, Stages, false, ClusterK, KGroups>(wp);
}

}  // namespace qkv
}  // namespace kt
