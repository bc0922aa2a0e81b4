// Split-KV flash decoding (Dao et al., "Flash-Decoding for long-context inference", 2023) with GQA packing, over a
// contiguous or paged KV cache. Work decomposition, layouts and kernel arguments: decode_config.h.
//
// One block: the tile_m packed query rows of row block rb of KV head kvh of sequence b (row r = query token
// r / group of query head kvh * group + r % group), against keys [split * kv_chunk, ...) of that sequence.
//  * Q tile [TileM, D] in shared memory (zero rows past the group's rows); K/V tiles [TileN, D] stream through a
//    cp.async ring of `Stages` slots, 16-byte chunks, XOR-swizzled rows (chunk ^ row % 8: ldmatrix and cp.async
//    bank-conflict free), rows addressed per token (paged: through the block table, so a tile may span pages).
//  * Warps form TileM / 16 row groups x KG key groups: a warp owns 16 packed rows (its Q A-fragments stay in
//    registers) and TileN / KG consecutive keys of every tile, and runs its own online softmax over them (exp2,
//    softmax scale folded into the exponent): S = Q K^T and O += P V with mma.sync m16n8k16, P kept in registers.
//  * Epilogue: the key groups' (max, sum, O) are merged through shared memory (block_merge). With one split the block
//    writes o and lse; otherwise it writes an fp32 partial (O normalized, LSE in log2) to the workspace, counts itself
//    on its (b, kvh, rb) counter, and the last block to arrive merges the splits' partials in split order
//    (combine_splits: the same bits whichever block is last) and resets the counter; in a cooperative launch (the whole
//    grid resident) every split block instead waits for the others and merges its share (split_combine_share). In a
//    cluster the splits first merge in distributed shared memory (cluster_combine); with several clusters per row block
//    each cluster's merged partial then takes the workspace path, one slot per cluster.
#pragma once
#include "attention_decode/decode_config.h"
#include "common/ptx.cuh"
#include "common/swizzle.cuh"
#include "common/wgmma_attention.cuh"

namespace kt {
namespace decode {

/// What one block computes: sequence b, KV head kvh, row block rb (of row_blocks), keys [key0, key_end) of a
/// sequence of len keys, which the sequence splits into `splits` blocks (this one is `split`; the grid holds
/// grid_splits per sequence).
struct BlockWork {
  int b, kvh, rb, row_blocks, split, splits, grid_splits;
  int len, key0, key_end;
  int group, rows, r0;  // query heads per KV head, packed rows of the group, this block's first row
};

/// The block's work from its indices (grid: decode_config.h), or splits == 0 when the block has nothing to do (its
/// split lies past the end of the sequence; in a cluster, the whole cluster's). A sequence of length 0 keeps split 0 (which writes o = 0, lse = -inf).
template <int TileM, int Cluster>
__device__ __forceinline__ BlockWork block_work(const DecodeParams& p) {
  BlockWork w;
  w.group = p.num_heads / p.num_kv_heads;
  w.rows = w.group * p.q_len;
  w.row_blocks = (w.rows + TileM - 1) / TileM;
  w.grid_splits = gridDim.x / w.row_blocks;
  // Cluster > 1: the splits of a row block are consecutive blocks (clusters of Cluster consecutive splits).
  w.split = Cluster > 1 ? blockIdx.x % w.grid_splits : blockIdx.x / w.row_blocks;
  w.rb = Cluster > 1 ? blockIdx.x / w.grid_splits : blockIdx.x % w.row_blocks;
  w.r0 = w.rb * TileM;
  w.kvh = blockIdx.y;
  w.b = blockIdx.z;
  w.len = min(max(p.seqlens_k[w.b], 0), p.kv_capacity);
  if (w.grid_splits == 1) {
    w.splits = 1;
    w.key0 = 0;
    w.key_end = w.len;
  } else {
    int need = w.len == 0 ? 1 : (w.len + p.kv_chunk - 1) / p.kv_chunk;
    // In whole clusters (grid_splits is a whole number of them): every block of a cluster takes part in its merge,
    // those past the sequence's keys with an empty range (their partial rows have LSE -inf).
    if (Cluster > 1) need = (need + Cluster - 1) / Cluster * Cluster;
    w.splits = min(w.grid_splits, need);
    w.key0 = min(w.split * p.kv_chunk, w.len);
    w.key_end = w.split == w.splits - 1 ? w.len : min(w.key0 + p.kv_chunk, w.len);
    if (w.split >= w.splits) w.splits = 0;  // past the end of the sequence (a whole cluster): nothing to do
  }
  return w;
}

/// Element offset of 16-byte chunk ch of row r in a [Rows, D] tile of shared memory. Blocked (the wgmma mainloop's
/// operands, the 128-byte swizzle of common/wgmma_attention.cuh): D / 64 column blocks of [Rows][64]; otherwise rows
/// of D elements (swz). Both swizzle chunk c of row r to c ^ (r % 8) inside 128 bytes; with D 64 they are the same.
template <int D, int Rows, bool Blocked>
__device__ __forceinline__ int tile_offset(int r, int ch) {
  return Blocked ? (ch / 8) * Rows * 64 + swz<64>(r, ch % 8) : swz<D>(r, ch);
}

/// Per-thread part of the K/V tile loader: each thread moves 16-byte chunk `ch` of rows r, r + kRowsPerPass, ... of
/// a [Rows, D] K tile and V tile. Rows whose token is at or past `end` (or, paged, whose page lies outside
/// [0, num_pages)) are zero-filled without a read. Stages: the ring depth of the kernel (it picks the V copies' L2 policy);
/// Blocked: the tiles' layout (tile_offset).
///
/// Paged: the page size is a compile-time constant (PageSize tokens, part of the kernel class), so a tile's split into
/// pages and each token's page index and row are shifts and masks fixed at compile time. The block-table entries reach
/// the copies through registers, not through a load on each tile's copy path. The entries of a window of 32
/// consecutive pages [32 win, 32 win + 32) of the sequence's table row lie one per lane (`cur`), and the next window's
/// (`nxt`) are read when a window becomes current, 32 pages before any copy needs them; a copy takes its page from its
/// warp's lane by shuffle. Tiles start at multiples of Rows (a power of two) and a tile spans at most 32 pages
/// (Rows <= 32 x PageSize), so a tile's pages lie in one window. Entries past the table row (kv_capacity / PageSize
/// entries) are not read.
template <KvLayout Layout, int PageSize, int D, int Threads, int Rows, int Stages, bool Blocked>
struct KvLoader {
  static constexpr int kChunks = D / 8;
  static constexpr int kRowsPerPass = Threads / kChunks;
  static constexpr int kWindow = 32;  // block-table entries per window: one per lane
  static constexpr int kPageShift = Layout == KvLayout::paged ? log2_pow2(PageSize) : 0;
  static_assert(Threads % kChunks == 0 && Rows % kRowsPerPass == 0, "K/V chunks must divide evenly over the threads");
  static_assert(Layout != KvLayout::paged || Rows <= kWindow * PageSize, "a tile spans at most one window of pages");
  const unsigned short* k;  // chunk ch of head kvh in token 0 (contiguous: of sequence b; paged: of page 0)
  const unsigned short* v;
  const int* table;  // paged: sequence b's block-table row
  long long k_row, v_row, k_page, v_page;
  int r, ch, num_pages, table_pages;
  int win = 0;           // paged: the window whose entries `cur` holds
  int cur = 0, nxt = 0;  // paged: this lane's entry of window win and of window win + 1 (-1 past the table row)
  unsigned long long evict_first;  // L2 policy of the copies: K/V are read once, so they replace their own lines

