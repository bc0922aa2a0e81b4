// Fused Q/K/V projection, weight-streaming mainloop for decode-sized M ("gemv", Config::mainloop = Mainloop::gemv).
//
// At small M the projection is bound by reading the packed weight once (8-9 MB for Qwen2.5-7B in 4-bit), and by
// latency: every serialized round trip to memory (a K step that waits for the previous one, a split-K partial
// written, fenced and re-read) costs about a microsecond against a 3 us weight-read floor. This kernel has one
// round trip to HBM per warp, one block barrier, and no global workspace:
//
//   Swap-AB mma.sync m16n8k16: the weight is the A operand (16 output features per m16 tile), the tokens are the
//   B operand's n8 columns: Y^T[n, m] = sum_k W[n, k] X[m, k].
//
//   RoPE-paired rows: m16 tile T of head h holds features h*D + j0 + g (rows g = 0..7) and h*D + D/2 + j0 + g
//   (rows g + 8), j0 = 8 * (T mod D/16). The rotate-half partners (i, i + D/2) of a head therefore sit in one
//   thread's accumulators (c0/c1 and c2/c3 of the C fragment), and the whole epilogue (bias, RoPE, the split into
//   Q/K/V) runs in registers.
//
//   K order is free inside a dot product, so each lane of an mma quad (q = lane % 4) reads one contiguous 16-byte
//   unit of packed weight per row and step (32 4-bit / 16 int8 / 8 16-bit elements at k = step * tile_k + q *
//   unit) and uses it as its own A-fragment elements: mma u of the unit takes physical elements 4u..4u+3 as the
//   fragment's logical k {2q, 2q+1, 2q+8, 2q+9}. Its B fragment is read from X at the same physical k (lane g =
//   lane / 4 is the token), so A and B agree on every k. Coalesced 64-byte row segments per quad, no shuffles.
//
//   warps_m warps split K inside the block (each keeps `Prefetch` steps of weight and X in flight in a register
//   ring, so with prefetch >= its steps a warp issues all its loads at once); their partial sums meet in shared memory
//   after the single barrier, and the warps of K slice 0 finish the tile. warps_n warps side by side each own
//   tile_n / warps_n / 16 m16 tiles. Bias, positions and RoPE frequencies are loaded before the mainloop.
//
// Dequantization: decode_chunk2 (qkv_gemv_decode.cuh; quant_format.h's value rules in 16-bit-pair arithmetic; int4 and int8 give the
// same operand values as the tiled mainloop's fp32 decode_chunk, the table formats round the code value and the scale
// to the operand dtype first). RoPE: Su et al., RoFormer (2021), rotate-half
// pairing (i, i + D/2) of Llama/Qwen, angle = pos * theta^(-2i/D) reduced mod 2 pi in fixed point (rope_sincos).
//
// Pieces: qkv_gemv_decode.cuh (the per-element decode), qkv_gemv_load.cuh (one load piece per strategy),
// qkv_gemv_reduce.cuh (the K reductions none / cluster / balanced_tail and the register epilogue); here the block's
// place and K slice (gemv_block_slice), a step's operands (gemv_step_operands) and its decode + mma
// (gemv_step_chunks), gemv_body, which strings them together, and the kernels.
#pragma once
#include "qkv_proj/qkv_gemv_decode.cuh"
#include "qkv_proj/qkv_gemv_load.cuh"
#include "qkv_proj/qkv_gemv_reduce.cuh"
#include "qkv_proj/qkv_gemv_trace.cuh"
#include "qkv_proj/qkv_proj.cuh"

