// Flash-attention forward (prefill), FlashAttention-2 algorithm (Dao, "FlashAttention-2: Faster
// Attention with Better Parallelism and Work Partitioning", 2023, Algorithm 1): tiled Q K^T on tensor
// cores, online softmax in fp32 with exp2, O accumulated in registers, O(S) memory.
//
// Mainloop kMmaSync: mma.sync.m16n8k16 (fp16/bf16 in, fp32 accumulate) fed by ldmatrix from shared
// memory; K/V tiles stream through a ring of `Stages` buffers filled by cp.async. Shared-memory rows are
// XOR-swizzled in 16-byte chunks (chunk ^ (row % 8)) so that ldmatrix and cp.async are bank-conflict free.
//
// One thread block computes tile_m query rows of one (batch, query head); each warp owns
// tile_m / warps rows (16 or 32: one or two m16 fragments). Causal blocks are scheduled heaviest first.
// Layouts, strides and GQA mapping: FwdParams in attention_config.h.
#pragma once
#include "attention/attention_config.h"
#include "attention/block_order.cuh"
#include "common/ptx.cuh"
#include "common/swizzle.cuh"

namespace kt {
namespace attn {

/// Per-thread part of a cp.async tile loader for [Rows, D] tiles of one tensor: each thread moves
/// 16-byte chunk `ch` of rows r, r + kRowsPerPass, ... (kRowsPerPass is a multiple of 8, so the swizzle
/// term is the same for all of a thread's chunks). Rows at or past row_limit are zero-filled.
template <int Rows, int D, int Threads>
struct TileLoader {
  static constexpr int kChunksPerRow = D / 8;
  static constexpr int kRowsPerPass = Threads / kChunksPerRow;
  static_assert(Threads % kChunksPerRow == 0 && kRowsPerPass % 8 == 0 && Rows % kRowsPerPass == 0,
                "tile chunks must divide evenly over the threads");
  const unsigned short* src;  // this thread's chunk in row 0 of the tensor
  long long row_stride;
  unsigned dst_off;  // byte offset of this thread's first chunk in a tile
  int r;

  __device__ __forceinline__ TileLoader(const unsigned short* base, long long stride, int tid)
      : src(base + (long long)(tid / kChunksPerRow) * stride + (tid % kChunksPerRow) * 8),
        row_stride(stride),
        dst_off(swz<D>(tid / kChunksPerRow, tid % kChunksPerRow) * 2),
        r(tid / kChunksPerRow) {}

