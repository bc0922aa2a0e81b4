// The gemv kernel after its mainloop (qkv_gemv.cuh): the K reductions, reduce none (the K slices of a block's warps
// meet in shared memory), cluster (the blocks of a thread-block cluster meet in rank 0's shared memory) and
// balanced_tail (a tail unit's K pieces meet in the global workspace), each deterministic (partials added in a fixed
// order); then the register epilogue (row scale, bias, RoPE, the split into Q / K / V) and its inputs, loaded before
// the mainloop. Accumulators acc are the C fragments of the warp's m16 feature tiles x n8 token tiles: [R][NT][4],
// e = 2 h + i -> feature row g + 8 h (g = lane / 4; h = 1 is the RoPE partner), token 2 q + i (q = lane % 4).
// Compiled by NVRTC only.
#pragma once
#include "qkv_proj/qkv_epilogue.cuh"
#include "qkv_proj/qkv_gemv_decode.cuh"
#include "qkv_proj/qkv_gemv_trace.cuh"

namespace kt {
namespace qkv {

/// The cross-warp K reduction's exchange: warp rows wk > 0 store their sums into part ([wk - 1][WarpsN][R][NT][32
/// lanes] float4, the C fragment layout, one float4 per lane: conflict-free), then one block barrier.
template <int WarpsN, int R, int NT>
__device__ __forceinline__ void gemv_store_k_partial(const float (&acc)[R][NT][4], float4* part, int wk, int wn,
                                                     int lane) {
  auto slot = [&](int k, int r, int t) { return (((k - 1) * WarpsN + wn) * R * NT + r * NT + t) * 32 + lane; };
  if (wk > 0) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < NT; ++t)
        part[slot(wk, r, t)] = make_float4(acc[r][t][0], acc[r][t][1], acc[r][t][2], acc[r][t][3]);
  }
  __syncthreads();
}

#if __CUDA_ARCH__ >= 900
/// The cluster reduction's exchange (Cluster > 1): ranks 1.. store their block sums (warp row 0) into rank 0's shared
/// memory cpart ([rank - 1][WarpsN][R][NT][32 lanes] float4), then one cluster barrier.
template <int WarpsN, int R, int NT>
__device__ __forceinline__ void gemv_cluster_store(const float (&acc)[R][NT][4], float4* cpart, int rank, int wk,
                                                   int wn, int lane) {
  auto slot = [&](int k, int r, int t) { return (((k - 1) * WarpsN + wn) * R * NT + r * NT + t) * 32 + lane; };
  ptx::cluster_wait();  // every block of the cluster has started (arrival at entry)
  if (rank > 0 && wk == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < NT; ++t)
        ptx::st_cluster_f4(ptx::cluster_map(ptx::smem_u32(&cpart[slot(rank, r, t)]), 0u),
                           make_float4(acc[r][t][0], acc[r][t][1], acc[r][t][2], acc[r][t][3]));
  }
  ptx::cluster_arrive_release();
  ptx::cluster_wait();
}
#endif

/// Adds partials 1..n-1 of a region of float4 partials ([k - 1][WarpsN][R][NT][32 lanes], as gemv_store_k_partial and
/// gemv_cluster_store write them) into acc, in order (deterministic).
template <int WarpsN, int R, int NT>
__device__ __forceinline__ void gemv_add_partials(float (&acc)[R][NT][4], const float4* region, int n, int wn,
                                                  int lane) {
  auto slot = [&](int k, int r, int t) { return (((k - 1) * WarpsN + wn) * R * NT + r * NT + t) * 32 + lane; };
#pragma unroll 1
  for (int k = 1; k < n; ++k)
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const float4 v = region[slot(k, r, t)];
        acc[r][t][0] += v.x;
        acc[r][t][1] += v.y;
        acc[r][t][2] += v.z;
        acc[r][t][3] += v.w;
      }
}

