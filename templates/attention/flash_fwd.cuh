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
#include "common/ptx.cuh"

namespace kt {
namespace attn {

/// Element offset of 16-byte chunk `chunk` of row `row` in a swizzled [rows, D] tile.
template <int D>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
}

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

  // Raster 0: grid (m-blocks, heads, batch); raster 1: grid (heads, batch, m-blocks). Causal blocks are
  // visited heaviest (most keys) first: per (batch, head) in raster 0, across the whole grid in raster 1.
  const int num_m_blocks = Raster == 0 ? gridDim.x : gridDim.z;
  const int m_index = Raster == 0 ? blockIdx.x : blockIdx.z;
  const int m_block = Causal ? num_m_blocks - 1 - m_index : m_index;
  const int head = Raster == 0 ? blockIdx.y : blockIdx.x;
  const int batch = Raster == 0 ? blockIdx.z : blockIdx.y;
  const int kv_head = head / (p.num_heads / p.num_kv_heads);
  const int m0 = m_block * TileM;
  const int shift = p.seqlen_k - p.seqlen_q;  // bottom-right causal alignment

  const unsigned short* q = static_cast<const unsigned short*>(p.q) + batch * p.q_batch_stride + head * p.q_head_stride;
  const unsigned short* k =
      static_cast<const unsigned short*>(p.k) + batch * p.k_batch_stride + kv_head * p.k_head_stride;
  const unsigned short* v =
      static_cast<const unsigned short*>(p.v) + batch * p.v_batch_stride + kv_head * p.v_head_stride;
  unsigned short* o = static_cast<unsigned short*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride;

  // Keys this block needs: all, or (causal) up to the last query row's diagonal.
  int n_keys = p.seqlen_k;
  if (Causal) {
    const int m_end = min(m0 + TileM, p.seqlen_q);
    n_keys = min(p.seqlen_k, m_end + shift);
  }
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
    for (int s = 0; s < Stages - 1; ++s) {
      if (s < n_tiles) {
        k_loader.load(sKV_addr + 2 * s * kTileBytes, s * TileN, p.seqlen_k);
        ptx::cp_async_commit();
        v_loader.load(sKV_addr + (2 * s + 1) * kTileBytes, s * TileN, p.seqlen_k);
        ptx::cp_async_commit();
      } else {
        ptx::cp_async_commit();
        ptx::cp_async_commit();
      }
    }

    unsigned q_frag[kQInRegs ? KS : 1][4];  // A fragments of this warp's 16 rows (MF == 1 only)
    const int warp_row0 = warp * MF * 16;

    for (int j = 0; j < n_tiles; ++j) {
      const int slot = Stages == 1 ? 0 : j % Stages;
      const unsigned sK = sKV_addr + 2 * slot * kTileBytes;
      const unsigned sV = sK + kTileBytes;
      const int n0 = j * TileN;

      if (Stages == 1) {
        k_loader.load(sK, n0, p.seqlen_k);
        ptx::cp_async_commit();
        v_loader.load(sV, n0, p.seqlen_k);
        ptx::cp_async_commit();
        ptx::cp_async_wait<1>();  // K_j (and Q) landed; V_j may be in flight
      } else {
        ptx::cp_async_wait<2 * (Stages - 2)>();  // K_j and V_j landed; later tiles may be in flight
      }
      __syncthreads();
      if (Stages > 1) {
        // Prefetch tile j + Stages - 1 into the slot consumed in iteration j - 1 (all warps are past it).
        const int jn = j + Stages - 1;
        const unsigned sKn = sKV_addr + 2 * (jn % Stages) * kTileBytes;
        if (jn < n_tiles) {
          k_loader.load(sKn, jn * TileN, p.seqlen_k);
          ptx::cp_async_commit();
          v_loader.load(sKn + kTileBytes, jn * TileN, p.seqlen_k);
          ptx::cp_async_commit();
        } else {
          ptx::cp_async_commit();
          ptx::cp_async_commit();
        }
      }
      if (kQInRegs && j == 0) {
#pragma unroll
        for (int ks = 0; ks < KS; ++ks)
          ptx::ldmatrix_x4((sQ_addr + q_lane) ^ (ks * 32), q_frag[ks][0], q_frag[ks][1], q_frag[ks][2], q_frag[ks][3]);
      }

      // ---- S = Q K^T : [16*MF, TileN] per warp ----
      float acc_s[MF][NT][4];
#pragma unroll
      for (int mf = 0; mf < MF; ++mf)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc_s[mf][n][e] = 0.f;
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        unsigned a[MF][4];
#pragma unroll
        for (int mf = 0; mf < MF; ++mf) {
          if (kQInRegs) {
#pragma unroll
            for (int e = 0; e < 4; ++e) a[mf][e] = q_frag[kQInRegs ? ks : 0][e];
          } else {
            ptx::ldmatrix_x4(((sQ_addr + q_lane) ^ (ks * 32)) + mf * 16 * D * 2, a[mf][0], a[mf][1], a[mf][2],
                             a[mf][3]);
          }
        }
        const unsigned k_ks = (sK + k_lane) ^ (ks * 32);
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

      // ---- mask: keys past seqlen_k, and (causal) keys right of each row's diagonal ----
      const bool need_mask = n0 + TileN > p.seqlen_k || (Causal && n0 + TileN - 1 > m0 + shift);
      if (need_mask) {
#pragma unroll
        for (int mf = 0; mf < MF; ++mf)
#pragma unroll
          for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int row = m0 + warp_row0 + mf * 16 + g + (e / 2) * 8;
              const int col = n0 + n * 8 + 2 * t + (e % 2);
              const bool masked = col >= p.seqlen_k || (Causal && col > row + shift);
              if (masked) acc_s[mf][n][e] = ptx::neg_inf();
            }
      }

