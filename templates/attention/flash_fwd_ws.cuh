// Flash-attention forward (prefill) for Hopper (sm_90a): warp-specialized, TMA-fed wgmma mainloop, after the
// structure of FlashAttention-3 (Shah et al., "FlashAttention-3: Fast and Accurate Attention with Asynchrony and
// Low-precision", 2024): a producer warpgroup streams K and V by TMA into an mbarrier ring (pipe::TmaRing), consumer
// warpgroups of 64 query rows each compute S = Q K^T with wgmma from shared memory, the online softmax in registers
// (exp2, scale folded into log2 space), and O += P V with P as wgmma's register A operand and V read MN-major.
//
// Shared memory (every operand in the 128-byte swizzle, as TMA writes it and wgmma reads it): Q [tile_m, D], then per
// ring slot K [tile_n, D] and V [tile_n, D], then (persistent blocks, where it fits: ws_o_stage_bytes) O [tile_m, D];
// each stored as D / 64 column blocks of [rows][64] (128-byte rows), each block filled (O: emptied) by [64 rows][64]
// TMA boxes. The mbarriers are static shared memory. The epilogue stages O in shared memory and stores it by TMA
// (FlashAttention-3's epilogue), in Q's tile when the block computes one tile.
//
// Block: (Consumers + 1) warpgroups; warpgroup 0 produces (one thread issues every copy), warpgroup 1 + c consumes
// rows [64 c, 64 c + 64) of the block's tile: 64 positions of one query head, or with PackGqa 64 / group positions of
// each head of a GQA group (WsTileRows). Grid and block order: block_order.cuh (Raster).
//
// Overlap (FlashAttention-3's intra-warpgroup overlap, its Algorithm 2): a consumer issues tile j's Q K^T and tile
// j - 1's P V together and runs tile j's softmax while the P V product is still on the tensor cores. Pingpong (two
// consumers; FlashAttention-3's warp-scheduler barriers): the consumers take turns issuing their GEMMs, so that one's
// softmax runs while the other's GEMMs hold the tensor cores; three consumers take their turns in a cycle.
// Layouts, strides and GQA mapping: FwdParams in attention_config.h; the tensor maps: FwdTmaParams.
#pragma once
#include "attention/attention_config.h"
#include "attention/block_order.cuh"
#include "common/ptx.cuh"
#include "common/tma_ring.cuh"
#include "common/wgmma.cuh"
#include "common/wgmma_attention.cuh"

namespace kt {
namespace attn {

#if __CUDA_ARCH__ >= 900

/// Bytes of one [rows][D] operand tile in shared memory (D / 64 column blocks of 128-byte rows).
template <int Rows, int D>
__host__ __device__ constexpr unsigned ws_tile_bytes() {
  return Rows * D * 2;
}

/// Where a tile's query rows are in the problem. Unpacked: tile row r is position pos0 + r of query head `head`. Packed
/// (pack_gqa; `head` is then the KV head): row r = 64 b + i, in 64-row box b, is position pos0 + b per_box + i / group
/// of query head head group + i % group, for i < group per_box; the box's other rows are unused (they hold whatever
/// the shared memory held, and are never stored). Box b is the TMA box of the Q and O maps at dims 1 and 2 (box_c1,
/// box_c2: {position, head} unpacked, {first head, position} packed; FwdTmaParams).
template <bool Pack>
struct WsTileRows {
  int pos0, head, group, per_box;