/// Balanced tail (reduce balanced_tail), block cta of the 1-D grid being piece (cta - gemv_full) % gemv_split of tail
/// unit (cta - gemv_full) / gemv_split: the block sums of a unit's pieces meet in the workspace. Each warp column is
/// independent: it stores its fragments ([tail unit][piece][warp column][R][NT][32 lanes] float4, L2 only), fences, and
/// counts itself in on its counter (tail unit, warp column); the last of the pieces to arrive adds all of them in
/// piece order (deterministic: the same sum whichever arrives last) into acc, resets the counter for the next launch
/// and returns true (it runs the epilogue); the others return false (threadfence reduction, as the split-K path in
/// qkv_epilogue.cuh). warp: for the trace points only.
template <int WarpsK, int WarpsN, int R, int NT>
__device__ __forceinline__ bool gemv_balanced_tail_reduce(const QkvParams& p, float (&acc)[R][NT][4], unsigned cta,
                                                          int wn, int warp, int lane) {
  (void)warp;
  const int piece = (int(cta) - p.gemv_full) % p.gemv_split, pieces = p.gemv_split;
  const int tail = (int(cta) - p.gemv_full) / p.gemv_split;
  constexpr int kFrag = R * NT * 32;  // float4s per (piece, warp column)
  float4* ws = reinterpret_cast<float4*>(p.workspace) + (long long)tail * pieces * WarpsN * kFrag;
  auto at = [&](int pc, int r, int t) { return ws + ((long long)pc * WarpsN + wn) * kFrag + (r * NT + t) * 32 + lane; };
  KT_GEMV_TRACE(11);
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t)
      __stcg(at(piece, r, t), make_float4(acc[r][t][0], acc[r][t][1], acc[r][t][2], acc[r][t][3]));
  __threadfence();
  __syncwarp();
  KT_GEMV_TRACE(8);
  unsigned* counter = p.counters + tail * WarpsN + wn;
  unsigned last = 0;
  if (lane == 0) last = atomicAdd(counter, 1u) == unsigned(pieces - 1) ? 1u : 0u;
  last = __shfl_sync(0xffffffffu, last, 0);
  KT_GEMV_TRACE(9);
  if (last == 0u) return false;
  // The other pieces' stores, counted before this warp's arrival, are visible: lane 0 observed the count, the warp
  // barrier orders that before every lane's fence (a shuffle carries the value but orders no memory), the fence
  // before the loads (CUDA programming guide, __syncwarp: memory ordering among the participating threads).
  __syncwarp();
  __threadfence();
  float own[R][NT][4];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        own[r][t][e] = acc[r][t][e];
        acc[r][t][e] = 0.f;
      }
  // kBatch pieces' loads in flight at once (one dependent L2 round trip per batch, not per piece).
  constexpr int kBatch = R * NT >= 8 ? 1 : 8 / (R * NT);
#pragma unroll 1
  for (int pc0 = 0; pc0 < pieces; pc0 += kBatch) {
    float4 v[kBatch][R][NT];
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          const int pc = pc0 + b;
          v[b][r][t] = pc == piece   ? make_float4(own[r][t][0], own[r][t][1], own[r][t][2], own[r][t][3])
                       : pc < pieces ? __ldcg(at(pc, r, t))
                                     : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          acc[r][t][0] += v[b][r][t].x;
          acc[r][t][1] += v[b][r][t].y;
          acc[r][t][2] += v[b][r][t].z;
          acc[r][t][3] += v[b][r][t].w;
        }
  }
  if (lane == 0) *counter = 0u;  // ready for the next launch
  KT_GEMV_TRACE(10);
  return true;
}