  /// Loads rows [row0, row0 + Rows) into the tile at shared address smem_tile.
  __device__ __forceinline__ void load(unsigned smem_tile, int row0, int row_limit) const {
    const unsigned short* s0 = src + (long long)row0 * row_stride;
#pragma unroll
    for (int i = 0; i < Rows / kRowsPerPass; ++i) {
      const bool in = row0 + r + i * kRowsPerPass < row_limit;
      ptx::cp_async_16(smem_tile + dst_off + i * kRowsPerPass * D * 2, in ? s0 + i * kRowsPerPass * row_stride : src,
                       in ? 16u : 0u);
    }
  }
};

/// Issues the cp.async copies of K and V tile `tile` into the ring slot at shared address `slot_addr` (K, then V
/// one tile further) as two commit groups; past the last tile it commits two empty groups, so that the
/// wait counts of the pipeline stay the same in every iteration.
template <int TileN, int D, int Threads>
__device__ __forceinline__ void load_kv_tile(const TileLoader<TileN, D, Threads>& k_loader,
                                             const TileLoader<TileN, D, Threads>& v_loader, unsigned slot_addr,
                                             int tile, int n_tiles, int seqlen_k) {
  if (tile < n_tiles) {
    k_loader.load(slot_addr, tile * TileN, seqlen_k);
    ptx::cp_async_commit();
    v_loader.load(slot_addr + TileN * D * 2, tile * TileN, seqlen_k);
    ptx::cp_async_commit();
  } else {
    ptx::cp_async_commit();
    ptx::cp_async_commit();
  }
}

/// S = Q K^T for one warp: acc_s [MF m16 fragments][NT n8 tiles][4] (fp32, mma.sync C layout) over the
/// [TileN, D] K tile at swizzled shared address sK. Q comes from q_frag (MF == 1: the A fragments of all
/// D / 16 k-steps, loaded once) or from the swizzled Q tile (q_addr = this lane's ldmatrix address).
template <DType DT, int D, int MF, int NT, bool QInRegs, int QK>
__device__ __forceinline__ void scores_qk(float (&acc_s)[MF][NT][4], const unsigned (&q_frag)[QK][4], unsigned q_addr,
                                          unsigned k_addr) {
#pragma unroll
  for (int mf = 0; mf < MF; ++mf)
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_s[mf][n][e] = 0.f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    unsigned a[MF][4];
#pragma unroll
    for (int mf = 0; mf < MF; ++mf) {
      if (QInRegs) {
#pragma unroll
        for (int e = 0; e < 4; ++e) a[mf][e] = q_frag[QInRegs ? ks : 0][e];
      } else {
        ptx::ldmatrix_x4((q_addr ^ (ks * 32)) + mf * 16 * D * 2, a[mf][0], a[mf][1], a[mf][2], a[mf][3]);
      }
    }
    const unsigned k_ks = k_addr ^ (ks * 32);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      unsigned b0, b1, b2, b3;  // keys [16np, 16np+8) and [16np+8, 16np+16), d [16ks, 16ks+16)
      ptx::ldmatrix_x4(k_ks + np * 16 * D * 2, b0, b1, b2, b3);
#pragma unroll
      for (int mf = 0; mf < MF; ++mf) {
        ptx::mma_16816<DT>(acc_s[mf][2 * np], a[mf], b0, b1);
        ptx::mma_16816<DT>(acc_s[mf][2 * np + 1], a[mf], b2, b3);
      }
    }
  }
}

/// Sets to -inf the scores of keys at or past seqlen_k and (causal) of keys right of a row's bottom-right aligned
/// diagonal (key > query + shift). row0: query row of the warp's first fragment row; n0: the tile's first key;
/// g, t: the lane's row and column pair in the mma C layout.
template <bool Causal, int MF, int NT>
__device__ __forceinline__ void mask_scores(float (&acc_s)[MF][NT][4], int row0, int n0, int seqlen_k, int shift, int g,
                                            int t) {
#pragma unroll
  for (int mf = 0; mf < MF; ++mf)
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = row0 + mf * 16 + g + (e / 2) * 8;
        const int col = n0 + n * 8 + 2 * t + (e % 2);
        const bool masked = col >= seqlen_k || (Causal && col > row + shift);
        if (masked) acc_s[mf][n][e] = ptx::neg_inf();
      }
}

/// Online softmax step (FlashAttention-2, Algorithm 1, lines 8-10) for rows g and g + 8 of each fragment, a row
/// being spread over a quad of lanes: updates the raw-score row maxima, turns acc_s into
/// P = exp2(S * scale_log2 - max * scale_log2), adds P's thread-partial row sums to row_sum and rescales acc_o
/// [MF][DT8][4] by exp2(old max - new max).
template <int MF, int NT, int DT8>
__device__ __forceinline__ void online_softmax(float (&acc_s)[MF][NT][4], float (&acc_o)[MF][DT8][4],
                                               float (&row_max)[MF][2], float (&row_sum)[MF][2], float scale_log2) {
#pragma unroll
  for (int mf = 0; mf < MF; ++mf) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = row_max[mf][h];
#pragma unroll
      for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(acc_s[mf][n][2 * h], acc_s[mf][n][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      // Scaled maxima; a row with no visible key yet keeps max -inf and uses 0 as the base.
      const float base = mx == ptx::neg_inf() ? 0.f : mx * scale_log2;
      const float prev = row_max[mf][h] == ptx::neg_inf() ? ptx::neg_inf() : row_max[mf][h] * scale_log2;
      const float corr = ptx::exp2_approx(prev - base);
      row_max[mf][h] = mx;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        acc_s[mf][n][2 * h] = ptx::exp2_approx(fmaf(acc_s[mf][n][2 * h], scale_log2, -base));
        acc_s[mf][n][2 * h + 1] = ptx::exp2_approx(fmaf(acc_s[mf][n][2 * h + 1], scale_log2, -base));
        sum += acc_s[mf][n][2 * h] + acc_s[mf][n][2 * h + 1];
      }
      row_sum[mf][h] = row_sum[mf][h] * corr + sum;
#pragma unroll
      for (int d = 0; d < DT8; ++d) {
        acc_o[mf][d][2 * h] *= corr;
        acc_o[mf][d][2 * h + 1] *= corr;
      }
    }
  }
}