  __device__ __forceinline__ int position(int r) const {
    return Pack ? pos0 + (r / 64) * per_box + (r % 64) / group : pos0 + r;
  }
  __device__ __forceinline__ int q_head(int r) const { return Pack ? head * group + (r % 64) % group : head; }
  __device__ __forceinline__ bool used(int r) const { return !Pack || r % 64 < group * per_box; }
  __device__ __forceinline__ int kv_head() const { return Pack ? head : head / group; }
  __device__ __forceinline__ int box_position(int b) const { return pos0 + b * (Pack ? per_box : 64); }
  __device__ __forceinline__ int box_c1(int b) const { return Pack ? head * group : box_position(b); }
  __device__ __forceinline__ int box_c2(int b) const { return Pack ? box_position(b) : head; }
  /// Bytes one Q or O box moves per 64 columns.
  __device__ __forceinline__ unsigned box_bytes() const { return Pack ? unsigned(group * per_box) * 128u : 8192u; }
};

/// Producer (one thread), one tile: Q (into the Q buffer, on q_full) as (TileM / 64) x (D / 64) boxes of [64 rows][64
/// columns] (WsTileRows), then K and V of its n_tiles key tiles through the two rings at ring steps step0, step0 + 1,
/// ...; a K or V tile as D / 64 boxes of [TileN rows][64 columns]. Rows past the sequence read as zeros (TMA bounds).
template <int D, int TileM, int TileN, int Stages, bool Pack>
__device__ __forceinline__ void ws_produce(const FwdTmaParams& tp, unsigned sQ, unsigned sKV, unsigned q_full,
                                           const pipe::TmaRing<Stages>& k_ring, const pipe::TmaRing<Stages>& v_ring,
                                           const WsTileRows<Pack>& rows, int batch, int n_tiles, int step0) {
  constexpr int kBlocks = D / 64;
  constexpr unsigned kQBlock = TileM * 128, kKVBlock = TileN * 128;  // one column block of a tile
  const int kv_head = rows.kv_head();
  ptx::mbarrier_arrive_expect_tx(q_full, (TileM / 64) * kBlocks * rows.box_bytes());
#pragma unroll
  for (int h = 0; h < kBlocks; ++h)
#pragma unroll
    for (int rb = 0; rb < TileM / 64; ++rb)
      ptx::tma_load_4d(sQ + h * kQBlock + rb * 8192, &tp.q_map, 64 * h, rows.box_c1(rb), rows.box_c2(rb), batch,
                       q_full);
  for (int j = 0; j < n_tiles; ++j) {
    const int step = step0 + j, s = pipe::TmaRing<Stages>::slot(step);
    const unsigned sK = sKV + 2 * s * ws_tile_bytes<TileN, D>(), sV = sK + ws_tile_bytes<TileN, D>();
    k_ring.acquire(step);
    const unsigned kb = k_ring.arm(s, ws_tile_bytes<TileN, D>());
#pragma unroll
    for (int h = 0; h < kBlocks; ++h)
      ptx::tma_load_4d(sK + h * kKVBlock, &tp.k_map, 64 * h, j * TileN, kv_head, batch, kb);
    v_ring.acquire(step);
    const unsigned vb = v_ring.arm(s, ws_tile_bytes<TileN, D>());
#pragma unroll
    for (int h = 0; h < kBlocks; ++h)
      ptx::tma_load_4d(sV + h * kKVBlock, &tp.v_map, 64 * h, j * TileN, kv_head, batch, vb);
  }
}

/// Pingpong turns of the consumer warpgroups (FlashAttention-3's warp-scheduler barriers), in a cycle: consumer c waits
/// on named barrier 1 + c (256 threads: its own 128 and the previous consumer's arrival) before it issues a turn's
/// GEMMs and arrives on the next consumer's, 1 + (c + 1) % Consumers, after. Consumer 0's first turn is opened by its
/// own arrival (open, once per block); the last consumer skips its last arrival of the block, so every barrier use
/// completes. All consumers take the same turns (they work on the same tiles). Without Pingpong every call is a no-op.
template <bool Pingpong, int Consumers>
struct WsTurns {
  int c;
  __device__ __forceinline__ void open() const {
    if (Pingpong && c == 0) ptx::named_barrier_arrive(1, 256);
  }
  __device__ __forceinline__ void begin() const {
    if (Pingpong) ptx::named_barrier(1 + c, 256);
  }
  __device__ __forceinline__ void end(bool last) const {
    if (Pingpong && !(last && c == Consumers - 1)) ptx::named_barrier_arrive(1 + (c + 1) % Consumers, 256);
  }
};

/// The named barrier of consumer c's epilogue (after the pingpong turns' barriers 1 .. Consumers).
template <int Consumers>
__device__ __forceinline__ int ws_epilogue_barrier(int c) {
  return 1 + Consumers + c;
}

/// One consumer warpgroup's mainloop over one tile's key tiles [0, n_tiles) (n_tiles >= 1), at ring steps step0 + j.
/// Without Overlap: per key tile, Q K^T, softmax, P V, each waited for. With Overlap: key tile j's Q K^T and tile
/// j - 1's P V are issued together (one turn) and tile j's softmax runs while P V is in flight; O is rescaled once P V
/// has completed. Once the last Q K^T has completed, each warp arrives on q_empty (the producer may load the next
/// tile's Q). pos: the query positions of the thread's two rows; pos_lo: the lowest position of the warpgroup's rows.
/// last: this is the warpgroup's last tile (its last turn).
template <DType DT, int D, bool Causal, int TileM, int TileN, int Stages, bool Overlap, bool Pingpong, int Consumers>
__device__ __forceinline__ void ws_consume(const FwdParams& p, WsRows<D>& st, unsigned sQ_rows, unsigned sKV,
                                           const pipe::TmaRing<Stages>& k_ring, const pipe::TmaRing<Stages>& v_ring,
                                           unsigned q_empty, int c, const int (&pos)[2], int pos_lo, int n_tiles,
                                           int step0, bool last) {
  const bool lead = threadIdx.x % 32 == 0;    // one release per consumer warp
  const int shift = p.seqlen_k - p.seqlen_q;  // bottom-right causal alignment
  const WsTurns<Pingpong, Consumers> turn{c};
  // Key tile j's ring step, K slot and V slot.
  auto step = [&](int j) { return step0 + j; };
  auto sK = [&](int j) { return sKV + 2 * pipe::TmaRing<Stages>::slot(step0 + j) * ws_tile_bytes<TileN, D>(); };
  auto sV = [&](int j) { return sK(j) + ws_tile_bytes<TileN, D>(); };
  auto q_done = [&](int j) {
    if (lead && j == n_tiles - 1) ptx::mbarrier_arrive(q_empty);
  };
  auto softmax = [&](float(&s)[TileN / 2], float(&corr)[2], int j) {
    const int n0 = j * TileN;
    const bool need_mask = n0 + TileN > p.seqlen_k || (Causal && n0 + TileN - 1 > pos_lo + shift);
    ws_softmax<Causal, D, TileN>(s, st, corr, pos, n0, p.seqlen_k, shift, p.scale_log2, need_mask);
  };
  float s[TileN / 2], corr[2];
  unsigned pa[TileN / 16][4];
  if (!Overlap) {
    for (int j = 0; j < n_tiles; ++j) {
      k_ring.wait(step(j));
      ws_scores<DT, D, TileM, TileN>(s, sQ_rows, sK(j));
      wgmma::wait_group<0>();
      wgmma::fence_operands(s);
      if (lead) k_ring.release(step(j));
      q_done(j);
      softmax(s, corr, j);
      ws_rescale(st, corr);
      ws_pack_p<DT, TileN>(pa, s);
      v_ring.wait(step(j));
      ws_pv<DT, D, TileN>(st, pa, sV(j));
      wgmma::wait_group<0>();
      wgmma::fence_operands(st.o);
      if (lead) v_ring.release(step(j));
    }
    return;
  }
  k_ring.wait(step(0));
  turn.begin();
  ws_scores<DT, D, TileM, TileN>(s, sQ_rows, sK(0));
  turn.end(false);
  wgmma::wait_group<0>();
  wgmma::fence_operands(s);
  if (lead) k_ring.release(step(0));
  q_done(0);
  softmax(s, corr, 0);  // O is still 0: no rescale
  ws_pack_p<DT, TileN>(pa, s);
  for (int j = 1; j < n_tiles; ++j) {
    k_ring.wait(step(j));
    turn.begin();
    ws_scores<DT, D, TileM, TileN>(s, sQ_rows, sK(j));
    v_ring.wait(step(j - 1));
    ws_pv<DT, D, TileN>(st, pa, sV(j - 1));
    turn.end(false);
    wgmma::wait_group<1>();  // Q K^T of key tile j has completed; P V of tile j - 1 may still run
    wgmma::fence_operands(s);
    if (lead) k_ring.release(step(j));
    q_done(j);
    softmax(s, corr, j);
    wgmma::wait_group<0>();
    wgmma::fence_operands(st.o);
    if (lead) v_ring.release(step(j - 1));
    ws_rescale(st, corr);
    ws_pack_p<DT, TileN>(pa, s);
  }
  v_ring.wait(step(n_tiles - 1));
  turn.begin();
  ws_pv<DT, D, TileN>(st, pa, sV(n_tiles - 1));
  turn.end(last);
  wgmma::wait_group<0>();
  wgmma::fence_operands(st.o);
  if (lead) v_ring.release(step(n_tiles - 1));
}

/// The thread's two rows' 1 / l in inv (0 for a row that saw no key) and, when p.lse is set, their LSE (natural log;
/// -inf for a row that saw no key) for its used rows below seqlen_q. r: the thread's first row in the tile (and r + 8).
template <int D, bool Pack>
__device__ __forceinline__ void ws_row_scales(const FwdParams& p, const WsRows<D>& st, float (&inv)[2],
                                              const WsTileRows<Pack>& rows, int r, int batch) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = st.row_sum[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    inv[h] = l > 0.f ? 1.f / l : 0.f;
    const int pos = rows.position(r + 8 * h);
    if (p.lse != nullptr && t == 0 && pos < p.seqlen_q && rows.used(r + 8 * h)) {
      const float lse = l > 0.f ? (st.row_max[h] * p.scale_log2 + __log2f(l)) * 0.6931471805599453f : ptx::neg_inf();
      p.lse[((long long)batch * p.num_heads + rows.q_head(r + 8 * h)) * p.seqlen_q + pos] = lse;
    }
  }
}

/// Epilogue of one consumer thread from registers: O / l in the output dtype for its two rows (4-byte stores of
/// column pairs) when used and below seqlen_q, and the LSE. r: the thread's first row in the tile (and r + 8).
template <DType DT, int D, bool Pack>
__device__ __forceinline__ void ws_store(const FwdParams& p, const WsRows<D>& st, const WsTileRows<Pack>& rows, int r,
                                         int batch) {
  const int t = threadIdx.x % 4;
  float inv[2];
  ws_row_scales<D>(p, st, inv, rows, r, batch);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int pos = rows.position(r + 8 * h);
    if (pos >= p.seqlen_q || !rows.used(r + 8 * h)) continue;
    unsigned short* o = static_cast<unsigned short*>(p.o) + batch * p.o_batch_stride +
                        rows.q_head(r + 8 * h) * p.o_head_stride + (long long)pos * p.o_row_stride;
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
      *reinterpret_cast<unsigned*>(o + 8 * i + 2 * t) =
          ptx::pack2<DT>(st.o[4 * i + 2 * h] * inv[h], st.o[4 * i + 2 * h + 1] * inv[h]);
  }
}