  /// first_key: the first token the block loads (its window is read here).
  __device__ __forceinline__ KvLoader(const DecodeParams& p, int b, int kvh, int tid, int first_key) {
    r = tid / kChunks;
    ch = tid % kChunks;
    k_row = p.k_row_stride;
    v_row = p.v_row_stride;
    const long long k_base = Layout == KvLayout::paged ? 0 : b * p.k_batch_stride;
    const long long v_base = Layout == KvLayout::paged ? 0 : b * p.v_batch_stride;
    k = static_cast<const unsigned short*>(p.k) + k_base + kvh * p.k_head_stride + ch * 8;
    v = static_cast<const unsigned short*>(p.v) + v_base + kvh * p.v_head_stride + ch * 8;
    k_page = p.k_page_stride;
    v_page = p.v_page_stride;
    table = Layout == KvLayout::paged ? p.block_table + b * p.block_table_stride : nullptr;
    num_pages = p.num_pages;
    table_pages = Layout == KvLayout::paged ? p.kv_capacity >> kPageShift : 0;
    evict_first = ptx::l2_evict_first_if(true).policy;
    if (Layout == KvLayout::paged) {
      win = (first_key >> kPageShift) / kWindow;
      cur = window_entry(win);
      nxt = window_entry(win + 1);
    }
  }

  /// This lane's block-table entry of window wi (-1 past the table row).
  __device__ __forceinline__ int window_entry(int wi) const {
    const int page = wi * kWindow + threadIdx.x % 32;
    return page < table_pages ? __ldg(table + page) : -1;
  }

  /// Makes the window of page index `pi` current (block-uniform: every lane of the warp calls it with the same pi).
  /// Windows advance in order, so the next one is already in registers; a jump (not taken by the kernel's monotone
  /// tiles) reads both.
  __device__ __forceinline__ void to_window(int pi) {
    const int wi = pi / kWindow;
    if (wi == win) return;
    cur = wi == win + 1 ? nxt : window_entry(wi);
    nxt = window_entry(wi + 1);
    win = wi;
  }

  /// The block-table entry of page index pi of the current window (every lane of the warp calls it).
  __device__ __forceinline__ int page_of(int pi) const { return __shfl_sync(0xffffffffu, cur, pi % kWindow); }

  /// Tokens [n0, n0 + Rows) into the K tile at sK and the V tile at sV (shared addresses). n0 is a multiple of Rows
  /// (a power of two), so with PageSize >= Rows the tile lies in one page (one block-table entry per tile), and with
  /// PageSize < Rows each PageSize-row piece lies in one page: a piece per page where a page holds whole passes of
  /// the threads' rows, otherwise a block-table entry per row.
  __device__ __forceinline__ void load(unsigned sK, unsigned sV, int n0, int end) {
    if constexpr (Layout == KvLayout::paged) {
      to_window(n0 >> kPageShift);
      if constexpr (PageSize < Rows) {
        if constexpr (PageSize % kRowsPerPass == 0) load_pieces<PageSize>(sK, sV, n0, end);
        else load_rows(sK, sV, n0, end);
        return;
      }
    }
    load_pieces<Rows>(sK, sV, n0, end);
  }

  // Whether load_pieces' copies carry the L2 policy. ptxas (CUDA 13.0) gives some of them a policy descriptor in a
  // uniform register it never writes, an illegal instruction at run time (docs/perf-log.md; scripts/check_sass.sh
  // finds it). The V copies of a tile of several pages keep the policy only as a 128-row tile of 64-token pages in a
  // ring of 3 or more stages with head_dim 128 (the B 16 q_len 4 and B 1 kv 32768 winners; about 3% faster there),
  // not in 2-stage 128-row tiles of 64-token pages, 64-row tiles of 16- and 32-token pages or head_dim 64 256-row
  // tiles of 16-token pages; the 32-row wgmma tiles (Blocked) take it on neither copy (head_dim 64, 8 warps, 2
  // stages, pages of 64 tokens and more).
  static constexpr bool kHintK = !(Blocked && Rows == 32);
  template <int Piece>
  static constexpr bool kHintV = kHintK &&
                                 (Rows / Piece == 1 || (Rows == 128 && Piece == 64 && Stages > 2 && D == 128));

  /// load() in pieces of Piece rows (a power of two), each piece contiguous in the cache (paged: within one page):
  /// one address per piece, the piece's rows at constant strides from it.
  template <int Piece>
  __device__ __forceinline__ void load_pieces(unsigned sK, unsigned sV, int n0, int end) const {
    static_assert(Rows % Piece == 0 && Piece % kRowsPerPass == 0, "pieces of whole passes");
#pragma unroll
    for (int q = 0; q < Rows / Piece; ++q) {
      const int nq = n0 + q * Piece;
      bool piece_in = true;
      long long ko = (long long)(nq + r) * k_row, vo = (long long)(nq + r) * v_row;
      if (Layout == KvLayout::paged) {
        const int page = page_of(nq >> kPageShift);
        piece_in = page >= 0 && page < num_pages;
        const int off = (nq & (PageSize - 1)) + r;
        ko = (long long)page * k_page + (long long)off * k_row;
        vo = (long long)page * v_page + (long long)off * v_row;
      }
      const unsigned short* ks = k + ko;
      const unsigned short* vs = v + vo;
#pragma unroll
      for (int i = 0; i < Piece / kRowsPerPass; ++i) {
        const int row = r + i * kRowsPerPass;
        const bool in = piece_in && nq + row < end;
        const unsigned dst = tile_offset<D, Rows, Blocked>(q * Piece + row, ch) * 2;
        if constexpr (kHintK)
          ptx::cp_async_16_hint(sK + dst, in ? ks + i * kRowsPerPass * k_row : k, in ? 16u : 0u, evict_first);
        else ptx::cp_async_16(sK + dst, in ? ks + i * kRowsPerPass * k_row : k, in ? 16u : 0u);
        if constexpr (kHintV<Piece>)
          ptx::cp_async_16_hint(sV + dst, in ? vs + i * kRowsPerPass * v_row : v, in ? 16u : 0u, evict_first);
        else ptx::cp_async_16(sV + dst, in ? vs + i * kRowsPerPass * v_row : v, in ? 16u : 0u);
      }
    }
  }

