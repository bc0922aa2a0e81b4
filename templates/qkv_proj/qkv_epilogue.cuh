// The qkv kernels' epilogue pieces: RoPE angles (Su et al., RoFormer, 2021; Llama/Qwen rotate-half pairing
// (i, i + D/2), angle = pos * theta^(-2i/D) reduced mod 2 pi in fixed point), the deterministic float4 partial sums
// every reduction uses, the split-K reduction through the workspace (splitk_reduce), store_head (where a head's output
// goes: Q/K/V and, with a slot mapping, the paged KV cache; every mainloop's epilogue stores through it), and
// finish_tile: bias, RoPE and the split into Q/K/V from a shared fp32 output tile. Compiled by NVRTC only. No standard
// headers.
#pragma once
#include "common/ptx.cuh"
#include "qkv_proj/qkv_proj_config.h"

namespace kt {
namespace qkv {

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
__device__ __forceinline__ void add_f4(float* d, const float4& v) {
  d[0] += v.x, d[1] += v.y, d[2] += v.z, d[3] += v.w;
}
__device__ __forceinline__ void add_f4(float4& s, const float4& v) { s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w; }

/// Split-K reduction of one output tile through the workspace (gridDim.z blocks share the tile, blockIdx.z = the K
/// slice): the block writes its partial tile sC [TileM, TileN + 4] (fp32, shared; valid token rows only) to the
/// workspace [tile][slice][TileM][TileN], fences, and counts itself on the tile's counter; the last block to arrive
/// (threadfence reduction) adds the partials in slice order (deterministic) into sC, resets the counter for the next
/// launch and returns true; the others return false and must leave. sync: the block's barrier (all kThreads threads
/// call this); s_last: a shared flag.
template <int TileM, int TileN, int kThreads, class Sync>
__device__ __forceinline__ bool splitk_reduce(const QkvParams& p, float* sC, int rows, Sync sync, int& s_last) {
  constexpr int kLd = TileN + 4;
  const int tid = threadIdx.x;
  const int SplitK = gridDim.z;
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
  if (!s_last) return false;
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
  return true;
}

/// Element 0 of K (is_v false) or V head `kv_head` in slot `slot` (= page * page_size + offset, >= 0; the caller's
/// slot_mapping, trusted: QkvParams) of the paged cache k_cache / v_cache [num_pages, page_size, Hkv, D].
__device__ __forceinline__ unsigned short* kv_cache_head(const QkvParams& p, bool is_v, int kv_head, int slot) {
  const int page = slot / p.page_size, offset = slot - page * p.page_size;
  void* base = is_v ? p.v_cache : p.k_cache;
  const long long sp = is_v ? p.v_cache_page_stride : p.k_cache_page_stride;
  const long long ss = is_v ? p.v_cache_slot_stride : p.k_cache_slot_stride;
  const long long sh = is_v ? p.v_cache_head_stride : p.k_cache_head_stride;
  return static_cast<unsigned short*>(base) + page * sp + offset * ss + kv_head * sh;
}

/// Where every qkv epilogue stores a piece of token m's output head: put(h) writes the piece at its columns of the
/// head whose element 0 is h. out: Q, K or V (p.q / p.k / p.v, row stride ld), head: the head's index in it (is_q /
/// is_v: which one). Without KvCache (the plain kernel class) that is out's row m, head `head`, and nothing else is
/// compiled in; with it, the plain output when out is non-null (K and V may be null: QkvParams) and, for a K or V
/// head, the paged cache's slot slot_mapping[m] unless it is -1.
template <int D, bool KvCache, class Put>
__device__ __forceinline__ void store_head(const QkvParams& p, unsigned short* out, long long ld, int head, bool is_q,
                                           bool is_v, int m, Put put) {
  if constexpr (!KvCache) {
    put(out + (long long)m * ld + (long long)head * D);
  } else {
    if (out != nullptr) put(out + (long long)m * ld + (long long)head * D);
    if (is_q) return;
    const int slot = __ldg(p.slot_mapping + m);
    if (slot >= 0) put(kv_cache_head(p, is_v, head, slot));
  }
}

#ifndef KT_EPI_TRACE  // timeline experiments only (a standalone timeline driver defines KT_EPI_TRACE): points 10-12 of finish_tile
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
///    (i, i + D/2), angle = pos * theta^(-2i/D), reduced mod 2 pi in fixed point: rope_sincos), split into Q/K/V,
///    and K / V into the paged cache with a slot mapping (store_head).
/// Must be called by every thread of the block (it has barriers), or with kBarrierId > 0 by threads 0 .. kThreads - 1
/// only (named barrier kBarrierId: the block's other warps have left). kMaxBatch: token rows per thread whose position
/// loads are issued together before their arithmetic (more registers, fewer dependent round trips).
/// kPre (no split-K through the workspace): the caller has loaded the epilogue's inputs into shared memory before its
/// mainloop -- pre_bias2 = bias pairs of columns n0 .. n0 + TileN - 1 (0 past N or without bias), pre_pos = positions
/// of tokens m0 .. m0 + TileM - 1, pre_turns = rope_turns(i) for i < D/2 (Rope) -- and made them visible with
/// the barrier after it wrote sC, so the epilogue has no global loads and no table to build.
/// row_limit (<= TileM): only token rows r < row_limit of sC are finished (a cluster rank's share of a tile).
template <DType DT, int D, bool HasBias, bool Rope, bool KvCache, int TileM, int TileN, int kThreads,
          int kBarrierId = 0, int kMaxBatch = 1, bool kPre = false>
__device__ __forceinline__ void finish_tile(const QkvParams& p, float* sC, int m0, int n0,
                                            const unsigned* pre_bias2 = nullptr, const int* pre_pos = nullptr,
                                            const unsigned long long* pre_turns = nullptr, int row_limit = TileM) {
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
    if (!splitk_reduce<TileM, TileN, kThreads>(p, sC, rows, sync, s_last)) return;
  }
  if (!kPre) {
    if (Rope) {
      for (int i = tid; i < D / 2; i += kThreads) s_turns[i] = rope_turns<D>(p, i);
    }
    sync();
  }
  KT_EPI_TRACE(10);