/// Epilogue of consumer warpgroup c through shared memory: O / l of its 64 rows (box c of the tile) into sO_rows (its
/// rows of a [TileM][64]-per-column-block buffer in the 128-byte swizzle, the Q tile's layout), then one thread stores
/// them by TMA (o_map, one box per 64 columns, as Q was loaded; positions past seqlen_q are not written), and the LSE
/// from registers. The buffer is written again only once the warpgroup's previous store has read it (named barrier
/// ws_epilogue_barrier(c)).
template <DType DT, int D, int TileM, int Consumers, bool Pack>
__device__ __forceinline__ void ws_store_staged(const FwdTmaParams& tp, const WsRows<D>& st, unsigned sO_rows, int c,
                                                const WsTileRows<Pack>& rows, int batch) {
  const int ct = threadIdx.x % 128, t = ct % 4;
  const int r0 = ct / 4 % 8 + 16 * (ct / 32);  // the thread's first row within the warpgroup's 64 (and r0 + 8)
  const int bar = ws_epilogue_barrier<Consumers>(c);
  float inv[2];
  ws_row_scales<D>(tp.p, st, inv, rows, 64 * c + r0, batch);
  if (ct == 0) ptx::bulk_wait_group_read<0>();
  ptx::named_barrier(bar, 128);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + 8 * h;
#pragma unroll
    for (int i = 0; i < D / 8; ++i)  // 16-byte chunk i % 8 of row r sits at chunk (i % 8) ^ (r % 8)
      ptx::sts_u32(sO_rows + (i / 8) * TileM * 128 + r * 128 + ((i % 8) ^ (r % 8)) * 16 + 4 * t,
                   ptx::pack2<DT>(st.o[4 * i + 2 * h] * inv[h], st.o[4 * i + 2 * h + 1] * inv[h]));
  }
  ptx::fence_proxy_async_shared();
  ptx::named_barrier(bar, 128);
  if (ct == 0) {
#pragma unroll
    for (int b = 0; b < D / 64; ++b)
      ptx::tma_store_4d(&tp.o_map, sO_rows + b * TileM * 128, 64 * b, rows.box_c1(c), rows.box_c2(c), batch);
    ptx::bulk_commit_group();
  }
}