/// O += P V for one warp: P from registers (the score accumulator layout equals the A fragment layout once packed
/// to 16 bits), V [TileN, D] from the swizzled tile through ldmatrix.trans (v_addr = this lane's address).
template <DType DT, int D, int MF, int NT>
__device__ __forceinline__ void accumulate_pv(float (&acc_o)[MF][D / 8][4], const float (&acc_s)[MF][NT][4],
                                              unsigned v_addr) {
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    unsigned pa[MF][4];
#pragma unroll
    for (int mf = 0; mf < MF; ++mf) {
      pa[mf][0] = ptx::pack2<DT>(acc_s[mf][2 * kk][0], acc_s[mf][2 * kk][1]);
      pa[mf][1] = ptx::pack2<DT>(acc_s[mf][2 * kk][2], acc_s[mf][2 * kk][3]);
      pa[mf][2] = ptx::pack2<DT>(acc_s[mf][2 * kk + 1][0], acc_s[mf][2 * kk + 1][1]);
      pa[mf][3] = ptx::pack2<DT>(acc_s[mf][2 * kk + 1][2], acc_s[mf][2 * kk + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      unsigned b0, b1, b2, b3;  // keys [16kk, 16kk+16), d [16dp, 16dp+8) and [16dp+8, 16dp+16)
      ptx::ldmatrix_x4_trans((v_addr ^ (dp * 32)) + kk * 16 * D * 2, b0, b1, b2, b3);
#pragma unroll
      for (int mf = 0; mf < MF; ++mf) {
        ptx::mma_16816<DT>(acc_o[mf][2 * dp], pa[mf], b0, b1);
        ptx::mma_16816<DT>(acc_o[mf][2 * dp + 1], pa[mf], b2, b3);
      }
    }
  }
}

/// Epilogue of one warp: O / l in the output dtype, staged through the warp's own rows [warp_row0,
/// warp_row0 + 16 MF) of the swizzled Q tile sQ and stored as whole 16-byte chunks of rows below seqlen_q; the
/// LSE (natural log) of each valid row when p.lse is set (-inf for a row that saw no key).
///
/// Shared-memory hazards of the staging (compute-sanitizer racecheck), one by one:
///  - Other warps: none. Each warp reads (ldmatrix of Q fragments) and writes (staging) only its own rows of sQ;
///    the cp.async writes of the Q tile by every thread completed before the first iteration's __syncthreads,
///    and the K/V ring is not touched here.
///  - Lanes of this warp: lane L's ldmatrix reads rows whose bytes lane M overwrites below. ldmatrix is warp-
///    collective, so the read is done when any lane passes it, but only a barrier orders the lanes' shared-memory
///    accesses in the memory model: without the first __syncwarp a block with one K/V tile (no __syncthreads
///    after the Q fragments are read; the first blocks of a causal problem) or with MF > 1 (Q read from shared
///    memory in the last iteration) is a write-after-read hazard between lanes, which racecheck reports.
template <DType DT, int D, int MF>
__device__ __forceinline__ void store_output(const FwdParams& p, const float (&acc_o)[MF][D / 8][4],
                                             const float (&row_max)[MF][2], const float (&row_sum)[MF][2],
                                             unsigned short* sQ, unsigned short* o, int batch, int head, int m0,
                                             int warp_row0, int lane) {
  const int g = lane / 4, t = lane % 4;
  __syncwarp();
#pragma unroll
  for (int mf = 0; mf < MF; ++mf)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = row_sum[mf][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const int r = warp_row0 + mf * 16 + g + 8 * h;
#pragma unroll
      for (int d = 0; d < D / 8; ++d) {
        const unsigned packed = ptx::pack2<DT>(acc_o[mf][d][2 * h] * inv, acc_o[mf][d][2 * h + 1] * inv);
        *reinterpret_cast<unsigned*>(sQ + swz<D>(r, d) + 2 * t) = packed;
      }
      if (p.lse != nullptr && t == 0 && m0 + r < p.seqlen_q) {
        const float lse = l > 0.f ? (row_max[mf][h] * p.scale_log2 + __log2f(l)) * 0.6931471805599453f : ptx::neg_inf();
        p.lse[((long long)batch * p.num_heads + head) * p.seqlen_q + m0 + r] = lse;
      }
    }
  __syncwarp();  // the lanes' staged pieces are visible to the lanes that store their rows below
  constexpr int kWarpChunks = MF * 16 * (D / 8);
#pragma unroll
  for (int i = 0; i < kWarpChunks / 32; ++i) {
    const int c = lane + i * 32;
    const int r = warp_row0 + c / (D / 8);
    const int ch = c % (D / 8);
    if (m0 + r < p.seqlen_q) {
      const uint4 val = *reinterpret_cast<const uint4*>(sQ + swz<D>(r, ch));
      *reinterpret_cast<uint4*>(o + (long long)(m0 + r) * p.o_row_stride + ch * 8) = val;
    }
  }
}

template <DType DT, int D, bool Causal, int TileM, int TileN, int Warps, int Stages, int MainloopId, int Raster>
__global__ void __launch_bounds__(Warps * 32) flash_fwd(const FwdParams p) {
  // ---- preconditions: the family's single validity rule set ----
  static_assert(invalid_reason(DT, D, Causal, Config{TileM, TileN, Warps, Stages, MainloopId, Raster},
                               ArchId{__CUDA_ARCH__ / 10, KT_ARCH_SPECIFIC}) == nullptr,
                "invalid attention_prefill variant: see invalid_reason() in attention_config.h");
  constexpr int kThreads = Warps * 32;
  constexpr int MF = TileM / (16 * Warps);  // m16 fragments per warp
  constexpr int NT = TileN / 8;             // n8 tiles of the score block
  constexpr int DT8 = D / 8;                // n8 tiles of the output
  constexpr int KS = D / 16;                // k16 steps of Q K^T
  constexpr bool kQInRegs = MF == 1;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned short* sQ = reinterpret_cast<unsigned short*>(smem_raw);  // [TileM, D] swizzled
  const unsigned sQ_addr = ptx::smem_u32(sQ);
  const unsigned sKV_addr = sQ_addr + TileM * D * 2;  // Stages x ([TileN, D] K, [TileN, D] V)
  constexpr unsigned kTileBytes = TileN * D * 2;

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane / 4;  // row within an m16 fragment (and +8)
  const int t = lane % 4;  // column pair within an n8 tile
  // ldmatrix addressing. Every tile starts on a 256-byte boundary (1024-aligned base, tiles of a multiple of
  // 256 bytes), and chunk 2*s + b of row r sits at chunk (2*s) ^ (b ^ r % 8): so the address for k-step s is
  // the lane's base address XOR (s * 32), and further 16-row steps are plain additive offsets.
  const unsigned q_lane = swz<D>(warp * MF * 16 + lane % 16, lane / 16) * 2;       // A: rows, k chunk
  const unsigned k_lane = swz<D>(lane % 8 + (lane / 16) * 8, (lane / 8) % 2) * 2;  // B: keys, d chunk
  const unsigned v_lane = swz<D>(lane % 8 + ((lane / 8) % 2) * 8, lane / 16) * 2;  // B^T: keys, d chunk

  const BlockTile tile = block_tile<Causal, Raster>();
  const int m_block = tile.m_block, head = tile.head, batch = tile.batch;
  const int kv_head = head / (p.num_heads / p.num_kv_heads);
  const int m0 = m_block * TileM;
  const int shift = p.seqlen_k - p.seqlen_q;  // bottom-right causal alignment
  const int warp_row0 = warp * MF * 16;

  const unsigned short* q = static_cast<const unsigned short*>(p.q) + batch * p.q_batch_stride + head * p.q_head_stride;
  const unsigned short* k =
      static_cast<const unsigned short*>(p.k) + batch * p.k_batch_stride + kv_head * p.k_head_stride;
  const unsigned short* v =
      static_cast<const unsigned short*>(p.v) + batch * p.v_batch_stride + kv_head * p.v_head_stride;
  unsigned short* o = static_cast<unsigned short*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride;

  const int n_keys = keys_needed<Causal>(p, m0, TileM);
  const int n_tiles = n_keys > 0 ? (n_keys + TileN - 1) / TileN : 0;

  float acc_o[MF][DT8][4];  // [16 rows x D] per m-fragment
#pragma unroll
  for (int mf = 0; mf < MF; ++mf)
#pragma unroll
    for (int j = 0; j < DT8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mf][j][e] = 0.f;
  float row_max[MF][2], row_sum[MF][2];  // raw-score max, and thread-partial sums of exp2
#pragma unroll
  for (int mf = 0; mf < MF; ++mf)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_max[mf][h] = ptx::neg_inf();
      row_sum[mf][h] = 0.f;
    }

  if (n_tiles > 0) {
    const TileLoader<TileN, D, kThreads> k_loader(k, p.k_row_stride, tid), v_loader(v, p.v_row_stride, tid);
    // ---- prologue: Q, then K/V tiles 0 .. Stages-2 ----
    TileLoader<TileM, D, kThreads>(q, p.q_row_stride, tid).load(sQ_addr, m0, p.seqlen_q);
    ptx::cp_async_commit();
#pragma unroll
    for (int s = 0; s < Stages - 1; ++s)
      load_kv_tile(k_loader, v_loader, sKV_addr + 2 * s * kTileBytes, s, n_tiles, p.seqlen_k);

    unsigned q_frag[kQInRegs ? KS : 1][4];  // A fragments of this warp's 16 rows (MF == 1 only)

    for (int j = 0; j < n_tiles; ++j) {
      const int slot = Stages == 1 ? 0 : j % Stages;
      const unsigned sK = sKV_addr + 2 * slot * kTileBytes;
      const unsigned sV = sK + kTileBytes;
      const int n0 = j * TileN;

      if (Stages == 1) {
        load_kv_tile(k_loader, v_loader, sK, j, n_tiles, p.seqlen_k);
        ptx::cp_async_wait<1>();  // K_j (and Q) landed; V_j may be in flight
      } else {
        ptx::cp_async_wait<2 * (Stages - 2)>();  // K_j and V_j landed; later tiles may be in flight
      }
      __syncthreads();
      if (Stages > 1) {
        // Prefetch tile j + Stages - 1 into the slot consumed in iteration j - 1 (all warps are past it).
        const int jn = j + Stages - 1;
        load_kv_tile(k_loader, v_loader, sKV_addr + 2 * (jn % Stages) * kTileBytes, jn, n_tiles, p.seqlen_k);
      }
      if (kQInRegs && j == 0) {
#pragma unroll
        for (int ks = 0; ks < KS; ++ks)
          ptx::ldmatrix_x4((sQ_addr + q_lane) ^ (ks * 32), q_frag[ks][0], q_frag[ks][1], q_frag[ks][2], q_frag[ks][3]);
      }

      float acc_s[MF][NT][4];  // S = Q K^T : [16*MF, TileN] per warp
      scores_qk<DT, D, MF, NT, kQInRegs>(acc_s, q_frag, sQ_addr + q_lane, sK + k_lane);
      if (n0 + TileN > p.seqlen_k || (Causal && n0 + TileN - 1 > m0 + shift))
        mask_scores<Causal>(acc_s, m0 + warp_row0, n0, p.seqlen_k, shift, g, t);
      online_softmax(acc_s, acc_o, row_max, row_sum, p.scale_log2);

      if (Stages == 1) {
        ptx::cp_async_wait<0>();  // V_j landed
        __syncthreads();
      }
      accumulate_pv<DT, D>(acc_o, acc_s, sV + v_lane);
      if (Stages == 1) __syncthreads();  // the single K/V buffer is refilled next iteration
    }
  }

  store_output<DT, D>(p, acc_o, row_max, row_sum, sQ, o, batch, head, m0, warp_row0, lane);
}

}  // namespace attn
}  // namespace kt
