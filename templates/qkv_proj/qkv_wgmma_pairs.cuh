// Fused Q/K/V projection, warp-specialized Hopper mainloop with RoPE-paired feature tiles ("wgmma_pairs",
// Config::mainloop = Mainloop::wgmma_pairs; sm_90a; 16-bit weights only).
//
//   Y[m, n] = sum_k X[m, k] W[n, k] with the tokens as wgmma's A operand (64 per consumer warpgroup, tile_m = 64 x
//   consumers) and the features as its N (tile_n 40 .. 128). RoPE rotates pair (i, i + D/2) of a head (rotate-half;
//   Su et al., RoFormer, 2021; the Llama / Qwen pairing), so a tile must hold both rows of each of its pairs. A tile is
//   PB pairs (i0 .. i0 + PB - 1, PB = wp_box_pairs: 16 if tile_n % 32 == 0, else 8 if tile_n % 16 == 0, else 4) of
//   each of HN = tile_n / (2 PB) consecutive heads (h0 .. h0 + HN - 1, counted over [Q | K | V]): tile_n is free of
//   head_dim, so the grid -- (D/2 / PB) pair chunks x ceil(heads / HN) head groups, x token tiles -- can fill the GPU
//   without split-K (Qwen2.5-7B at M = 256: 48 x 2 blocks of 96 features, or 64 x 2 of 80; the swap-AB kernels need
//   whole heads of 128 features per tile: 36 x 2).
//
//   Weight tile: ONE TMA copy per K step of a 5-D tensor map over the weight {64, D/2 pairs, 2 halves, heads, K / 64}
//   with box {64, PB, 2, HN, 1} at (0, i0, 0, h0, step) (runtime/qkv.cpp encode_pair_rows; the K slices as the outer
//   dimension, so the host's strides alone say whether the weight is row-major [N][K] or K-blocked [K / 64][N][64]
//   and one binary reads both): rows [head][half][PB] of 128 bytes (64 elements along K),
//   128-byte swizzled -- the K-major B operand of wgmma (wgmma.cuh), whose 8-column chunk c is (head c / (2 PB / 8),
//   half, 8 pairs) of the tile. Every extra TMA copy per step holds the SM's copy engine for tens of cycles,
//   which is why the tile is one box; heads past the last are zero-filled by the TMA and never stored.
//
//   Grid: (feature tiles, token tiles rounded up to a multiple of cluster_m), launched in thread-block clusters of
//   1 x cluster_m (runtime/qkv.cpp): the blocks of a feature tile's cluster_m token tiles read the same weight boxes,
//   and as one cluster they run on one GPC, start together and keep pace. Launched without clusters, the blocks of
//   the lowest block indices start their first step late and end last, whatever their tile. The kernel itself uses no
//   cluster feature.
//
//   Block: consumer warpgroups 0 .. tile_m / 64 - 1, then one producer warp. Its lane 0 fills a `stages`-deep ring
//   (full / empty mbarriers, expect_tx) with each 64-wide K step: X [tile_m][64] (2-D tensor map, rows past M read as
//   zeros) and the weight box. Each consumer warpgroup issues 4 wgmma.mma_async m64n{tile_n}k16 per step with both
//   operands in shared memory, keeps one step in flight (wait_group 1), and each of its warps releases the step's
//   slot once the wgmma that read it retired. The epilogue inputs (bias of the tile's columns, positions of its
//   tokens, the RoPE turns per pair) are copied by cp.async before the block-wide barrier; the consumers wait for them
//   while the ring's first step is in flight and compute their RoPE angles then.
//
//   Epilogue, in registers (accumulator layout: thread (warp w, lane l) holds rows 16 w + l / 4 (+ 8), columns
//   8 c + 2 (l % 4) + e): + bias, then RoPE on Q and K pairs -- with PB >= 8 a thread holds both halves of its pairs
//   (chunks of the two halves of a box), with PB = 4 lanes l and l ^ 2 hold the two halves and exchange them by
//   shuffle; every box is a head at the same pairs, so a thread's sin / cos are computed once, not per box --,
//   rounded to the activation dtype into the warp's staging tile [16 rows][2 halves][pairs] in shared memory (over
//   the ring, which is free by then: the ring can be as deep as shared memory allows), then
//   written to Q / K / V in pieces of min(PB, 8) pairs (16 or 8 bytes, contiguous in the output) from neighbouring
//   lanes, so a PB = 16 tile writes whole 32-byte sectors. Smaller pieces cost L2 write throughput. With a slot
//   mapping (QkvParams::slot_mapping; the KvCache kernel class only) the K and V chunks also go, whole, to their tokens' slots of the paged cache
//   (store_head's rule, qkv_epilogue.cuh). The RoPE angle: rope_sincos (qkv_proj.cuh), the same fixed-point reduction
//   as every qkv kernel.
//
// Sources: PTX ISA 8.x (wgmma.mma_async, matrix descriptors, mbarrier, cp.async.bulk.tensor); CUDA Driver API
// cuTensorMapEncodeTiled (the maps are encoded in qkv::launch, runtime/qkv.cpp).
#pragma once
#include "common/tma_ring.cuh"
#include "common/wgmma.cuh"
#include "qkv_proj/qkv_proj.cuh"