/// The Config of a kernel instance (the kernel's template arguments).
template <int TileN, int Consumers, int Stages, int Raster, bool Overlap, bool Pingpong, bool Persistent, bool PackGqa>
__host__ __device__ constexpr Config ws_config() {
  return Config{64 * Consumers,     TileN,          4 * Consumers,   Stages,
                kWgmmaWs,           Raster,         Overlap ? 1 : 0, Pingpong ? 1 : 0,
                Persistent ? 1 : 0, PackGqa ? 1 : 0};
}

/// The tiles of a launch and where each tile's rows are: m-blocks of `positions` query positions (tile_positions) x
/// query heads, or with PackGqa KV heads, x batch, in the scheduler's order.
template <bool Causal, int Raster, bool Persistent, bool PackGqa>
struct WsTiles {
  TileScheduler<Causal, Raster, Persistent> sched;
  int group, per_box, positions;

  __device__ __forceinline__ WsTileRows<PackGqa> rows(const BlockTile& t) const {
    return {t.m_block * positions, t.head, group, per_box};
  }
};

/// The launch's tiles for config c (c.pack_gqa == PackGqa), as launch_dims sizes the grid.
template <bool Causal, int Raster, bool Persistent, bool PackGqa>
__device__ __forceinline__ WsTiles<Causal, Raster, Persistent, PackGqa> ws_tiles(const FwdParams& p, const Config& c) {
  const int group = p.num_heads / p.num_kv_heads, per_box = PackGqa ? ws_packed_positions(group) : 64;
  const int positions = tile_positions(c, group);
  return {{(p.seqlen_q + positions - 1) / positions, PackGqa ? p.num_kv_heads : p.num_heads, p.batch},
          group,
          per_box,
          positions};
}