namespace kt {
namespace qkv {

// Scale entries: the stages-0 register ring keeps each unit's raw bits (FormatTraits<F>::global_bits) and converts
// them only where a step uses them (unit_scales): a conversion right after a global load (branching on the loaded
// byte, as e8m0_to_float does) held the ring's next loads behind the scale's DRAM round trip. Stages 1-3 read the raw
// bits from the rows' scales in shared memory (FormatTraits<F>::smem_bits).

/// One warp step of the gemv mainloop after its data is in registers: per chunk of the unit (4 dtype pairs = 2 mma
/// k16 steps), decode both rows (g, g + 8) of every m16 tile and multiply with the matching X words (permuted formats:
/// X pairs (j, j + 4), as the weight pairs) into acc2[chunk parity], or for int4 (kScaleStep) into the step's partial
/// sums ps. Fast: decode_chunk2 (16-bit-pair arithmetic); else decode_chunk (fp32, for a step with a unit whose scale the
/// dtype cannot hold). The caller picks one per step (a warp-uniform branch): with the test per unit inside the chunk
/// loop, the step was 8 blocks of 4 table loads each, which ptxas did not interleave.
/// w / s2 / s: [R tiles][rows g, g + 8] units and scales; x: [NT token tiles][chunks] X words of the step.
template <DType DT, quant::Format F, bool Fast, int R, int NT, int Chunks, int PS, class Tab>
__device__ __forceinline__ void gemv_step_chunks(const uint4 (&w)[R][2], const UnitScales2 (&s2)[R][2],
                                                 const UnitScales (&s)[R][2], const float* s_lut, const Tab& tab,
                                                 const uint4 (&x)[NT][Chunks], float (&acc2)[2][R][NT][4],
                                                 float (&ps)[PS][R][NT][4]) {
  constexpr bool kStepSums = gemv_scale_mode(F) == kScaleStep;
#pragma unroll
  for (int c = 0; c < Chunks; ++c) {
    unsigned wa[R][2][4];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (Fast) decode_chunk2<DT, F>(w[r][h], s2[r][h], tab, c, wa[r][h]);
        else decode_chunk<DT, F>(w[r][h], s[r][h], s_lut, c, wa[r][h]);
      }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const uint4 xv = x[t][c];
      unsigned b[4] = {xv.x, xv.y, xv.z, xv.w};
      if (gemv_permuted_x(F)) {  // (x0 x1, x2 x3, x4 x5, x6 x7) -> (x0 x4, x1 x5, x2 x6, x3 x7)
        b[0] = ptx::prmt(xv.x, xv.z, 0x5410u);
        b[1] = ptx::prmt(xv.x, xv.z, 0x7632u);
        b[2] = ptx::prmt(xv.y, xv.w, 0x5410u);
        b[3] = ptx::prmt(xv.y, xv.w, 0x7632u);
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const unsigned a0[4] = {wa[r][0][0], wa[r][1][0], wa[r][0][1], wa[r][1][1]};
        const unsigned a1[4] = {wa[r][0][2], wa[r][1][2], wa[r][0][3], wa[r][1][3]};
        float(&d)[4] = kStepSums ? ps[kStepSums ? c % 2 : 0][r][t] : acc2[c % 2][r][t];
        ptx::mma_16816<DT>(d, a0, b[0], b[1]);
        ptx::mma_16816<DT>(d, a1, b[2], b[3]);
      }
    }
  }
}

/// kScaleStep (int4): folds a step's partial sums ps (by chunk parity, one group per row) into acc, scaled by the
/// step's unit scales. C fragment: e 0, 1 -> row g (scale of h = 0), e 2, 3 -> row g + 8 (h = 1).
template <int PS, int R, int NT>
__device__ __forceinline__ void gemv_fold_step_sums(const float (&ps)[PS][R][NT][4], const UnitScales (&sreg)[R][2],
                                                    float (&acc)[R][NT][4]) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[r][t][e] = fmaf(ps[0][r][t][e] + ps[PS - 1][r][t][e], sreg[r][e / 2].s0, acc[r][t][e]);
}

/// A block's rows and K range and a warp's K steps (gemv_block_slice).
struct GemvSlice {
  int bx, by;          ///< the rows' block index, the token tile
  int rank, kparts;    ///< the block's K part (cluster rank; Balance: its piece) of kparts
  int m0;              ///< first token
  int s_begin, s_end;  ///< the warp's K steps
  int r_begin, r_end;  ///< the block's K steps (those of its rows in shared memory, bulk_rows)
  int kb0;             ///< byte of a row where step r_begin starts
};