// Timeline experiments only (never defined by the generator; a standalone timeline driver defines it): KT_WP_TRACE(i) records
// %globaltimer at point i of the block into kt_wp_trace[block * 16 + i] (thread 0 of the calling group).
#ifdef KT_WP_TRACE_ON
#define KT_WP_TRACE(i, cond)                                                      \
  do {                                                                            \
    unsigned long long t_;                                                        \
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                        \
    if (cond) kt_wp_trace[(blockIdx.y * gridDim.x + blockIdx.x) * 16 + (i)] = t_; \
  } while (0)
#else
#define KT_WP_TRACE(i, cond) \
  do {                       \
  } while (0)
#endif

namespace kt {
namespace qkv {

/// Head `head` (counted over [Q | K | V]) in Q, K or V (16-bit elements): its D outputs of token 0 (KvCache: null
/// when that output is null, as K and V may be), and in `row_stride` the elements between tokens.
template <int D, bool KvCache>
__device__ __forceinline__ unsigned short* wp_head_out(const QkvParams& p, int head, long long& row_stride) {
  void* base = p.v;
  row_stride = p.v_row_stride;
  if (head < p.num_heads) {
    base = p.q, row_stride = p.q_row_stride;
  } else if ((head -= p.num_heads) < p.num_kv_heads) {
    base = p.k, row_stride = p.k_row_stride;
  } else {
    head -= p.num_kv_heads;
  }
  if (KvCache && base == nullptr) return nullptr;
  return static_cast<unsigned short*>(base) + (long long)head * D;
}

/// The kernel body (one block per output tile; the header comment describes it).
template <DType DT, quant::Format F, int D, bool HasBias, bool Rope, bool KvCache, int TileM, int TileN, int Stages>
__device__ __forceinline__ void wp_body(const WsParams& wp) {
  constexpr Config C = make_config(TileM, TileN, PairsConfig{Stages, 1});  // cluster_m: a launch attribute
#ifdef __CUDA_ARCH__  // device pass (NVRTC compiles only that; nvcc also parses for the host)
  static_assert(invalid_reason(DT, F, D, Rope, C, ArchId{__CUDA_ARCH__ / 10, KT_ARCH_SPECIFIC}) == nullptr,
                "invalid qkv_wgmma_pairs variant: see invalid_reason() in qkv_proj_config.h");
#endif
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const QkvParams& p = wp.p;
  // A token tile past M: the grid's token tiles are rounded up to whole clusters (PairsConfig::cluster_m, a launch
  // attribute; nothing here waits on the cluster).
  if (int(blockIdx.y) * TileM >= p.m) return;
  constexpr int kCT = TileM * 2;  // consumer threads (one warpgroup per 64 tokens); the producer warp follows
  constexpr int P = wp_pairs(C), PB = wp_box_pairs(C), kBoxes = wp_box_heads(C), kHalf = D / 2;
  constexpr unsigned kXB = TileM * 128, kWB = TileN * 128;
  constexpr int kStRow = wp_stage_row_bytes(C);
  // Preconditions (with invalid_reason above)
  static_assert(kHalf % PB == 0 && P == PB * kBoxes, "wgmma_pairs: the tile is PB pairs of each of kBoxes heads");
  static_assert(TileM % 64 == 0, "wgmma_pairs: one consumer warpgroup per 64 tokens");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ __align__(8) unsigned long long s_bar[2 * Stages];  // the ring's full and empty mbarriers
  __shared__ __align__(16) unsigned short s_bias[TileN];         // [half][pair of the tile], the dtype's bits
  __shared__ int s_pos[Rope ? TileM : 1];
  __shared__ unsigned long long s_turns[Rope ? kHalf : 1];
  __shared__ unsigned short* s_out[kBoxes];   // box b's head in Q / K / V at token 0 (null past the last head)
  __shared__ long long s_out_stride[kBoxes];  // ... and its row stride (elements)
  // 1024-byte aligned base for the swizzled tiles (the launch requests wp_smem_bytes, which includes the slack).
  const unsigned raw = ptx::smem_u32(smem_raw);
  const unsigned base = (raw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (base - raw);
  const unsigned sX = base, sW = base + Stages * kXB;  // Stages x [TileM][64], Stages x [TileN][64]
  unsigned char* stage_tile = smem;  // [TileM][kStRow], 16 rows per consumer warp, over the ring (wp_smem_bytes)
  const pipe::TmaRing<Stages> ring(s_bar);

  const int tid = threadIdx.x;
  KT_WP_TRACE(0, tid == 0);
  // The sizes the epilogue needs, in registers, and each box's output base and row stride in shared memory (below):
  // read through `p` in the store loop, they were loaded again from the parameter space in every iteration (the
  // compiler cannot tell the stores from the parameters).
  const int heads = p.num_heads + 2 * p.num_kv_heads, qk_heads = p.num_heads + p.num_kv_heads, m_end = p.m;
  // The tile: pairs [i0, i0 + PB) of heads [h0, h0 + kBoxes) (box b = head h0 + b); heads past the last are
  // zero-filled by the TMA and never stored.
  const int i0 = int(blockIdx.x % unsigned(kHalf / PB)) * PB, h0 = int(blockIdx.x / unsigned(kHalf / PB)) * kBoxes;
  const int m0 = blockIdx.y * TileM;
  const int nk = p.k_dim / 64;
  // The weight's L2 policy: evict_first or none (QkvParams::w_evict_first, qkv::weight_evict_first).
  const ptx::L2Hint wl2 = ptx::l2_evict_first_if(p.w_evict_first != 0);
  auto issue = [&](int j) {  // K step j into slot j % Stages: X [TileM][64] and the weight tile, one TMA copy each
    const unsigned slot = unsigned(ring.slot(j));
    const unsigned bar = ring.arm(int(slot), kXB + kWB);  // (rows past M and heads past the last arrive as zeros)
    ptx::tma_load_2d(sX + slot * kXB, &wp.x_map, j * 64, m0, bar);
    ptx::tma_load_5d(sW + slot * kWB, &wp.w_map, 0, i0, 0, h0, j, bar, wl2);
  };
  const int n_first = nk < Stages ? nk : Stages;
  if (tid == kCT) {  // the producer sets up the barriers and fills the empty ring before the block-wide barrier
    ptx::prefetch_tensormap(&wp.x_map);
    ptx::prefetch_tensormap(&wp.w_map);
    ring.init(unsigned(kCT / 32));  // empty: one arrival per consumer warp
    ptx::mbarrier_init_fence();
    wgmma::fence_proxy_async();
    for (int j = 0; j < n_first; ++j) issue(j);
  }
  KT_WP_TRACE(5, tid == kCT);
  // Epilogue inputs, copied now (waited for while the ring's first step is in flight): bias words of the
  // tile's columns (word w: half w / (P / 2), pairs pit = 2 (w % (P / 2)), + 1 of box pit / PB), positions, RoPE
  // turns per pair.
  if (tid < kCT) {
    for (int w = tid; w < P; w += kCT) {
      const int hf = w / (P / 2), pit = 2 * (w % (P / 2)), head = h0 + pit / PB;
      if (HasBias && head < heads)
        ptx::cp_async_4(ptx::smem_u32(s_bias + 2 * w),
                        static_cast<const unsigned*>(p.bias) + (head * D + hf * kHalf + i0 + pit % PB) / 2);
      else *reinterpret_cast<unsigned*>(s_bias + 2 * w) = 0u;
    }
    if (Rope) {
      for (int i = tid; i < TileM; i += kCT) {
        if (m0 + i < m_end) ptx::cp_async_4(ptx::smem_u32(s_pos + i), p.positions + m0 + i);
        else s_pos[i] = 0;
      }
      for (int i = tid; i < kHalf; i += kCT) s_turns[i] = rope_turns<D>(p, i);
    }
    if (tid < kBoxes) {
      const int head = h0 + tid;
      long long stride = 0;
      s_out[tid] = head < heads ? wp_head_out<D, KvCache>(p, head, stride) : nullptr;
      s_out_stride[tid] = stride;
    }
  }
  __syncthreads();
  KT_WP_TRACE(6, tid == 0);

  if (tid >= kCT) {  // ---------------- producer warp ----------------
    if (tid == kCT)
      for (int j = n_first; j < nk; ++j) {
        ring.acquire(j);
        issue(j);
      }
    return;  // the consumers' barriers below are named barriers over their own threads
  }

  // ---------------- consumer warpgroups ----------------
  const int wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, q = lane % 4;
  const int rw = wg * 64 + warp * 16;  // the warp's first token row of the tile
  // The epilogue inputs have landed by now (copied before the block-wide barrier, while the ring's first step is in
  // flight), so the RoPE angles are computed before the mainloop instead of after it. Every box of the tile is a head
  // at the same pairs i0 .. i0 + PB - 1, so a thread's angles -- row h, its pairs -- are the same in every box: one
  // set per thread, in registers across the mainloop.
  ptx::cp_async_wait_all();    // this thread's copies of the epilogue inputs
  ptx::named_barrier(1, kCT);  // ... and every consumer thread's
  constexpr int kSub = PB >= 8 ? PB / 8 : 1;
  auto pair_of = [&](int sb) { return PB >= 8 ? 8 * sb + 2 * q : 2 * (q % 2); };  // the thread's first pair in the box
  float sn[kSub][2][2], cs[kSub][2][2];
  const bool any_rot = Rope && h0 < qk_heads;  // the tile has a Q or K head
  {
    int pos[2] = {0, 0};
    if (Rope)
#pragma unroll
      for (int h = 0; h < 2; ++h) pos[h] = s_pos[rw + lane / 4 + 8 * h];
#pragma unroll
    for (int sb = 0; sb < kSub; ++sb)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          sn[sb][h][e] = 0.f, cs[sb][h][e] = 1.f;
          if (any_rot) rope_sincos(pos[h], s_turns[i0 + pair_of(sb) + e], sn[sb][h][e], cs[sb][h][e]);
        }
  }
  float acc[TileN / 2];
#pragma unroll
  for (int i = 0; i < TileN / 2; ++i) acc[i] = 0.f;
  for (int j = 0; j < nk; ++j) {
    const unsigned slot = unsigned(ring.slot(j));
    ring.wait(j);
#ifdef KT_WP_TRACE_ON
    if (j == 0) KT_WP_TRACE(1, tid == 0);
#endif
    wgmma::fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
      wgmma::Mma<DT, TileN>::run(acc, wgmma::make_desc_sw128(sX + slot * kXB + wg * 64 * 128 + ks * 32),
                                 wgmma::make_desc_sw128(sW + slot * kWB + ks * 32));
    wgmma::commit_group();
    wgmma::wait_group<1>();  // step j - 1 retired: its slot is free
    wgmma::fence_operands(acc);
    if (j >= 1 && lane == 0) ring.release(j - 1);
  }
  wgmma::wait_group<0>();
  KT_WP_TRACE(2, tid == 0);
  wgmma::fence_operands(acc);
  ptx::named_barrier(1, kCT);  // every consumer's wgmmas have retired: the staging tile below overwrites the ring

  // ---- epilogue: + bias, RoPE, rounded into the staging tile [TileM rows][2 halves][P pairs] ----
  // Accumulator chunk c (8 columns) is weight-tile row group c: with PB >= 8, box b = c / (2 kSub), half
  // (c / kSub) % 2, pairs 8 (c % kSub) + 2 q + e (kSub = PB / 8 groups of 8 pairs per box half); with PB = 4, box c,
  // half q / 2, pairs 2 (q % 2) + e.
  unsigned char* st = stage_tile + rw * kStRow;
  auto bias_of = [&](int hf, int pit) { return HasBias ? ptx::to_float<DT>(s_bias[hf * P + pit]) : 0.f; };
  auto put = [&](int r, int hf, int pit, float y0, float y1) {  // pairs pit, pit + 1 of half hf, local row r
    *reinterpret_cast<unsigned*>(st + r * kStRow + hf * 2 * P + pit * 2) = ptx::pack2<DT>(y0, y1);
  };
#pragma unroll
  for (int b = 0; b < kBoxes; ++b) {
    const bool rot = Rope && h0 + b < qk_heads;  // box b = head h0 + b: a Q or K head
    if constexpr (PB >= 8) {  // chunks 2 kSub b + sb (half 0) and + kSub (half 1): both halves of pairs pit, pit + 1
#pragma unroll
      for (int sb = 0; sb < kSub; ++sb) {
        const int c0 = 2 * kSub * b + sb, c1 = c0 + kSub, pit = b * PB + pair_of(sb);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float y1[2], y2[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float x1 = acc[4 * c0 + 2 * h + e] + bias_of(0, pit + e);
            const float x2 = acc[4 * c1 + 2 * h + e] + bias_of(1, pit + e);
            y1[e] = x1, y2[e] = x2;
            if (rot) y1[e] = x1 * cs[sb][h][e] - x2 * sn[sb][h][e], y2[e] = x2 * cs[sb][h][e] + x1 * sn[sb][h][e];
          }
          put(lane / 4 + 8 * h, 0, pit, y1[0], y1[1]);
          put(lane / 4 + 8 * h, 1, pit, y2[0], y2[1]);
        }
      }
    } else {  // chunk b: lanes with q < 2 hold half 0, q >= 2 half 1 of pairs pit, pit + 1; the partner is lane ^ 2
      const int hf = q / 2, pit = b * PB + pair_of(0);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float y[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float own = acc[4 * b + 2 * h + e] + bias_of(hf, pit + e);
          const float other = __shfl_xor_sync(0xffffffffu, own, 2);
          y[e] = own;
          if (rot) y[e] = hf == 0 ? own * cs[0][h][e] - other * sn[0][h][e] : own * cs[0][h][e] + other * sn[0][h][e];
        }
        put(lane / 4 + 8 * h, hf, pit, y[0], y[1]);
      }
    }
  }
  __syncwarp();
  KT_WP_TRACE(3, tid == 0);
  // ---- the warp's 16 rows to Q / K / V: chunks of 8 pairs (16 bytes, PB >= 8) or 4 (8 bytes), contiguous in the
  // output; the PB / 8 chunks of a box's half go to neighbouring lanes, so each 32-byte output sector of a PB = 16
  // tile is written by one request (smaller pieces cost L2 write throughput) ----
  constexpr int kCP = PB >= 8 ? 8 : 4, kSubAll = PB / kCP, kRowChunks = 2 * kBoxes * kSubAll;
#pragma unroll 2
  for (int ch = lane; ch < 16 * kRowChunks; ch += 32) {
    const int r = ch / kRowChunks, rem = ch % kRowChunks, sb = rem % kSubAll, b = (rem / kSubAll) % kBoxes,
              hf = rem / (kSubAll * kBoxes);
    const int m = m0 + rw + r;
    if (m >= m_end || h0 + b >= heads) continue;
    const int col = hf * kHalf + i0 + sb * kCP;  // the chunk's first column in its head
    const unsigned char* src = st + r * kStRow + hf * 2 * P + (b * PB + sb * kCP) * 2;
    auto put = [&](unsigned short* out) {
      if constexpr (PB >= 8) *reinterpret_cast<uint4*>(out) = *reinterpret_cast<const uint4*>(src);
      else *reinterpret_cast<uint2*>(out) = *reinterpret_cast<const uint2*>(src);
    };
    if constexpr (!KvCache) {
      put(s_out[b] + m * s_out_stride[b] + col);
    } else {  // store_head's rule (qkv_epilogue.cuh): the plain output when there is one, K and V heads into the cache
      if (s_out[b] != nullptr) put(s_out[b] + m * s_out_stride[b] + col);
      const int head = h0 + b, kv_heads = heads - qk_heads;  // head counted over [Q | K | V]
      if (head < qk_heads - kv_heads) continue;              // a Q head
      const bool is_v = head >= qk_heads;
      const int slot = __ldg(p.slot_mapping + m);
      if (slot >= 0) put(kv_cache_head(p, is_v, head - (is_v ? qk_heads : qk_heads - kv_heads), slot) + col);
    }
  }
#ifdef KT_WP_TRACE_ON
  KT_WP_TRACE(4, tid == 0);
  if (tid == 0) {
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    kt_wp_trace[(blockIdx.y * gridDim.x + blockIdx.x) * 16 + 7] = smid;
  }
#endif
#endif
}

template <DType DT, quant::Format F, int D, bool HasBias, bool Rope, bool KvCache, int TileM, int TileN, int Stages>
__global__ void __launch_bounds__(TileM * 2 + 32, 1) qkv_wgmma_pairs(const __grid_constant__ WsParams wp) {
  wp_body<DT, F, D, HasBias, Rope, KvCache, TileM, TileN, Stages>(wp);
}

}  // namespace qkv
}  // namespace kt