      // ---- online softmax (rows g and g+8 of each fragment; a row is spread over a quad of lanes) ----
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
          const float base = mx == ptx::neg_inf() ? 0.f : mx * p.scale_log2;
          const float prev = row_max[mf][h] == ptx::neg_inf() ? ptx::neg_inf() : row_max[mf][h] * p.scale_log2;
          const float corr = ptx::exp2_approx(prev - base);
          row_max[mf][h] = mx;
          float sum = 0.f;
#pragma unroll
          for (int n = 0; n < NT; ++n) {
            acc_s[mf][n][2 * h] = ptx::exp2_approx(fmaf(acc_s[mf][n][2 * h], p.scale_log2, -base));
            acc_s[mf][n][2 * h + 1] = ptx::exp2_approx(fmaf(acc_s[mf][n][2 * h + 1], p.scale_log2, -base));
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

      if (Stages == 1) {
        ptx::cp_async_wait<0>();  // V_j landed
        __syncthreads();
      }

      // ---- O += P V : P from registers (score accumulator layout == A fragment layout) ----
#pragma unroll
      for (int kk = 0; kk < TileN / 16; ++kk) {
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
          ptx::ldmatrix_x4_trans(((sV + v_lane) ^ (dp * 32)) + kk * 16 * D * 2, b0, b1, b2, b3);
#pragma unroll
          for (int mf = 0; mf < MF; ++mf) {
            ptx::mma_16816<DT>(acc_o[mf][2 * dp], pa[mf], b0, b1);
            ptx::mma_16816<DT>(acc_o[mf][2 * dp + 1], pa[mf], b2, b3);
          }
        }
      }
      if (Stages == 1) __syncthreads();  // the single K/V buffer is refilled next iteration
    }
  }

  // ---- epilogue: O / l -> dtype, staged through this warp's own rows of the Q tile ----
  // Shared-memory hazards of the staging (compute-sanitizer racecheck), one by one:
  //  - Other warps: none. Each warp reads (ldmatrix of Q fragments) and writes (staging) only its own rows
  //    [warp_row0, warp_row0 + 16 MF) of sQ; the cp.async writes of the Q tile by every thread completed before the
  //    first iteration's __syncthreads, and the K/V ring is not touched here.
  //  - Lanes of this warp: lane L's ldmatrix reads rows whose bytes lane M overwrites below. ldmatrix is warp-
  //    collective, so the read is done when any lane passes it, but only a barrier orders the lanes' shared-memory
  //    accesses in the memory model: without this __syncwarp a block with one K/V tile (no __syncthreads after the
  //    Q fragments are read; the first blocks of a causal problem) or with MF > 1 (Q read from shared memory in the
  //    last iteration) is a write-after-read hazard between lanes, which racecheck reports.
  __syncwarp();
  const int warp_row0 = warp * MF * 16;
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
      for (int d = 0; d < DT8; ++d) {
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

}  // namespace attn
}  // namespace kt