  /// load() for pages smaller than the tile and than one pass of the threads' rows: each row through its own
  /// block-table entry.
  __device__ __forceinline__ void load_rows(unsigned sK, unsigned sV, int n0, int end) const {
#pragma unroll
    for (int i = 0; i < Rows / kRowsPerPass; ++i) {
      const int row = r + i * kRowsPerPass;
      const int t = n0 + row;
      const int entry = page_of(t >> kPageShift);  // every lane shuffles, whether or not its row is in range
      const int page = t < end ? entry : -1;
      const bool in = page >= 0 && page < num_pages;
      const long long off = t & (PageSize - 1);
      const unsigned dst = tile_offset<D, Rows, Blocked>(row, ch) * 2;
      ptx::cp_async_16_hint(sK + dst, in ? k + (long long)page * k_page + off * k_row : k, in ? 16u : 0u, evict_first);
      ptx::cp_async_16_hint(sV + dst, in ? v + (long long)page * v_page + off * v_row : v, in ? 16u : 0u, evict_first);
    }
  }
};

/// Loads the block's Q tile [TileM, D] (layout: tile_offset) by cp.async: packed row r0 + r is query token
/// (r0 + r) / group of head kvh * group + (r0 + r) % group; rows past the group's rows are zero-filled.
template <int D, int TileM, int Threads, bool Blocked>
__device__ __forceinline__ void load_q(const DecodeParams& p, const BlockWork& w, unsigned sQ, int tid) {
  constexpr int kChunks = D / 8;
  for (int c = tid; c < TileM * kChunks; c += Threads) {
    const int row = c / kChunks, ch = c % kChunks;
    const int pr = w.r0 + row;
    const bool in = pr < w.rows;
    const int qi = in ? pr / w.group : 0;
    const int head = w.kvh * w.group + (in ? pr % w.group : 0);
    const unsigned short* src = static_cast<const unsigned short*>(p.q) + w.b * p.q_batch_stride + qi * p.q_row_stride +
                                head * p.q_head_stride + ch * 8;
    ptx::cp_async_16(sQ + tile_offset<D, TileM, Blocked>(row, ch) * 2, src, in ? 16u : 0u);
  }
}

/// A warp's online-softmax state over its keys: O [16, D] in the mma accumulator layout, and per row (rows g and
/// g + 8 of the warp's m16 fragment) the raw-score max and this thread's partial sum of exp2.
template <int D>
struct WarpState {
  float o[D / 8][4];
  float row_max[2];
  float row_sum[2];
};

/// One K/V tile for one warp: S = Q K^T over the warp's WK keys [key0_w, key0_w + WK), mask, online softmax,
/// O += P V. q: the warp's Q A-fragments; sK / sV: the tile's shared addresses already offset to the warp's first
/// key; row_last[h]: the last key rows g and g + 8 see (inclusive); key_end: the block's key range end; mask: whether
/// any key of the tile may be masked.
template <DType DT, int D, int WK>
__device__ __forceinline__ void warp_tile(WarpState<D>& st, const unsigned (&q)[D / 16][4], unsigned sK, unsigned sV,
                                          int key0_w, int key_end, const int (&row_last)[2], bool mask,
                                          float scale_log2) {
  constexpr int NT = WK / 8;  // n8 tiles of the warp's scores
  const int lane = threadIdx.x % 32;
  const int t = lane % 4;
  // ldmatrix lanes: B operand (keys x d) for K, transposed B (keys x d) for V; tiles start on 256-byte boundaries,
  // so the k-step s address is the lane base XOR (s * 32), and 16-key steps are additive.
  const unsigned k_lane = sK + swz<D>(lane % 8 + (lane / 16) * 8, (lane / 8) % 2) * 2;
  const unsigned v_lane = sV + swz<D>(lane % 8 + ((lane / 8) % 2) * 8, lane / 16) * 2;

  // ---- S = Q K^T : [16, WK] ----
  float s[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = 0.f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      unsigned b0, b1, b2, b3;  // keys [16np, 16np+8) and [16np+8, 16np+16), d [16ks, 16ks+16)
      ptx::ldmatrix_x4((k_lane ^ (ks * 32)) + np * 16 * D * 2, b0, b1, b2, b3);
      ptx::mma_16816<DT>(s[2 * np], q[ks], b0, b1);
      ptx::mma_16816<DT>(s[2 * np + 1], q[ks], b2, b3);
    }
  }

  // ---- mask: keys past the block's range, and keys past each row's last visible key ----
  if (mask) {
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = key0_w + n * 8 + 2 * t + (e % 2);
        if (col >= key_end || col > row_last[e / 2]) s[n][e] = ptx::neg_inf();
      }
  }

  // ---- online softmax (a row is spread over the 4 lanes of a quad) ----
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = st.row_max[h];
#pragma unroll
    for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    // A row with no visible key yet keeps max -inf and uses 0 as the base.
    const float base = mx == ptx::neg_inf() ? 0.f : mx * scale_log2;
    const float prev = st.row_max[h] == ptx::neg_inf() ? ptx::neg_inf() : st.row_max[h] * scale_log2;
    const float corr = ptx::exp2_approx(prev - base);
    st.row_max[h] = mx;
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      s[n][2 * h] = ptx::exp2_approx(fmaf(s[n][2 * h], scale_log2, -base));
      s[n][2 * h + 1] = ptx::exp2_approx(fmaf(s[n][2 * h + 1], scale_log2, -base));
      sum += s[n][2 * h] + s[n][2 * h + 1];
    }
    st.row_sum[h] = st.row_sum[h] * corr + sum;
#pragma unroll
    for (int d = 0; d < D / 8; ++d) {
      st.o[d][2 * h] *= corr;
      st.o[d][2 * h + 1] *= corr;
    }
  }

  // ---- O += P V : P from registers (score accumulator layout == A fragment layout) ----
#pragma unroll
  for (int kk = 0; kk < WK / 16; ++kk) {
    const unsigned pa[4] = {ptx::pack2<DT>(s[2 * kk][0], s[2 * kk][1]), ptx::pack2<DT>(s[2 * kk][2], s[2 * kk][3]),
                            ptx::pack2<DT>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                            ptx::pack2<DT>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      unsigned b0, b1, b2, b3;  // keys [16kk, 16kk+16), d [16dp, 16dp+8) and [16dp+8, 16dp+16)
      ptx::ldmatrix_x4_trans((v_lane ^ (dp * 32)) + kk * 16 * D * 2, b0, b1, b2, b3);
      ptx::mma_16816<DT>(st.o[2 * dp], pa, b0, b1);
      ptx::mma_16816<DT>(st.o[2 * dp + 1], pa, b2, b3);
    }
  }
}