/// The block's place and the K steps of warp row wk. Block order: the hardware issues blocks in linear order (x
/// fastest); remap it so that the token tiles of one set of rows are neighbours (token tile fastest): blocks sharing
/// weight rows run together and the weight is read from HBM once, the other token tiles hitting L2. A cluster is
/// Cluster consecutive x-blocks (ranks): bx = blockIdx.x / Cluster, the token tile is blockIdx.y. Balance: a 1-D grid;
/// block v < gemv_full is unit v, the next ones are pieces (unit, piece) of the tail units; unit u = (rows bx = u /
/// token tiles, token tile by = u % token tiles), token tile fastest as above. (The pieces come last: the hardware then
/// puts the whole units 2 per SM and a piece beside them on most SMs; pieces first left 3 whole units on some SMs.)
/// K: the block's share is part kpart of kparts (cluster rank of Cluster; Balance: piece of pieces; else 0 of 1), the
/// warp's slice kpart * WarpsK + wk of kparts * WarpsK (Balance: a warp may get none).
template <int TileM, int WarpsK, int Cluster, bool Balance, int kStepK, int kBits>
__device__ __forceinline__ GemvSlice gemv_block_slice(const QkvParams& p, int wk) {
  GemvSlice o;
  const int lin = blockIdx.y * gridDim.x + blockIdx.x;
  const int token_tiles = Balance ? (p.m + TileM - 1) / TileM : int(gridDim.y);
  int unit = lin, piece = 0, pieces = 1;  // Balance: this block's unit and its K piece
  if (Balance && lin >= p.gemv_full) {
    unit = p.gemv_full + (lin - p.gemv_full) / p.gemv_split;
    piece = (lin - p.gemv_full) % p.gemv_split;
    pieces = p.gemv_split;
  }
  o.bx = Cluster > 1 ? blockIdx.x / Cluster : Balance ? unit / token_tiles : lin / gridDim.y;
  o.by = Cluster > 1 ? blockIdx.y : Balance ? unit % token_tiles : lin % gridDim.y;
#if __CUDA_ARCH__ >= 900
  o.rank = Cluster > 1 ? int(ptx::cluster_rank()) : 0;
#else
  o.rank = 0;
#endif
  const int kpart = Cluster > 1 ? o.rank : piece;
  o.kparts = Cluster > 1 ? Cluster : pieces;
  o.m0 = o.by * TileM;
  const int steps_total = (p.k_dim + kStepK - 1) / kStepK;
  const int slice = kpart * WarpsK + wk;
  o.s_begin = steps_total * slice / (o.kparts * WarpsK);
  o.s_end = steps_total * (slice + 1) / (o.kparts * WarpsK);
  o.r_begin = steps_total * kpart / o.kparts;
  o.r_end = steps_total * (kpart + 1) / o.kparts;
  o.kb0 = o.r_begin * kStepK * kBits / 8;
  return o;
}

/// The operands of warp step `step` (the warp's j-th) of rows (g, g + 8) of m16 tiles wn R + r: the units w (stages
/// >= 1, from shared memory: ring slot j % kRing ([warp][slot][R tiles][16 rows][64 bytes]) for tma / tma_x, the
/// block's rows ([tile][16 rows][row_bytes] from byte kb0) for bulk_rows; the register ring's are in w already), the
/// unit scales s (from the register ring's raw bits sbits or the rows' scales in shared memory, converted here;
/// outside the matrix 0) and the operand constants s2. Returns whether the step takes the 16-bit-pair decode: every
/// unit's scale fits the dtype (a warp-uniform vote; always for the formats whose scale is not in the operand).
template <DType DT, quant::Format F, int Stages, int R, int kRing>
__device__ __forceinline__ bool gemv_step_operands(const QkvParams& p, int step, int j, const unsigned (&sbits)[R][2],
                                                   const unsigned char* s_data, const unsigned char* s_scale,
                                                   const unsigned char* s_zero, int row_bytes, int srow_bytes,
                                                   int zrow_bytes, int kb0, const bool (&tile_in)[R], int warp, int wn,
                                                   int g, int q, uint4 (&w)[R][2], UnitScales (&s)[R][2],
                                                   UnitScales2 (&s2)[R][2]) {
  constexpr bool kStream = Stages >= 2, kSmem = Stages >= 1, kScaleRing = !kSmem;
  constexpr int kBits = quant::FormatTraits<F>::kBits;
  constexpr int kUnitElems = 128 / kBits, kStepK = 4 * kUnitElems;
  constexpr GemvScaleMode kScale = gemv_scale_mode(F);
  constexpr bool kGroupScales = kScale == kScaleOperand || kScale == kScaleStep;
  const int k0 = step * kStepK + q * kUnitElems;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int lr = (wn * R + r) * 16 + 8 * h + g;
      const bool in = k0 < p.k_dim && tile_in[r];
      if (kSmem) {
        const unsigned char* unit = kStream
                                        ? s_data + (((warp * kRing + j % kRing) * R + r) * 16 + 8 * h + g) * 64 + q * 16
                                        : s_data + lr * row_bytes + (k0 * kBits / 8 - kb0);
        w[r][h] = in ? *reinterpret_cast<const uint4*>(unit) : make_uint4(0, 0, 0, 0);
      }
      // (one expression, selected on `in`: written as if / else branches, some binaries took up to 10 more registers)
      s[r][h] = kGroupScales ? (in ? quant::FormatTraits<F>::unit_scales(
                                         kScaleRing ? sbits[r][h]
                                                    : quant::FormatTraits<F>::smem_bits(s_scale + lr * srow_bytes,
                                                                                        s_zero + lr * zrow_bytes, k0),
                                         p.tensor_scale)
                                   : UnitScales{0.f, 0.f, 0.f})
                             : UnitScales{1.f, 1.f, 0.f};
    }
  bool all_ok = true;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      s2[r][h] = unit_scales2<DT, F>(s[r][h]);
      all_ok = all_ok && s2[r][h].ok;
    }
  return kScale != kScaleOperand || __all_sync(0xffffffffu, all_ok);
}