/// The block's reduction after the mainloop: adds the two chunk-parity accumulator sets into acc2[0], then reduces
/// across the block's K slices, balanced-tail pieces and cluster ranks as the variant has them (reduce none /
/// balanced_tail / cluster). Returns true for the warps that run the epilogue on the finished sums in acc2[0].
/// part: the block's float4 partial region (dynamic shared memory, gemv_partial_bytes).
template <int WarpsK, int WarpsN, int R, int NT, int Cluster, bool Balance>
__device__ __forceinline__ bool gemv_reduce(const QkvParams& p, float (&acc2)[2][R][NT][4], float4* part, int rank,
                                            int wk, int wn, int warp, int lane) {
  float(&acc)[R][NT][4] = acc2[0];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[r][t][e] += acc2[1][r][t][e];

  // ---- reduce none: the K slices meet in shared memory (gemv_store_k_partial); warp row 0 adds them ----
  if (WarpsK > 1) {
    gemv_store_k_partial<WarpsN, R, NT>(acc, part, wk, wn, lane);
    if (Cluster == 1 && wk > 0) return false;
    if (wk == 0) gemv_add_partials<WarpsN, R, NT>(acc, part, WarpsK, wn, lane);
  }
  // ---- reduce balanced_tail, a tail piece: the block sums meet in the workspace; the last piece to arrive goes on ----
  // (This block's piece is read again from %ctaid.x and the parameters, not kept live across the mainloop: that cost
  // stages-0 table-format variants 8-24 bytes of spills.)
  unsigned cta = 0;
  if (Balance) asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(cta));
  if (Balance && p.gemv_split > 1 && int(cta) >= p.gemv_full) {
    if (!gemv_balanced_tail_reduce<WarpsK, WarpsN, R, NT>(p, acc, cta, wn, warp, lane)) return false;
  }
#if __CUDA_ARCH__ >= 900
  // ---- reduce cluster: ranks 1.. store their block sums into rank 0's shared memory (the region after the K-slice
  //      partials), one cluster barrier, rank 0 adds them in rank order (deterministic) and runs the epilogue ----
  if (Cluster > 1) {
    float4* cpart = part + (WarpsK - 1) * WarpsN * R * NT * 32;
    gemv_cluster_store<WarpsN, R, NT>(acc, cpart, rank, wk, wn, lane);
    if (rank > 0 || wk > 0) return false;
    gemv_add_partials<WarpsN, R, NT>(acc, cpart, Cluster, wn, lane);
  }
#endif
  return true;
}

/// The epilogue's inputs of a warp's rows and tokens, loaded before the mainloop (while the weight is in flight) by
/// the warps that finish the tile (finisher: K slice 0 of rank 0): bias_v (the dtype's bits of rows g, g + 8 of m16
/// tile r, converted in the epilogue: no wait on the load before the mainloop), int8's row scales row_scale
/// (kScaleRow), the RoPE angle steps turns (rope_turns of pair r) and token positions pos (token m0 + 8 t + 2 q + i);
/// small tiles (RopeEarly) also their rotations rope_c / rope_s (cos, sin) of (r, t, i). Rows: head D + pair (+ D / 2)
/// of the m16 tiles with tile_in. The caller zero-fills all but rope_c / rope_s.
template <quant::Format F, int D, bool HasBias, bool Rope, bool RopeEarly, int R, int NT, int RR, int RT>
__device__ __forceinline__ void gemv_epilogue_inputs(const QkvParams& p, unsigned short (&bias_v)[R][2],
                                                     float (&row_scale)[R][2], unsigned long long (&turns)[R],
                                                     int (&pos)[NT][2], float (&rope_c)[RR][RT][2],
                                                     float (&rope_s)[RR][RT][2], const bool (&tile_in)[R],
                                                     const int (&head)[R], const int (&pair)[R], int m0, int q,
                                                     bool finisher) {
  auto row_of = [&](int r, int h) { return head[r] * D + pair[r] + h * (D / 2); };
  if (finisher) {
    const unsigned short* bias = static_cast<const unsigned short*>(p.bias);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (HasBias && tile_in[r]) {
        bias_v[r][0] = bias[row_of(r, 0)];
        bias_v[r][1] = bias[row_of(r, 1)];
      }
      if (gemv_scale_mode(F) == kScaleRow && tile_in[r]) {
        row_scale[r][0] = __ldg(static_cast<const float*>(p.w_scales) + row_of(r, 0));
        row_scale[r][1] = __ldg(static_cast<const float*>(p.w_scales) + row_of(r, 1));
      }
      if (Rope) turns[r] = rope_turns<D>(p, pair[r]);
    }
    if (Rope) {
#pragma unroll
      for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int m = m0 + 8 * t + 2 * q + i;
          pos[t][i] = m < p.m ? p.positions[m] : 0;
        }
    }
  }
  // RoPE rotation (cos, sin) of pair r, token (t, i): the angle reduced mod 2 pi in fixed point (rope_sincos).
  if (RopeEarly && finisher) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int i = 0; i < 2; ++i)
          rope_sincos(pos[t][i], turns[r], rope_s[RopeEarly ? r : 0][RopeEarly ? t : 0][i],
                      rope_c[RopeEarly ? r : 0][RopeEarly ? t : 0][i]);
  }
}