#if __CUDA_ARCH__ >= 900
/// One K/V tile for one warpgroup (Config::wgmma, sm_90a): its 64 rows against the key group's WK keys [key0_w,
/// key0_w + WK), which start at sK / sV in tiles of TileN keys (tile_offset's Blocked layout); Q [64, D] at sQ.
/// S = Q K^T and O += P V by wgmma (common/wgmma_attention.cuh); the mask (keys at or past key_end, and past each row's
/// last visible key row_last, the causal diagonal of ws_softmax) where `mask`, and the online softmax step between.
template <DType DT, int D, int WK, int TileN>
__device__ __forceinline__ void warpgroup_tile(attn::WsRows<D>& st, unsigned sQ, unsigned sK, unsigned sV, int key0_w,
                                               int key_end, const int (&row_last)[2], bool mask, float scale_log2) {
  float s[WK / 2];
  attn::ws_scores<DT, D, 64, WK, TileN>(s, sQ, sK);
  wgmma::wait_group<0>();
  float corr[2];
  attn::ws_softmax<true, D, WK>(s, st, corr, row_last, key0_w, key_end, 0, scale_log2, mask);
  attn::ws_rescale(st, corr);
  unsigned pa[WK / 16][4];
  attn::ws_pack_p<DT, WK>(pa, s);
  attn::ws_pv<DT, D, WK, TileN>(st, pa, sV);
  wgmma::wait_group<0>();
}
#endif

/// Merges the key groups' states through the combine area at `smem` (the ring must be idle: the caller has waited for
/// every cp.async and passed a block barrier). Warp `warp` (key group warp / RG, row group warp % RG) writes its
/// unnormalized O to sO[kg][r] for the valid rows r < valid_rows and its rows' max m_kg (log2 units, -inf: no key) and
/// sum l_kg; after a barrier one thread per row takes M = max_kg m_kg and L = sum_kg l_kg 2^(m_kg - M) and leaves the
/// weights sW[kg][r] = 2^(m_kg - M) / L (0 for a key group that saw no key; in the maxima's place) and sLse[r] = M +
/// log2(L), or -inf for a row that saw no key. The readers (RowMerge) sum the weighted slices: no slice is rescaled in
/// place, so the O stores leave before the first barrier. Ends with a block barrier.
template <int D, int TileM, int KG>
__device__ __forceinline__ void block_merge(const WarpState<D>& st, float* smem, float scale_log2, int valid_rows) {
  constexpr int RG = TileM / 16;
  constexpr int LD = combine_ld(D);
  float* sO = smem;                    // [KG][TileM][LD]
  float* sMax = sO + KG * TileM * LD;  // [KG][TileM], log2 units (-inf: no key); then the weights sW
  float* sSum = sMax + KG * TileM;     // [KG][TileM]
  float* sLse = sSum + KG * TileM;     // [TileM]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int kg = warp / RG, rg = warp % RG;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = rg * 16 + g + 8 * h;
    if (r < valid_rows)  // the rows past the group's (zero Q rows) are never read
#pragma unroll
      for (int d = 0; d < D / 8; ++d)
        *reinterpret_cast<float2*>(sO + (kg * TileM + r) * LD + d * 8 + 2 * t) =
            make_float2(st.o[d][2 * h], st.o[d][2 * h + 1]);
    float l = st.row_sum[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (t == 0) {
      sMax[kg * TileM + r] = st.row_max[h] == ptx::neg_inf() ? ptx::neg_inf() : st.row_max[h] * scale_log2;
      sSum[kg * TileM + r] = l;
    }
  }
  __syncthreads();
  if (const int r = threadIdx.x; r < valid_rows) {  // valid_rows <= TileM <= 16 RG <= the block's threads
    float m[KG];
    float M = ptx::neg_inf();
#pragma unroll
    for (int k = 0; k < KG; ++k) {
      m[k] = sMax[k * TileM + r];
      M = fmaxf(M, m[k]);
    }
    float e[KG], L = 0.f;
#pragma unroll
    for (int k = 0; k < KG; ++k) {
      e[k] = m[k] == ptx::neg_inf() ? 0.f : ptx::exp2_approx(m[k] - M);
      L = fmaf(sSum[k * TileM + r], e[k], L);
    }
    const float inv = L > 0.f ? 1.f / L : 0.f;
#pragma unroll
    for (int k = 0; k < KG; ++k) sMax[k * TileM + r] = e[k] * inv;  // sW
    sLse[r] = L > 0.f ? M + __log2f(L) : ptx::neg_inf();
  }
  __syncthreads();
}

/// Row r of the block's partial from the combine area after block_merge: its key groups' weights and LSE (log2 units).
template <int D, int TileM, int KG>
struct RowMerge {
  float weight[KG];
  float lse2;
  __device__ __forceinline__ RowMerge(const float* smem, int r) {
    const float* sW = smem + KG * TileM * combine_ld(D);
#pragma unroll
    for (int k = 0; k < KG; ++k) weight[k] = sW[k * TileM + r];
    lse2 = sW[2 * KG * TileM + r];
  }
  /// The merged O of row r, columns [4 c4, 4 c4 + 4): the key groups' weighted slices summed in key-group order.
  __device__ __forceinline__ float4 cols4(const float* smem, int r, int c4) const {
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int k = 0; k < KG; ++k) {
      const float4 a = *reinterpret_cast<const float4*>(smem + (k * TileM + r) * combine_ld(D) + c4 * 4);
      v.x = fmaf(weight[k], a.x, v.x), v.y = fmaf(weight[k], a.y, v.y);
      v.z = fmaf(weight[k], a.z, v.z), v.w = fmaf(weight[k], a.w, v.w);
    }
    return v;
  }
  /// Columns [8 ch, 8 ch + 8) of the merged row.
  __device__ __forceinline__ void cols8(const float* smem, int r, int ch, float (&out)[8]) const {
    const float4 a = cols4(smem, r, 2 * ch), b = cols4(smem, r, 2 * ch + 1);
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  }
};

/// Stores N consecutive output columns [col0, col0 + N) of packed row pr (token pr / group, head kvh * group +
/// pr % group) as the dtype (N = 2, 4 or 8: one 4-, 8- or 16-byte store), and, when with_lse, the row's LSE (lse2
/// in log2 units, stored as the natural log) if the caller asked for LSE.
template <DType DT, int N>
__device__ __forceinline__ void store_cols(const DecodeParams& p, const BlockWork& w, int pr, int col0,
                                           const float (&v)[N], float lse2, bool with_lse) {
  static_assert(N == 2 || N == 4 || N == 8, "2, 4 or 8 columns per store");
  const int qi = pr / w.group, head = w.kvh * w.group + pr % w.group;
  unsigned packed[N / 2];
#pragma unroll
  for (int e = 0; e < N / 2; ++e) packed[e] = ptx::pack2<DT>(v[2 * e], v[2 * e + 1]);
  unsigned short* o =
      static_cast<unsigned short*>(p.o) + w.b * p.o_batch_stride + qi * p.o_row_stride + head * p.o_head_stride + col0;
  if constexpr (N == 8) *reinterpret_cast<uint4*>(o) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  else if constexpr (N == 4) *reinterpret_cast<uint2*>(o) = make_uint2(packed[0], packed[1]);
  else *reinterpret_cast<unsigned*>(o) = packed[0];
  if (with_lse && p.lse != nullptr)
    p.lse[((long long)w.b * p.num_heads + head) * p.q_len + qi] =
        lse2 == ptx::neg_inf() ? lse2 : lse2 * 0.6931471805599453f;
}