  // ---- epilogue: bias, RoPE (Q, K heads), split into Q/K/V ----
  // Item (token r, head part hh, chunk j) covers the 4 columns c1 = 4j .. 4j + 3 and the 4 columns c2 = c1 + kCols / 2
  // .. of the head (part): for a rotated head those are the RoPE pairs (i, i + D/2) of i = c1 .. c1 + 3, otherwise
  // just 8 columns. A chunk is one 16-byte shared load and one 8-byte store per half (eight lanes of a row read 128
  // contiguous bytes: no bank conflict). Items are numbered row-major and dealt out round robin, and kThreads is a
  // multiple of a row's items, so a thread keeps its (hh, j) in every row: its columns' output address, bias and RoPE
  // frequencies are set up once, and each row adds only the token's position, the arithmetic and the stores (rows
  // kRowStep apart: the address advances by a constant). The rows' position loads are issued kBatch at a time before
  // their arithmetic, so their latencies overlap.
  constexpr int kHeadsPerTile = TileN >= D ? TileN / D : 1;
  constexpr int kCols = TileN >= D ? D : TileN;       // columns of one head inside the tile
  constexpr int kChunks = kCols / 8;                  // chunks of one head part
  constexpr int kRowItems = kHeadsPerTile * kChunks;  // items of one token row
  static_assert(kThreads % kRowItems == 0, "finish_tile: the block's threads must cover whole token rows");
  constexpr int kRowStep = kThreads / kRowItems;  // token rows per round
  constexpr int kIters = (TileM + kRowStep - 1) / kRowStep;
  // kMaxBatch is the caller's: 1 (the default) in the mma.sync / wgmma kernels, where more rows in flight made a
  // register-capped variant spill; up to 8 in the warp-specialized kernel where its accumulators leave room.
  constexpr int kBatch = kIters < kMaxBatch ? kIters : kMaxBatch;
  const int ri = tid % kRowItems, r0 = tid / kRowItems;
  const int hh = ri / kChunks, c1 = 4 * (ri % kChunks), c2 = c1 + kCols / 2, lc = hh * kCols;
  const int col0 = n0 + lc;   // first column of this head (part) in Y
  const int head = col0 / D;  // global head index in [Q | K | V]
  const bool is_q = head < p.num_heads, is_k = !is_q && head < p.num_heads + p.num_kv_heads;
  const bool rotate = Rope && (is_q || is_k);
  unsigned short* out;
  long long ld;  // row stride (elements)
  int lhead;     // the head's index in Q, K or V; the head part's first column in it: col0 % D
  if (is_q) {
    out = static_cast<unsigned short*>(p.q), ld = p.q_row_stride, lhead = head;
  } else if (is_k) {
    out = static_cast<unsigned short*>(p.k), ld = p.k_row_stride, lhead = head - p.num_heads;
  } else {
    out = static_cast<unsigned short*>(p.v), ld = p.v_row_stride, lhead = head - p.num_heads - p.num_kv_heads;
  }
  const int hc = col0 % D;
  // Token rows r < rlim are finished; none where the head part lies past N (a tile's head parts are whole: kCols
  // divides D, N is a multiple of D).
  const int rlim = col0 >= N ? 0 : min(row_limit, p.m - m0);
  float bias1[4] = {0.f, 0.f, 0.f, 0.f}, bias2[4] = {0.f, 0.f, 0.f, 0.f};  // columns c1 + e, c2 + e
  if (HasBias && rlim > 0) {
    const unsigned* b = static_cast<const unsigned*>(p.bias);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const unsigned w1 = kPre ? pre_bias2[(lc + c1) / 2 + e] : __ldg(b + (col0 + c1) / 2 + e);
      const unsigned w2 = kPre ? pre_bias2[(lc + c2) / 2 + e] : __ldg(b + (col0 + c2) / 2 + e);
      bias1[2 * e] = ptx::to_float<DT>((unsigned short)(w1 & 0xffffu));
      bias1[2 * e + 1] = ptx::to_float<DT>((unsigned short)(w1 >> 16));
      bias2[2 * e] = ptx::to_float<DT>((unsigned short)(w2 & 0xffffu));
      bias2[2 * e + 1] = ptx::to_float<DT>((unsigned short)(w2 >> 16));
    }
  }
  unsigned long long tp[4] = {0ull, 0ull, 0ull, 0ull};  // RoPE turns per position of pairs c1 .. c1 + 3
  if (rotate) {
#pragma unroll
    for (int e = 0; e < 4; ++e) tp[e] = turns[c1 + e];
  }
  // Row r0's output (the plain kernel class; with KvCache store_head finds each row's places).
  unsigned short* o_row = KvCache ? nullptr : out + (long long)(m0 + r0) * ld + (long long)lhead * D + hc;
  const long long o_step = (long long)kRowStep * ld;
  for (int i0 = 0; i0 < kIters; i0 += kBatch) {
    int pos[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int r = r0 + (i0 + u) * kRowStep;
      pos[u] = 0;
      if (rotate && i0 + u < kIters && r < rlim) pos[u] = kPre ? pre_pos[r] : __ldg(p.positions + m0 + r);
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int r = r0 + (i0 + u) * kRowStep;
      if (i0 + u >= kIters || r >= rlim) continue;
      const float4 a = *reinterpret_cast<const float4*>(sC + r * kLd + lc + c1);
      const float4 b = *reinterpret_cast<const float4*>(sC + r * kLd + lc + c2);
      float y1[4] = {a.x + bias1[0], a.y + bias1[1], a.z + bias1[2], a.w + bias1[3]};
      float y2[4] = {b.x + bias2[0], b.y + bias2[1], b.z + bias2[2], b.w + bias2[3]};
      if (rotate) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float sn, cs;
          rope_sincos(pos[u], tp[e], sn, cs);
          const float o1 = y1[e] * cs - y2[e] * sn, o2 = y2[e] * cs + y1[e] * sn;
          y1[e] = o1;
          y2[e] = o2;
        }
      }
      const uint2 w1 = make_uint2(ptx::pack2<DT>(y1[0], y1[1]), ptx::pack2<DT>(y1[2], y1[3]));
      const uint2 w2 = make_uint2(ptx::pack2<DT>(y2[0], y2[1]), ptx::pack2<DT>(y2[2], y2[3]));
      if constexpr (!KvCache) {
        unsigned short* o = o_row + u * o_step;
        *reinterpret_cast<uint2*>(o + c1) = w1;
        *reinterpret_cast<uint2*>(o + c2) = w2;
      } else {
        store_head<D, KvCache>(p, out, ld, lhead, is_q, !is_q && !is_k, m0 + r, [&](unsigned short* h) {
          *reinterpret_cast<uint2*>(h + hc + c1) = w1;
          *reinterpret_cast<uint2*>(h + hc + c2) = w2;
        });
      }
    }
    if (!KvCache) o_row += kBatch * o_step;
    if (i0 == 0) KT_EPI_TRACE(11);
  }
  KT_EPI_TRACE(12);
}

}  // namespace qkv
}  // namespace kt