/// The epilogue in registers (its inputs: gemv_epilogue_inputs): C fragment e = 2 h + i -> feature row g + 8 h (pair partner h = 1), token 2 q + i;
/// int8's row scale, bias, RoPE on Q and K heads (rotate-half: rows g and g + 8 are the pair (i, i + D / 2)), written
/// to Q, K or V by head (pair[r]: the row's index in its head).
template <DType DT, quant::Format F, int D, bool Rope, bool KvCache, bool RopeEarly, int R, int NT, int RR, int RT>
__device__ __forceinline__ void gemv_epilogue(const QkvParams& p, const float (&acc)[R][NT][4],
                                              const unsigned short (&bias_v)[R][2], const float (&row_scale)[R][2],
                                              const unsigned long long (&turns)[R], const int (&pos)[NT][2],
                                              const float (&rope_c)[RR][RT][2], const float (&rope_s)[RR][RT][2],
                                              const bool (&tile_in)[R], const int (&head)[R], const int (&pair)[R],
                                              int m0, int q) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (!tile_in[r]) continue;
    const bool is_q = head[r] < p.num_heads, is_k = !is_q && head[r] < p.num_heads + p.num_kv_heads;
    const bool rotate = Rope && (is_q || is_k);
    unsigned short* out;
    long long stride;
    int local_head;
    if (is_q) {
      out = static_cast<unsigned short*>(p.q);
      stride = p.q_row_stride;
      local_head = head[r];
    } else if (is_k) {
      out = static_cast<unsigned short*>(p.k);
      stride = p.k_row_stride;
      local_head = head[r] - p.num_heads;
    } else {
      out = static_cast<unsigned short*>(p.v);
      stride = p.v_row_stride;
      local_head = head[r] - p.num_heads - p.num_kv_heads;
    }
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int m = m0 + 8 * t + 2 * q + i;
        if (m >= p.m) continue;
        float y1 = acc[r][t][i], y2 = acc[r][t][2 + i];
        if (gemv_scale_mode(F) == kScaleRow) {
          y1 *= row_scale[r][0];
          y2 *= row_scale[r][1];
        }
        y1 += ptx::to_float<DT>(bias_v[r][0]);  // 0 bits: +0
        y2 += ptx::to_float<DT>(bias_v[r][1]);
        if (rotate) {
          float sn, cs;
          if (RopeEarly) {
            cs = rope_c[RopeEarly ? r : 0][RopeEarly ? t : 0][i];
            sn = rope_s[RopeEarly ? r : 0][RopeEarly ? t : 0][i];
          } else {
            rope_sincos(pos[t][i], turns[r], sn, cs);
          }
          const float o1 = y1 * cs - y2 * sn, o2 = y2 * cs + y1 * sn;
          y1 = o1;
          y2 = o2;
        }
        const unsigned pr = ptx::pack2<DT>(y1, y2);
        store_head<D, KvCache>(p, out, stride, local_head, is_q, !is_q && !is_k, m, [&](unsigned short* h) {
          h[pair[r]] = (unsigned short)(pr & 0xffffu);
          h[pair[r] + D / 2] = (unsigned short)(pr >> 16);
        });
      }
  }
}

}  // namespace qkv
}  // namespace kt