/// Index of (b, kvh, rb) among the counters; its partials are slots [group * grid slots, + grid slots) of [TileM, D]
/// O and [TileM] LSE (grid slots: one per split of the grid, or one per cluster).
__device__ __forceinline__ long long partial_group(const BlockWork& w, const DecodeParams& p) {
  return ((long long)w.b * p.num_kv_heads + w.kvh) * w.row_blocks + w.rb;
}

/// The last block of a (b, kvh, rb) merges the S partials (slots [0, S) of the group's grid_slots; one per split or
/// per cluster) of the group's valid rows (flash decoding's combine; Dao et al., "Flash-Decoding for long-context
/// inference", 2023), in two passes with no running rescale:
///  1. each warp takes rows: the row's max M of the S LSEs (log2 units), the lanes over the splits, then a shuffle
///     tree (max is exact in any order), into shared memory (`row_max`, TileM floats);
///  2. every thread takes items: item i of valid_rows x D / 4 is row i / (D / 4), columns [4 (i % (D / 4)), + 4);
///     it loads kBatch splits' LSE and 16-byte O at once (a warp reads 512 contiguous bytes of one split's rows) and
///     adds w = 2^(lse - M) to the sum and w O to the columns, splits in split order; a split whose rows saw no key
///     (LSE -inf) weighs 0. o = sum_s w_s O_s / sum_s w_s, lse = M + log2(sum_s w_s).
/// Every thread of a row adds the same weights in the same order, so the row's sum and LSE agree across its items,
/// and the result has the same bits whichever block arrives last.
template <DType DT, int D, int TileM, int Threads>
__device__ __forceinline__ void combine_splits(const DecodeParams& p, const BlockWork& w, float* row_max,
                                               int valid_rows, int S, int grid_slots) {
  constexpr int kItemsPerRow = D / 4;
  // Splits' loads in flight per thread: 16 at D 128 (the mainloop's registers cover them), 8 at D 64 (whose rows
  // have half the items, and whose mainloop needs far fewer registers than 16 batched loads would).
  constexpr int kBatch = D == 128 ? 16 : 8;
  const long long grp = partial_group(w, p) * grid_slots;  // first slot of the group
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < valid_rows; r += Threads / 32) {
    float m = ptx::neg_inf();
#pragma unroll 1  // unrolled, ptxas keeps many loads in flight and spills in the small sm_80 variants
    for (int s = lane; s < S; s += 32) m = fmaxf(m, __ldcg(p.partial_lse + (grp + s) * TileM + r));
#pragma unroll
    for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (lane == 0) row_max[r] = m;
  }
  __syncthreads();
  for (int it = threadIdx.x; it < valid_rows * kItemsPerRow; it += Threads) {
    const int r = it / kItemsPerRow, c4 = it % kItemsPerRow;
    const float M = row_max[r];
    const float* lse_r = p.partial_lse + grp * TileM + r;             // split s: lse_r[s TileM]
    const float* o_r = p.partial_o + (grp * TileM + r) * D + c4 * 4;  // split s: o_r[s TileM D]
    float sum = 0.f, acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 1  // one batch of loads in flight: the registers stay those of the mainloop
    for (int s0 = 0; M != ptx::neg_inf() && s0 < S; s0 += kBatch) {
      float l[kBatch];
      float4 v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const bool in = s0 + j < S;
        l[j] = in ? __ldcg(lse_r + (long long)(s0 + j) * TileM) : ptx::neg_inf();
        v[j] = in ? __ldcg(reinterpret_cast<const float4*>(o_r + (long long)(s0 + j) * TileM * D))
                  : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const float wgt = l[j] == ptx::neg_inf() ? 0.f : ptx::exp2_approx(l[j] - M);
        sum += wgt;
        acc[0] = fmaf(wgt, v[j].x, acc[0]), acc[1] = fmaf(wgt, v[j].y, acc[1]);
        acc[2] = fmaf(wgt, v[j].z, acc[2]), acc[3] = fmaf(wgt, v[j].w, acc[3]);
      }
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[e] *= inv;
    store_cols<DT, 4>(p, w, w.r0 + r, c4 * 4, acc, sum > 0.f ? M + __log2f(sum) : ptx::neg_inf(), c4 == 0);
  }
}

/// After the block has stored its share of a partial: counts the block on its (b, kvh, rb) counter, and the last of
/// the group's w.splits blocks merges the group's S partials (combine_splits) and resets the counter. One release
/// per block publishes its stores (the barrier orders every thread's stores before thread 0's atomic); the last
/// block's acquire, then a barrier, makes every partial visible to all its threads. The flag lies in the warps' max
/// area of the combine area and combine_splits' row maxima in their sum area, which nothing reads any more.
template <DType DT, int D, int TileM, int KG, int Threads>
__device__ __forceinline__ void count_then_combine(const DecodeParams& p, const BlockWork& w, float* smem,
                                                   int valid_rows, int S, int grid_slots) {
  __syncthreads();
  int& s_last = *reinterpret_cast<int*>(smem + KG * TileM * combine_ld(D));
  unsigned* counter = p.counters + partial_group(w, p);
  if (threadIdx.x == 0) s_last = ptx::atomic_add_acq_rel_gpu(counter, 1u) == unsigned(w.splits - 1);
  __syncthreads();
  if (!s_last) return;
  combine_splits<DT, D, TileM, Threads>(p, w, smem + KG * TileM * (combine_ld(D) + 1), valid_rows, S, grid_slots);
  if (threadIdx.x == 0) *counter = 0u;  // ready for the next launch
}

/// The generation word of the block's (b, kvh, rb) group in a cooperative launch (DecodeParams::counters: after the
/// groups' counters).
__device__ __forceinline__ unsigned* group_generation(const DecodeParams& p, const BlockWork& w) {
  return p.counters + (long long)p.batch * p.num_kv_heads * w.row_blocks + partial_group(w, p);
}