/// The kernel body; Cluster > 1: the blocks of a thread-block cluster (qkv_gemv_cluster) split K (qkv_proj_config.h);
/// Balance (Cluster 1, config split_k 0): the balanced tail (gemv_balance in qkv_proj_config.h): a 1-D grid of
/// p.gemv_full whole units, then p.gemv_split K pieces of each remaining unit, reduced through p.workspace.
template <DType DT, quant::Format F, int D, bool HasBias, bool Rope, bool KvCache, int TileM, int TileN, int WarpsK,
          int WarpsN, int Prefetch, int Stages, int Cluster, bool Balance = false>
__device__ __forceinline__ void gemv_body(const QkvParams& p, const TmaDescriptor* wmap,
                                          const TmaDescriptor* xmap = nullptr) {
  // Preconditions
  static_assert(!Balance || Cluster == 1, "the balanced tail splits K across independent blocks, not a cluster");
  constexpr Config C = make_config(TileM, TileN,
                                   GemvConfig{WarpsK, WarpsN, GemvLoad(Stages), Prefetch,
                                              Balance       ? GemvReduce::balanced_tail
                                              : Cluster > 1 ? GemvReduce::cluster
                                                            : GemvReduce::none,
                                              Cluster});
  static_assert(TileM % 8 == 0, "gemv: the tokens are whole n8 tiles");
  static_assert(TileN % (16 * WarpsN) == 0, "gemv: each warp column owns whole m16 tiles of features");
  constexpr bool kBulk = Stages == 1;    // the block's rows by cp.async.bulk, one mbarrier
  constexpr bool kStream = Stages >= 2;  // each warp's own steps by TMA boxes, one mbarrier per step
  constexpr bool kXTma = Stages == 3;    // and the step's X tile by a TMA box on the same mbarrier
  constexpr bool kSmem = Stages >= 1;    // units read from shared memory
#ifdef __CUDA_ARCH__                     // device pass (NVRTC compiles only that; nvcc also parses for the host)
  static_assert(invalid_reason(DT, F, D, Rope, C, ArchId{__CUDA_ARCH__ / 10, KT_ARCH_SPECIFIC}) == nullptr,
                "invalid qkv_gemv variant: see invalid_reason() in qkv_proj_config.h");
#endif
#if __CUDA_ARCH__ >= 900
  // Every block of the cluster is running before any writes into another's shared memory (waited on before the
  // reduction; the arrival costs nothing here).
  if (Cluster > 1) ptx::cluster_arrive_relaxed();
#endif
  constexpr int R = gemv_row_tiles(C);  // m16 tiles per warp
  constexpr int NT = TileM / 8;         // n8 token tiles
  constexpr int kBits = quant::FormatTraits<F>::kBits;
  constexpr int kUnitElems = 128 / kBits;  // elements per 16-byte unit
  constexpr int kStepK = 4 * kUnitElems;   // K per warp step
  constexpr int kWords = kUnitElems / 2;   // dtype pairs per unit
  constexpr int kTilesPerHead = D / 16;
  constexpr GemvScaleMode kScale = gemv_scale_mode(F);
  // Per-group scales (and int4 zero points) come from shared memory (stages 1: the block's rows; 2 / 3: each warp's,
  // kWarpScales) or (stages 0) as raw bits with each step's units in the register ring (kScaleRing).
  constexpr bool kGroupScales = kScale == kScaleOperand || kScale == kScaleStep;  // scales per group along K
  constexpr bool kWarpScales = kStream && kGroupScales;
  constexpr bool kScaleRing = !kSmem;

  // Dynamic shared memory: [WarpsK - 1][WarpsN][R][NT][32 lanes] float4 partials, then (stages 1) the block's rows:
  // data, scales, zero points, each [WarpsN * R tiles][16 rows (8 h + g: RoPE-paired row (g, h))][row bytes].
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float s_lut[16];
  __shared__ __align__(16) unsigned s_tab[gemv_uses_table(F) ? 256 * kGemvTableCopies : 4];
  __shared__ __align__(8) unsigned long long s_bar;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, q = lane % 4;
  KT_GEMV_TRACE(0);
  const int wn = warp % WarpsN, wk = warp / WarpsN;
  const GemvSlice sl = gemv_block_slice<TileM, WarpsK, Cluster, Balance, kStepK, kBits>(p, wk);
  const int bx = sl.bx, rank = sl.rank, kparts = sl.kparts, m0 = sl.m0;
  const int s_begin = sl.s_begin, s_end = sl.s_end, nsteps = s_end - s_begin, r_begin = sl.r_begin, r_end = sl.r_end;
  const int kb0 = sl.kb0;
  const int heads = p.num_heads + 2 * p.num_kv_heads;
  const int tiles_total = heads * kTilesPerHead;

  const PairTable<kGemvTableCopies> tab(s_tab, gemv_uses_table(F) ? lane % kGemvTableCopies : 0);

  // ---- rows: m16 tile T = (bx * WarpsN + wn) * R + r, RoPE-paired (see the top of the file) ----
  int head[R], pair[R];  // head index in [Q | K | V], pair index i in [0, D/2) of row g (row g + 8: i + D/2)
  bool tile_in[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int T = (bx * WarpsN + wn) * R + r;
    tile_in[r] = T < tiles_total;
    head[r] = T / kTilesPerHead;
    pair[r] = (T % kTilesPerHead) * 8 + g;
  }

  // ---- stages 1 / 2 / 3: request the rows (bulk copies / per-warp TMA boxes; scales by 4-byte cp.async) ----
  const unsigned char* wdata = static_cast<const unsigned char*>(p.w_data);
  // The weight's L2 policy: evict_first or none (QkvParams::w_evict_first, qkv::weight_evict_first).
  const ptx::L2Hint wl2 = ptx::l2_evict_first_if(p.w_evict_first != 0);
  const long long w_row_bytes = (long long)p.k_dim * kBits / 8;
  const int row_bytes = gemv_seg_bytes(F, p.k_dim, Cluster), srow_bytes = row_scale_bytes(F, p.k_dim),
            zrow_bytes = row_zero_bytes(F, p.k_dim);  // row_bytes: the shared-memory row stride
  const int seg_bytes = (r_end * kStepK < p.k_dim ? r_end * kStepK : p.k_dim) * kBits / 8 - kb0;  // this block's
  constexpr int kBlockTiles = WarpsN * R;
  constexpr int kPartialBytes = gemv_partial_bytes(C);
  // stages 2 / 3: per warp a ring of kRing slots (prefetch + 2 steps) of R boxes, [warp][slot][R][16 rows][64 bytes],
  // 128-byte aligned; stages 3: first the X rings, [warp][prefetch + 1 slots] boxes of kXBox bytes (tma_load_3d),
  // 1024-byte aligned for the 128-byte swizzle (gemv_smem_bytes has the slack for both alignments).
  constexpr int kRing = gemv_ring_slots(C);
  constexpr int kXBox = gemv_x_box_bytes(C, F);
  unsigned char* s_x =
      smem + kPartialBytes + (kXTma ? (1024 - (ptx::smem_u32(smem) + kPartialBytes) % 1024) % 1024 : 0);
  unsigned char* s_data =
      kXTma ? s_x + gemv_x_ring_bytes(C, F)
            : smem + (kStream ? kPartialBytes + ((128 - (ptx::smem_u32(smem) + kPartialBytes) % 128) % 128)
                              : kPartialBytes);
  unsigned char* s_scale = s_data + (kStream ? gemv_ring_bytes(C) : kBulk ? kBlockTiles * 16 * row_bytes : 0);
  unsigned char* s_zero = s_scale + kBlockTiles * 16 * srow_bytes;
  const unsigned bar = ptx::smem_u32(&s_bar);
  // stages 2 / 3: one single-use mbarrier per (K step, warp column) of the block, after the zero points (8-byte
  // aligned): step st of warp column wn is barrier (st - r_begin) WarpsN + wn.
  const pipe::StepBarriers step_bars{ptx::smem_u32(s_zero + kBlockTiles * 16 * zrow_bytes)};
  const int tile0 = bx * kBlockTiles;
  const int tiles_here = tiles_total - tile0 < kBlockTiles ? tiles_total - tile0 : kBlockTiles;
  constexpr int kWindow = Prefetch + 1;  // stages 2 / 3: steps requested ahead of the decode (gemv_tma_issue_step)
  int tiles_w = 0;                       // this warp's m16 tiles inside the matrix
#pragma unroll
  for (int r = 0; r < R; ++r) tiles_w += tile_in[r] ? 1 : 0;
  auto issue_step = [&](int st) {
    gemv_tma_issue_step<D, WarpsN, R, kXTma, kWindow, kRing, kXBox, kStepK>(
        p, wmap, xmap, step_bars, wl2, s_data, s_x, st, s_begin, r_begin, tiles_w, (bx * WarpsN + wn) * R, tile_in, m0,
        warp, wn);
  };
  if (kStream) gemv_stream_start<WarpsN, kWindow>(step_bars, issue_step, s_begin, s_end, r_begin, wn, lane);
  if constexpr (kWarpScales)  // this warp's scales and zero points, waited for by this warp alone before its first step
    gemv_load_warp_scales<F, D, R, kStepK>(p, s_scale, s_zero, srow_bytes, zrow_bytes, s_begin, s_end, tile_in, head,
                                           pair, wn, g, q);
  KT_GEMV_TRACE(4);
  if constexpr (kBulk)
    gemv_bulk_rows_load<F, D, Cluster, WarpsK * WarpsN * 32>(p, wdata, w_row_bytes, wl2, s_data, s_scale, s_zero, bar,
                                                             tile0, tiles_here, row_bytes, seg_bytes, srow_bytes,
                                                             zrow_bytes, kb0, kparts, tid, warp, lane);
  KT_GEMV_TRACE(5);

  // ---- register rings: for stages 0, Prefetch steps of weight (R tiles x rows (g, g + 8)); kXSlots steps of X
  //      (gemv_load_x_regs: L2 / L1 hits, so shallower than the weight's, which comes from HBM) ----
  constexpr int kXSlots = !kXTma && Prefetch >= 2 ? 2 : 1;  // Prefetch is 1, 2 or 4: step j uses X slot j % kXSlots
  uint4 wreg[kSmem ? 1 : Prefetch][R][2];
  unsigned sbits[kScaleRing ? Prefetch : 1][R][2];  // kScaleRing: the ring's raw scale bits (global_bits)
  UnitScales sreg[R][2];                            // this step's unit scales
  uint4 xreg[kXSlots][NT][kWords / 4];  // [X slot][n8 token tile][16 bytes]: token 8 t + g, the lane's K unit
  auto load_x = [&](int slot, int step) { gemv_load_x_regs<kStepK, kUnitElems>(p, xreg[slot], step, m0, g, q); };
  // The 16-byte unit of (row, step, quad q) is at row w_unit_row + step w_unit_step + 16 q (gemv_load_w_regs).
  static_assert(kStepK * kBits / 8 == 64, "a gemv warp step is 64 bytes of a row");
  const int w_unit_row = p.w_k_blocked ? 64 : int(w_row_bytes),
            w_unit_step = p.w_k_blocked ? 64 * 16 * tiles_total : 64;
  auto load_w = [&](int slot, int step) {
    if (!kSmem)
      gemv_load_w_regs<F, D, R, kGroupScales>(p, wdata, w_unit_row, w_unit_step, wreg[kSmem ? 0 : slot],
                                              sbits[kScaleRing ? slot : 0], step, tile_in, head, pair, q);
  };
#pragma unroll
  for (int pp = 0; pp < Prefetch; ++pp)
    if (pp < nsteps) load_w(pp, s_begin + pp);
#pragma unroll
  for (int pp = 0; pp < kXSlots; ++pp)
    if (!kXTma && pp < nsteps) load_x(pp, s_begin + pp);
  // stages 3: step j's X from its ring slot j % kWindow (gemv_load_x_smem), after the step's mbarrier.
  auto load_x_smem = [&](int j) {
    gemv_load_x_smem<kStepK, kUnitElems>(s_x + (warp * kWindow + j % kWindow) * kXBox, xreg[0], g, q);
  };

  KT_GEMV_TRACE(6);
  // ---- decode tables (after the loads are in flight) ----
  build_decode_tables<DT, F, kGemvTableCopies>(s_lut, s_tab, tid, WarpsK * WarpsN * 32);
  // ---- epilogue inputs, loaded while the weight is in flight (K slice 0 of rank 0 only) ----
  // Small tiles compute the rotations here, while the weight is in flight, rather than after the mainloop.
  constexpr bool kRopeEarly = Rope && R * NT <= 4 && !kStream;  // stages 2 starts decoding before positions land
  unsigned short bias_v[R][2] = {};                             // [m16 tile][row g, g + 8]: the dtype's bits
  float row_scale[R][2] = {};                                   // kScaleRow (int8)
  unsigned long long turns[R] = {};                             // rope_turns of pair r
  int pos[NT][2] = {};                                          // [n8 token tile][token 2 q + i]
  float rope_c[kRopeEarly ? R : 1][kRopeEarly ? NT : 1][2], rope_s[kRopeEarly ? R : 1][kRopeEarly ? NT : 1][2];
  gemv_epilogue_inputs<F, D, HasBias, Rope, kRopeEarly>(p, bias_v, row_scale, turns, pos, rope_c, rope_s, tile_in, head,
                                                        pair, m0, q, wk == 0 && rank == 0);
  KT_GEMV_TRACE(7);

  // Two accumulator sets, by chunk parity, halve the dependent mma chain; summed after the mainloop.
  float acc2[2][R][NT][4];  // [chunk parity][m16 feature tile][n8 token tile][C fragment]
  zero_fill(acc2);

  if (kBulk) {
#if __CUDA_ARCH__ >= 900
    ptx::cp_async_wait_all();
    __syncthreads();             // s_lut, s_tab, scales and zero points visible to the block
    ptx::mbarrier_wait(bar, 0);  // the rows' bulk copies have landed
#endif
  } else {
    __syncthreads();  // s_lut, s_tab
  }

  if (!kStream) KT_GEMV_TRACE(1);  // stages 2: when the first step has landed
  // The loop is unrolled by Prefetch so that every register-ring slot index is a compile-time constant.
  for (int j0 = 0; j0 < nsteps; j0 += Prefetch) {
#pragma unroll
    for (int pp = 0; pp < Prefetch; ++pp) {
      const int j = j0 + pp;
      if (j < nsteps) {
        const int step = s_begin + j;
#if __CUDA_ARCH__ >= 800
        if (kWarpScales && j == 0) {  // this warp's scales (and zero points) have landed
          ptx::cp_async_wait_all();
          __syncwarp();
        }
#endif
        if (kStream) {  // this step's TMA boxes have landed
#if __CUDA_ARCH__ >= 900
          step_bars.wait((step - r_begin) * WarpsN + wn);
#endif
          if (kXTma) load_x_smem(j);
          if (j == 0) KT_GEMV_TRACE(1);
        }
        // The step's units and scales; for the table formats a unit whose scale the dtype cannot hold sends the warp's
        // whole step through the fp32 decode (fast = false, warp-uniform).
        UnitScales2 s2[R][2];
        const bool fast = gemv_step_operands<DT, F, Stages, R, kRing>(
            p, step, j, sbits[kScaleRing ? pp : 0], s_data, s_scale, s_zero, row_bytes, srow_bytes, zrow_bytes, kb0,
            tile_in, warp, wn, g, q, wreg[0], sreg, s2);
        // kScaleStep: this step's partial sums (one group per row), scaled into acc2 after the step.
        float ps[kScale == kScaleStep ? 2 : 1][R][NT][4];
        if (kScale == kScaleStep) zero_fill(ps);
        // The step's decode and mma (gemv_step_chunks), fast or in fp32 for the whole step.
        if (fast)
          gemv_step_chunks<DT, F, true>(wreg[kSmem ? 0 : pp], s2, sreg, s_lut, tab, xreg[pp % kXSlots], acc2, ps);
        else gemv_step_chunks<DT, F, false>(wreg[kSmem ? 0 : pp], s2, sreg, s_lut, tab, xreg[pp % kXSlots], acc2, ps);
        if (kScale == kScaleStep) gemv_fold_step_sums(ps, sreg, acc2[0]);
        if (!kSmem && j + Prefetch < nsteps) load_w(pp, step + Prefetch);  // refill the slots just consumed
        if (!kXTma && j + kXSlots < nsteps) load_x(pp % kXSlots, step + kXSlots);
        if (kStream) gemv_stream_step_end<kWindow>(issue_step, j, nsteps, step, lane);
      }
    }
  }

  KT_GEMV_TRACE(2);
  if (!gemv_reduce<WarpsK, WarpsN, R, NT, Cluster, Balance>(p, acc2, reinterpret_cast<float4*>(smem), rank, wk, wn,
                                                            warp, lane))
    return;

  gemv_epilogue<DT, F, D, Rope, KvCache, kRopeEarly>(p, acc2[0], bias_v, row_scale, turns, pos, rope_c, rope_s, tile_in,
                                                     head, pair, m0, q);
  KT_GEMV_TRACE(3);
}