/// Consumers: every tile of the block (WsTiles), each with its own O, row maxima and sums; a tile without keys (causal
/// rows above the diagonal) stores o = 0 and LSE = -inf without reading K or V. sO: the O staging buffer of the
/// epilogue's TMA store (ws_o_stage_bytes; Q's tile when the block holds one tile), 0 when O is stored from registers.
template <DType DT, int D, bool Causal, int TileN, int Consumers, int Stages, int Raster, bool Overlap, bool Pingpong,
          bool Persistent, bool PackGqa>
__device__ __forceinline__ void ws_consumer(const FwdTmaParams& tp,
                                            const WsTiles<Causal, Raster, Persistent, PackGqa>& tiles, unsigned sQ,
                                            unsigned sKV, unsigned sO, unsigned q_full, unsigned q_empty,
                                            const pipe::TmaRing<Stages>& k_ring, const pipe::TmaRing<Stages>& v_ring,
                                            int c) {
  constexpr int TileM = 64 * Consumers;
  const FwdParams& p = tp.p;
  const auto& sched = tiles.sched;
  const int ct = threadIdx.x - 128 * (c + 1), warp = ct / 32, lane = ct % 32;
  const int r = 64 * c + 16 * warp + lane / 4;  // the thread's first row in the tile (and r + 8)
  auto keys = [&](int t) {                      // key tiles of tile t
    const int n = keys_needed<Causal>(p, tiles.rows(sched.tile(t)).pos0, tiles.positions);
    return n > 0 ? (n + TileN - 1) / TileN : 0;
  };
  auto next_work = [&](int t) {  // the first tile at or after t with keys, or total
    while (t < sched.total() && keys(t) == 0) t += sched.stride();
    return t;
  };
  int t_work = next_work(sched.first());
  if (t_work < sched.total()) WsTurns<Pingpong, Consumers>{c}.open();
  int step = 0, qi = 0;
  for (int t = sched.first(); t < sched.total(); t += sched.stride()) {
    const BlockTile tile = sched.tile(t);
    const WsTileRows<PackGqa> rows = tiles.rows(tile);
    const int n_tiles = keys(t);
    WsRows<D> st;
    st.clear();
    if (n_tiles > 0) {
      t_work = next_work(t + sched.stride());
      ptx::mbarrier_wait(q_full, unsigned(qi & 1));
      const int pos[2] = {rows.position(r), rows.position(r + 8)};
      ws_consume<DT, D, Causal, TileM, TileN, Stages, Overlap, Pingpong, Consumers>(
          p, st, sQ + c * 64 * 128, sKV, k_ring, v_ring, q_empty, c, pos, rows.box_position(c), n_tiles, step,
          t_work >= sched.total());
      step += n_tiles;
      ++qi;
    }
    if (sO != 0u) ws_store_staged<DT, D, TileM, Consumers, PackGqa>(tp, st, sO + c * 64 * 128, c, rows, tile.batch);
    else ws_store<DT, D, PackGqa>(p, st, rows, r, tile.batch);
  }
  if (sO != 0u && threadIdx.x % 128 == 0) ptx::bulk_wait_group_read<0>();  // the buffer outlives the last store's read
}

#endif  // __CUDA_ARCH__ >= 900