/// Cooperative launch (DecodeParams::cooperative; the whole grid resident at once), after the block has stored its
/// partial: every split block of the (b, kvh, rb) group waits until the group's w.splits partials are stored, then
/// merges its share of the output, so that the merge runs on all the splits' SMs at once. The wait is a generation
/// barrier: gen0 is the group's generation word as thread 0 read it before the block arrived (at the kernel's start);
/// each block counts itself on the group's counter with one release (after a barrier: the whole block's stores), the
/// last to arrive resets the counter and releases gen0 + 1, and the others poll both words with acquire loads until the
/// counter reads w.splits (every arrival in, one round trip sooner than the generation) or the generation moves (the
/// counter already reset); a barrier then passes the acquire on to the block's threads. The share: item it of the
/// valid_rows x D / 4 items (row it / (D / 4), 4 columns) belongs to split it % S; L lanes per item (S rounded up to a
/// power of two, at most 32). Lane l of an item loads splits l, l + L, ... in batches of 8 (all of them at once up to
/// 256 splits) and keeps a running max m (log2 units), sum of 2^(lse - m) and sum of 2^(lse - m) O over them (each
/// batch moves m to the batch's max first, then adds its splits in order; a split without keys, LSE -inf, weighs 0);
/// the L lanes then take the item's max M by a shuffle butterfly, rescale their sums to it and add them by a second
/// butterfly (a + b on one lane of a pair, b + a on the other: the same bits). o = sum w O / sum w, lse = M + log2(sum
/// w): for a given S the same order on every run, so the same bits whichever block is last (combine_splits' order
/// differs, so the two may differ in the last place).
template <DType DT, int D, int TileM, int Threads>
__device__ __forceinline__ void split_combine_share(const DecodeParams& p, const BlockWork& w, int valid_rows,
                                                    unsigned gen0) {
  __syncthreads();  // every thread's partial stores precede thread 0's release
  if (threadIdx.x == 0) {
    unsigned* counter = p.counters + partial_group(w, p);
    unsigned* gen = group_generation(p, w);
    const unsigned all = unsigned(w.splits);
    if (ptx::atomic_add_acq_rel_gpu(counter, 1u) == all - 1u) {
      *counter = 0u;  // every split has arrived: the waiters see `all` or the new generation
      ptx::st_release_gpu(gen, gen0 + 1u);
    } else {
      while (ptx::ld_acquire_gpu(counter) != all && ptx::ld_acquire_gpu(gen) == gen0) __nanosleep(32);
    }
  }
  __syncthreads();
  constexpr int kItemsPerRow = D / 4;
  constexpr int kBatch = 8;  // splits per lane and batch: up to 8 x 32 = 256 splits in one round of loads
  const int S = w.splits, items = valid_rows * kItemsPerRow;
  const int mine = (items - w.split + S - 1) / S;  // this block's items: w.split + k S, k < mine
  int L = 1;
  while (L < S && L < 32) L *= 2;
  const long long grp = partial_group(w, p) * w.grid_splits;  // first slot of the group
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane % L, slot = lane / L;
  for (int k0 = warp * (32 / L); k0 < mine; k0 += (Threads / 32) * (32 / L)) {  // warp-uniform
    const int k = k0 + slot;
    const int it = w.split + min(k, mine - 1) * S;  // lanes past the block's items repeat its last (not stored)
    const int r = it / kItemsPerRow, c4 = it % kItemsPerRow;
    const float* lse_r = p.partial_lse + grp * TileM + r;             // split s: lse_r[s TileM]
    const float* o_r = p.partial_o + (grp * TileM + r) * D + c4 * 4;  // split s: o_r[s TileM D]
    float m = ptx::neg_inf(), sum = 0.f, acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int s0 = sub; s0 < S; s0 += kBatch * L) {
      float l[kBatch];
      float4 v[kBatch];
      float mb = m;
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int s = s0 + j * L;
        l[j] = s < S ? __ldcg(lse_r + (long long)s * TileM) : ptx::neg_inf();
        v[j] = s < S ? __ldcg(reinterpret_cast<const float4*>(o_r + (long long)s * TileM * D))
                     : make_float4(0.f, 0.f, 0.f, 0.f);
        mb = fmaxf(mb, l[j]);
      }
      if (mb == ptx::neg_inf()) continue;
      const float a = m == ptx::neg_inf() ? 0.f : ptx::exp2_approx(m - mb);
      sum *= a;
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[e] *= a;
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const float wgt = l[j] == ptx::neg_inf() ? 0.f : ptx::exp2_approx(l[j] - mb);
        sum += wgt;
        acc[0] = fmaf(wgt, v[j].x, acc[0]), acc[1] = fmaf(wgt, v[j].y, acc[1]);
        acc[2] = fmaf(wgt, v[j].z, acc[2]), acc[3] = fmaf(wgt, v[j].w, acc[3]);
      }
      m = mb;
    }
    // The butterflies over the item's L lanes (xor offsets below L stay inside its aligned group), unrolled over the
    // five offsets: with L as the loop bound ptxas 13.0 miscompiled a paged tile copy of another part of the kernel
    // (fp16 head_dim 64 m64 n32 w8 s2 wgmma, pages of 16: an unwritten uniform register, scripts/check_sass.sh).
    float M = m;
#pragma unroll
    for (int off = 16; off > 0; off /= 2)
      if (off < L) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
    const float f = m == ptx::neg_inf() ? 0.f : ptx::exp2_approx(m - M);
    sum *= f;
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[e] *= f;
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      if (off >= L) continue;
      sum += __shfl_xor_sync(0xffffffffu, sum, off);
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], off);
    }
    if (sub == 0 && k < mine) {
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[e] *= inv;
      store_cols<DT, 4>(p, w, w.r0 + r, c4 * 4, acc, sum > 0.f ? M + __log2f(sum) : ptx::neg_inf(), c4 == 0);
    }
  }
}