/// gemv stages 0 / 1 (qkv_proj_config.h); Balance: config split_k 0, the balanced tail (gemv_balance: a 1-D grid of
/// gemv_balance(..).blocks() blocks, QkvParams::gemv_full / gemv_split, workspace and counters).
template <DType DT, quant::Format F, int D, bool HasBias, bool Rope, bool KvCache, int TileM, int TileN, int WarpsK,
          int WarpsN, int Prefetch, int Stages, bool Balance = false>
__global__ void __launch_bounds__(WarpsK* WarpsN * 32, gemv_min_blocks(WarpsK* WarpsN * 32))
    qkv_gemv(const QkvParams p) {
  gemv_body<DT, F, D, HasBias, Rope, KvCache, TileM, TileN, WarpsK, WarpsN, Prefetch, Stages, 1, Balance>(p, nullptr);
}

/// gemv stages 2 (sm_90): each warp requests its K steps in order by TMA, one mbarrier per step. w.w_map is the packed
/// weight data as a 5-D byte tensor {K bytes, 8 rows g, 2 halves h, D / 16 tiles, heads} with strides {row, D / 2 rows,
/// 8 rows, D rows} bytes, box {64, 8, 2, 1, 1}: one box is the 16 RoPE-paired rows of an m16 tile for one warp step
/// (runtime/qkv.cpp encodes it); w.x_map is unused. Balance: as qkv_gemv's.
template <DType DT, quant::Format F, int D, bool HasBias, bool Rope, bool KvCache, int TileM, int TileN, int WarpsK,
          int WarpsN, int Prefetch, bool Balance = false>