/// The kernel (mainloop kWgmmaWs). TileM = 64 x Consumers query rows per tile; TileN 64, 128 or 176 keys per ring slot.
/// Persistent: a grid of at most one block per SM loops over the tiles (TileScheduler); the producer loads the next
/// tile's Q as soon as the consumers' last Q K^T of the current tile has completed, under their last P V and epilogue.
/// PackGqa: a tile's rows are a GQA group's query heads at TileM / 64 x (64 / group) positions (WsTileRows).
/// Registers (setmaxnreg): two consumers 240 each, three 160 each; the producer keeps 24.
template <DType DT, int D, bool Causal, int TileN, int Consumers, int Stages, int Raster, bool Overlap, bool Pingpong,
          bool Persistent, bool PackGqa>
__global__ void __launch_bounds__((Consumers + 1) * 128, 1) flash_fwd_ws(const __grid_constant__ FwdTmaParams tp) {
#if __CUDA_ARCH__ >= 900
  constexpr int TileM = 64 * Consumers;
  // ---- preconditions: the family's single validity rule set ----
  constexpr Config kConfig = ws_config<TileN, Consumers, Stages, Raster, Overlap, Pingpong, Persistent, PackGqa>();
  static_assert(invalid_reason(DT, D, Causal, kConfig, ArchId{__CUDA_ARCH__ / 10, KT_ARCH_SPECIFIC}) == nullptr,
                "invalid attention_prefill wgmma_ws variant: see invalid_reason() in attention_config.h");
  const FwdParams& p = tp.p;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // Q full, Q empty, then the K ring's and the V ring's full and empty barriers.
  __shared__ __align__(8) unsigned long long s_bars[2 + 4 * Stages];
  const unsigned raw = ptx::smem_u32(smem_raw);
  const unsigned sQ = (raw + 1023u) & ~1023u;  // the launch requests 1 KB of slack for this alignment
  const unsigned sKV = sQ + ws_tile_bytes<TileM, D>();
  // The epilogue's O staging: its own buffer after the ring, Q's tile in a one-tile block, or none (registers).
  const unsigned sO = ws_o_stage_bytes(kConfig, D) > 0 ? sKV + 2 * Stages * ws_tile_bytes<TileN, D>()
                      : Persistent                     ? 0u
                                                       : sQ;
  const unsigned q_full = ptx::smem_u32(s_bars), q_empty = q_full + 8;
  const pipe::TmaRing<Stages> k_ring(s_bars + 2), v_ring(s_bars + 2 + 2 * Stages);
  const auto tiles = ws_tiles<Causal, Raster, Persistent, PackGqa>(p, kConfig);
  const int tid = threadIdx.x, wg = tid / 128;

  if (tid == 0) {
    ptx::mbarrier_init(q_full, 1);
    ptx::mbarrier_init(q_empty, Consumers * 4);  // one arrival per consumer warp
    k_ring.init(Consumers * 4);                  // one release per consumer warp
    v_ring.init(Consumers * 4);
    ptx::mbarrier_init_fence();
  }
  __syncthreads();

  if (wg == 0) {  // ---- producer: one thread issues every copy ----
    if (Consumers > 1) wgmma::setmaxnreg_dec<24>();
    if (tid != 0) return;
    int step = 0, qi = 0;
    const auto& sched = tiles.sched;
    for (int t = sched.first(); t < sched.total(); t += sched.stride()) {
      const BlockTile tile = sched.tile(t);
      const WsTileRows<PackGqa> rows = tiles.rows(tile);
      const int n_keys = keys_needed<Causal>(p, rows.pos0, tiles.positions);
      if (n_keys <= 0) continue;
      const int n_tiles = (n_keys + TileN - 1) / TileN;
      if (qi > 0) ptx::mbarrier_wait(q_empty, unsigned((qi - 1) & 1));  // the previous tile's Q is no longer read
      ws_produce<D, TileM, TileN, Stages, PackGqa>(tp, sQ, sKV, q_full, k_ring, v_ring, rows, tile.batch, n_tiles,
                                                   step);
      step += n_tiles;
      ++qi;
    }
    return;
  }
  if (Consumers > 1) wgmma::setmaxnreg_inc<Consumers == 3 ? 160 : 240>();
  ws_consumer<DT, D, Causal, TileN, Consumers, Stages, Raster, Overlap, Pingpong, Persistent, PackGqa>(
      tp, tiles, sQ, sKV, sO, q_full, q_empty, k_ring, v_ring, wg - 1);
#endif
}

}  // namespace attn
}  // namespace kt