#if __CUDA_ARCH__ >= 900
/// Cluster > 1 (sm_90): the row block's Cluster split blocks merge their partials through distributed shared memory.
/// The items of the partial (valid_rows x D / 4 columns; RowMerge gives O rows normalized per split and LSE in log2
/// units, -inf for a split without keys) are dealt round-robin to the cluster's blocks (item i to rank i % Cluster).
/// Every block pushes its partial to the items' other owners: for each item its key groups' weighted slices
/// (RowMerge::cols4) into the owner's receive area (cluster_recv_offset: O [Cluster - 1][cluster_items] float4 at
/// [recv_slot][i / Cluster], LSE [Cluster - 1][TileM] at [recv_slot][r], every row's LSE to every other block), remote
/// stores with no round trip; a block's share of its own items stays in its combine area. One cluster barrier
/// (release / acquire) then makes every block's share visible to its owner, which merges its items' Cluster partials
/// from its own shared memory in two passes (the LSEs' max, then the weighted sum: its own share, then the others' in
/// rank order, the same order for an item on every run, so the same bits). The merged rows go to o and lse, or, with
/// several clusters per row block (to_workspace), to the cluster's workspace slot (O normalized, LSE in log2 units).
/// After the barrier no block touches another's shared memory, so a block leaves as soon as its own items are stored.
/// The caller has passed the cluster barrier once since the kernel began (every block running) before this writes to
/// another block.
template <DType DT, int D, int TileM, int KG, int Threads, int Cluster>
__device__ __forceinline__ void cluster_combine(const DecodeParams& p, const BlockWork& w, float* smem, int recv_offset,
                                                int valid_rows, bool to_workspace) {
  constexpr int LD = combine_ld(D);
  constexpr int kItems = (TileM * D / 4 + Cluster - 1) / Cluster;  // cluster_items: a block's items at most
  const unsigned recv = ptx::smem_u32(smem) + unsigned(recv_offset);
  const unsigned recv_o = recv + (Cluster - 1) * TileM * 4;  // past the LSE slots
  const int rank = int(ptx::cluster_rank());
  const int items = valid_rows * (D / 4);
  // One item of this block's partial: its key groups' weighted slices.
  auto own_share = [&](int it) {
    const int r = it / (D / 4);
    return RowMerge<D, TileM, KG>(smem, r).cols4(smem, r, it % (D / 4));
  };
  // A sender's slot in an owner's receive area: its rank, less one past the owner's own.
  auto recv_slot = [](int sender, int owner) { return sender - (sender > owner ? 1 : 0); };
  for (int it = threadIdx.x; it < items; it += Threads) {
    const int owner = it % Cluster;
    if (owner == rank) continue;
    ptx::st_cluster_f4(
        ptx::cluster_map(recv_o + (recv_slot(rank, owner) * kItems + it / Cluster) * 16, unsigned(owner)),
        own_share(it));
  }
  for (int j = threadIdx.x; j < valid_rows * Cluster; j += Threads) {
    const int r = j / Cluster, owner = j % Cluster;
    if (owner == rank) continue;
    ptx::st_cluster_f32(ptx::cluster_map(recv + (recv_slot(rank, owner) * TileM + r) * 4, unsigned(owner)),
                        RowMerge<D, TileM, KG>(smem, r).lse2);
  }
  ptx::cluster_arrive_release();
  ptx::cluster_wait();                           // every block's share is in its owner's receive area
  const float* lse_in = smem + recv_offset / 4;  // [Cluster - 1][TileM]
  const float4* o_in = reinterpret_cast<const float4*>(lse_in + (Cluster - 1) * TileM);  // [Cluster - 1][kItems]
  for (int k = threadIdx.x; rank + Cluster * k < items; k += Threads) {
    const int it = rank + Cluster * k;
    const int r = it / (D / 4), c4 = it % (D / 4);
    // Two passes, no running rescale: the max M of the Cluster LSEs, then sum_s 2^(lse_s - M) (O_s, 1) over this
    // block's own share (from its combine area) and then the receive slots in rank order; a split whose rows saw no key
    // (LSE -inf) weighs 0.
    const RowMerge<D, TileM, KG> own(smem, r);
    const float l_own = own.lse2;
    float l[Cluster - 1];
    float M = l_own;
#pragma unroll
    for (int s = 0; s < Cluster - 1; ++s) {
      l[s] = lse_in[s * TileM + r];
      M = fmaxf(M, l[s]);
    }
    float sum = 0.f, acc[4] = {0.f, 0.f, 0.f, 0.f};
    auto add = [&](float lse, float4 f) {
      const float wgt = lse == ptx::neg_inf() ? 0.f : ptx::exp2_approx(lse - M);
      sum += wgt;
      acc[0] = fmaf(wgt, f.x, acc[0]), acc[1] = fmaf(wgt, f.y, acc[1]);
      acc[2] = fmaf(wgt, f.z, acc[2]), acc[3] = fmaf(wgt, f.w, acc[3]);
    };
    if (M != ptx::neg_inf()) {
      add(l_own, own.cols4(smem, r, c4));
#pragma unroll
      for (int s = 0; s < Cluster - 1; ++s) add(l[s], o_in[s * kItems + k]);
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[e] *= inv;
    const float lse2 = sum > 0.f ? M + __log2f(sum) : ptx::neg_inf();
    if (to_workspace) {
      const long long slot = partial_group(w, p) * (w.grid_splits / Cluster) + w.split / Cluster;
      __stcg(reinterpret_cast<float4*>(p.partial_o + (slot * TileM + r) * D + c4 * 4),
             make_float4(acc[0], acc[1], acc[2], acc[3]));
      if (c4 == 0) __stcg(p.partial_lse + slot * TileM + r, lse2);
    } else {
      store_cols<DT, 4>(p, w, w.r0 + r, c4 * 4, acc, lse2, c4 == 0);
    }
  }
}
#endif

/// The kernel body; Cluster > 1: the row block's split blocks are one thread-block cluster and merge through
/// distributed shared memory (cluster_combine) instead of the workspace; Wgmma: the products by wgmma, one warpgroup per
/// key group (warpgroup_tile), instead of mma.sync per warp (warp_tile).
template <DType DT, int D, KvLayout Layout, int PageSize, int TileM, int TileN, int Warps, int Stages, int Cluster,
          bool Wgmma>
__device__ __forceinline__ void decode_body(const DecodeParams& p) {
  // ---- preconditions: the family's single validity rule set ----
  constexpr Config kConfig{TileM, TileN, Warps, Stages, 0, Cluster, Wgmma ? 1 : 0};
  static_assert(invalid_reason(DT, D, Layout, kConfig, ArchId{__CUDA_ARCH__ / 10, KT_ARCH_SPECIFIC}) == nullptr,
                "invalid attention_decode variant: see invalid_reason() in decode_config.h");
  static_assert(invalid_page_size(Layout, PageSize) == nullptr,
                "invalid attention_decode page size: see invalid_page_size() in decode_config.h");
  // The cache's pages must be the kernel's (the host checks it too, check_params): another size would address the
  // wrong rows, so the kernel stops instead.
  if (Layout == KvLayout::paged && p.page_size != PageSize) __trap();
  constexpr int kThreads = Warps * 32;
  constexpr int RG = TileM / 16;  // row groups: warp w owns rows [16 (w % RG), + 16)
  constexpr int KG = Warps / RG;  // key groups: warp w owns keys [WK (w / RG), + WK) of every tile
  constexpr int WK = TileN / KG;
  constexpr unsigned kTileBytes = TileN * D * 2;

  const BlockWork w = block_work<TileM, Cluster>(p);
  if (w.splits == 0) return;  // this split (in a cluster: the whole cluster) lies past the end of its sequence
  // Cooperative: the group's generation before this block arrives (split_combine_share), read now, off the path.
  const bool cooperative = Cluster == 1 && p.cooperative && w.splits > 1;
  const unsigned gen0 = cooperative && threadIdx.x == 0 ? ptx::ld_relaxed_gpu(group_generation(p, w)) : 0u;
#if __CUDA_ARCH__ >= 900
  // A block may write another's shared memory only once that block runs: this arrival, and the wait before the
  // cluster merge, guarantee it at no cost (every block has long started by then).
  if constexpr (Cluster > 1) ptx::cluster_arrive_relaxed();
#endif

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const unsigned sQ = ptx::smem_u32(smem_raw);  // [TileM, D] (tile_offset's layouts)
  const unsigned sKV = sQ + TileM * D * 2;      // Stages x ([TileN, D] K, [TileN, D] V)
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4;
  const int rg = warp % RG, kg = warp / RG;

  // Last key rows g and g + 8 of the warp see (inclusive): causal rows stop at their diagonal.
  int row_last[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int pr = w.r0 + rg * 16 + g + 8 * h;
    row_last[h] = p.causal && pr < w.rows ? w.len - p.q_len + pr / w.group : w.len - 1;
  }

  WarpState<D> st;
#pragma unroll
  for (int d = 0; d < D / 8; ++d)
#pragma unroll
    for (int e = 0; e < 4; ++e) st.o[d][e] = 0.f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    st.row_max[h] = ptx::neg_inf();
    st.row_sum[h] = 0.f;
  }
  attn::WsRows<D> wst;  // Wgmma: the warpgroup's state in the wgmma accumulator layout, moved into st afterwards
  if constexpr (Wgmma) wst.clear();

  const int n_tiles = (w.key_end - w.key0 + TileN - 1) / TileN;
  if (n_tiles > 0) {
    KvLoader<Layout, PageSize, D, kThreads, TileN, Stages, Wgmma> loader(p, w.b, w.kvh, tid, w.key0);
    // ---- prologue: Q with tile 0, then tiles 1 .. Stages-2: one cp.async group per tile ----
    load_q<D, TileM, kThreads, Wgmma>(p, w, sQ, tid);
#pragma unroll
    for (int s = 0; s < Stages - 1; ++s) {
      if (s < n_tiles)
        loader.load(sKV + 2 * s * kTileBytes, sKV + (2 * s + 1) * kTileBytes, w.key0 + s * TileN, w.key_end);
      ptx::cp_async_commit();
    }
    unsigned q_frag[D / 16][4];  // A fragments of the warp's 16 rows
    // Keys any row may not see start here: past the block's range, or (causal) past the first token's diagonal.
    const int first_masked = min(w.key_end, p.causal ? w.len - p.q_len + 1 : w.len);

    for (int j = 0; j < n_tiles; ++j) {
      ptx::cp_async_wait<Stages - 2>();  // tile j (and Q) landed; later tiles may be in flight
#if __CUDA_ARCH__ >= 900
      if constexpr (Wgmma) wgmma::fence_proxy_async();  // this thread's copies, visible to wgmma's (async) reads
#endif
      __syncthreads();
      {
        // Prefetch tile j + Stages - 1 into the slot consumed in iteration j - 1 (every warp is past it).
        const int jn = j + Stages - 1;
        const unsigned slot = sKV + 2 * (jn % Stages) * kTileBytes;
        if (jn < n_tiles) loader.load(slot, slot + kTileBytes, w.key0 + jn * TileN, w.key_end);
        ptx::cp_async_commit();
      }
      const int n0 = w.key0 + j * TileN;
      if constexpr (Wgmma) {
#if __CUDA_ARCH__ >= 900
        const unsigned sK = sKV + 2 * (j % Stages) * kTileBytes + kg * WK * 128;  // the key group's rows
        warpgroup_tile<DT, D, WK, TileN>(wst, sQ, sK, sK + kTileBytes, n0 + kg * WK, w.key_end, row_last,
                                         n0 + TileN > first_masked, p.scale_log2);
#endif
      } else {
        if (j == 0) {
          const unsigned q_lane = sQ + swz<D>(rg * 16 + lane % 16, lane / 16) * 2;  // rows, k chunk
#pragma unroll
          for (int ks = 0; ks < D / 16; ++ks)
            ptx::ldmatrix_x4(q_lane ^ (ks * 32), q_frag[ks][0], q_frag[ks][1], q_frag[ks][2], q_frag[ks][3]);
        }
        const unsigned sK = sKV + 2 * (j % Stages) * kTileBytes + kg * WK * D * 2;
        warp_tile<DT, D, WK>(st, q_frag, sK, sK + kTileBytes, n0 + kg * WK, w.key_end, row_last,
                             n0 + TileN > first_masked, p.scale_log2);
      }
    }
  }
  ptx::cp_async_wait<0>();
  __syncthreads();  // the ring and the Q tile are idle: the combine area reuses them
  if constexpr (Wgmma) {
    // The wgmma accumulator layout is the mma.sync one of each warp's 16 rows: o[4 d + 2 h + e] = st.o[d][2 h + e].
#pragma unroll
    for (int d = 0; d < D / 8; ++d)
#pragma unroll
      for (int e = 0; e < 4; ++e) st.o[d][e] = wst.o[4 * d + e];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      st.row_max[h] = wst.row_max[h];
      st.row_sum[h] = wst.row_sum[h];
    }
  }

  float* smem = reinterpret_cast<float*>(smem_raw);
  const int valid_rows = min(TileM, w.rows - w.r0);
  block_merge<D, TileM, KG>(st, smem, p.scale_log2, valid_rows);