__global__ void __launch_bounds__(WarpsK* WarpsN * 32, gemv_min_blocks(WarpsK* WarpsN * 32))
    qkv_gemv_tma(const __grid_constant__ WsParams w) {
  gemv_body<DT, F, D, HasBias, Rope, KvCache, TileM, TileN, WarpsK, WarpsN, Prefetch, 2, 1, Balance>(w.p, &w.w_map);
}

/// gemv stages 3 (sm_90, packed weights): as qkv_gemv_tma, and each step's X tile also comes by TMA on the step's
/// mbarrier. w.x_map is X as a 3-D tensor of 16-bit elements {64, K / 64, M} with strides {128 bytes, x_row_stride},
/// box {64, step K / 64, TileM} (one warp step of K for the block's tokens), 128-byte swizzle, tokens past M read as
/// zeros (runtime/qkv.cpp encode_gemv_x; K a multiple of 64).
template <DType DT, quant::Format F, int D, bool HasBias, bool Rope, bool KvCache, int TileM, int TileN, int WarpsK,
          int WarpsN, int Prefetch, bool Balance = false>
__global__ void __launch_bounds__(WarpsK* WarpsN * 32, gemv_min_blocks(WarpsK* WarpsN * 32))
    qkv_gemv_tma_x(const __grid_constant__ WsParams w) {
  gemv_body<DT, F, D, HasBias, Rope, KvCache, TileM, TileN, WarpsK, WarpsN, Prefetch, 3, 1, Balance>(w.p, &w.w_map,
                                                                                                     &w.x_map);
}

/// gemv with K split over the Cluster blocks of a thread-block cluster (stages 1, sm_90): grid.x = row blocks x
/// Cluster, cluster dims (Cluster, 1, 1) fixed at compile time, so a plain launch forms the clusters. Defined for
/// sm_90 only: NVRTC rejects __cluster_dims__ when compiling for an older arch, even in a template nobody instantiates
/// (every gemv binary for sm_80 failed to compile).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
template <DType DT, quant::Format F, int D, bool HasBias, bool Rope, bool KvCache, int TileM, int TileN, int WarpsK,
          int WarpsN, int Prefetch, int Cluster>
__global__ void __cluster_dims__(Cluster, 1, 1)
    __launch_bounds__(WarpsK* WarpsN * 32, gemv_min_blocks(WarpsK* WarpsN * 32)) qkv_gemv_cluster(const QkvParams p) {
  gemv_body<DT, F, D, HasBias, Rope, KvCache, TileM, TileN, WarpsK, WarpsN, Prefetch, 1, Cluster>(p, nullptr);
}
#endif

}  // namespace qkv
}  // namespace kt