#if __CUDA_ARCH__ >= 900
  if constexpr (Cluster > 1) {
    // Several clusters per row block: one workspace partial per cluster; one cluster: it writes o.
    const int grid_clusters = w.grid_splits / Cluster;
    ptx::cluster_wait();  // the arrival at the start: every block of the cluster runs, its receive area may be written
    cluster_combine<DT, D, TileM, KG, kThreads, Cluster>(p, w, smem, cluster_recv_offset(kConfig, D), valid_rows,
                                                         grid_clusters > 1);
    if (grid_clusters > 1)
      count_then_combine<DT, D, TileM, KG, kThreads>(p, w, smem, valid_rows, w.splits / Cluster, grid_clusters);
    return;
  }
#endif
  if (w.splits == 1) {
    for (int it = tid; it < valid_rows * (D / 8); it += kThreads) {
      const int r = it / (D / 8), ch = it % (D / 8);
      const RowMerge<D, TileM, KG> row(smem, r);
      float v[8];
      row.cols8(smem, r, ch, v);
      store_cols<DT, 8>(p, w, w.r0 + r, ch * 8, v, row.lse2, ch == 0);
    }
    return;
  }

  // ---- split: fp32 partial to the workspace, then the last block of the group merges the splits ----
  const long long slot = partial_group(w, p) * w.grid_splits + w.split;
  for (int it = tid; it < valid_rows * (D / 8); it += kThreads) {
    const int r = it / (D / 8), ch = it % (D / 8);
    const RowMerge<D, TileM, KG> row(smem, r);
    float v[8];
    row.cols8(smem, r, ch, v);
    float4* dst = reinterpret_cast<float4*>(p.partial_o + (slot * TileM + r) * D + ch * 8);
    __stcg(dst, make_float4(v[0], v[1], v[2], v[3]));
    __stcg(dst + 1, make_float4(v[4], v[5], v[6], v[7]));
    if (ch == 0) __stcg(p.partial_lse + slot * TileM + r, row.lse2);
  }
  if (cooperative) split_combine_share<DT, D, TileM, kThreads>(p, w, valid_rows, gen0);
  else count_then_combine<DT, D, TileM, KG, kThreads>(p, w, smem, valid_rows, w.splits, w.grid_splits);
}

/// Split-KV decode whose splits merge through the workspace (Config::cluster 1).
template <DType DT, int D, KvLayout Layout, int PageSize, int TileM, int TileN, int Warps, int Stages, bool Wgmma>
__global__ void __launch_bounds__(Warps * 32) attention_decode(const DecodeParams p) {
  decode_body<DT, D, Layout, PageSize, TileM, TileN, Warps, Stages, 1, Wgmma>(p);
}

#if __CUDA_ARCH__ >= 900
/// Split-KV decode whose Cluster split blocks of a row block merge in distributed shared memory (sm_90).
template <DType DT, int D, KvLayout Layout, int PageSize, int TileM, int TileN, int Warps, int Stages, int Cluster,
          bool Wgmma>
__global__ void __cluster_dims__(Cluster, 1, 1) __launch_bounds__(Warps * 32)
    attention_decode_cluster(const DecodeParams p) {
  decode_body<DT, D, Layout, PageSize, TileM, TileN, Warps, Stages, Cluster, Wgmma>(p);
}
#endif

}  // namespace decode
}  // namespace kt
