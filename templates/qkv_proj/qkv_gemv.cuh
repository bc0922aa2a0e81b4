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
#pragma once
#include "common/tma_ring.cuh"
#include "qkv_proj/qkv_gemv_decode.cuh"
#include "qkv_proj/qkv_proj.cuh"

namespace kt {
namespace qkv {

// Scale entries: the stages-0 register ring keeps each unit's raw bits (FormatTraits<F>::global_bits) and converts
// them only where a step uses them (unit_scales): a conversion right after a global load (branching on the loaded
// byte, as e8m0_to_float does) held the ring's next loads behind the scale's DRAM round trip. Stages 1-3 read the raw
// bits from the rows' scales in shared memory (FormatTraits<F>::smem_bits).

// Timeline experiments only (never defined by the generator): KT_GEMV_TRACE(i) records %globaltimer at point i of
// each warp into kt_gemv_trace[(block * warps + warp) * 16 + i] (a global __device__ array the experiment defines before
// including this header); i < 4: entry, data ready, loop end, end; 4..7: probes inside the prologue; 8..11: a balanced
// tail piece's reduction (11 block sum, 8 partial stored and fenced, 9 counted, 10 the last piece's sum). 16 slots per
// warp. At i = 0 thread 0 also records the block's SM (%smid) into kt_gemv_smid[block] (defined beside kt_gemv_trace).
#ifdef KT_GEMV_TRACE_ON
#define KT_GEMV_TRACE(i)                                                                                              \
  do {                                                                                                                \
    unsigned long long t_;                                                                                            \
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                                                            \
    if (lane == 0) kt_gemv_trace[((blockIdx.y * gridDim.x + blockIdx.x) * (WarpsK * WarpsN) + warp) * 16 + (i)] = t_; \
    if ((i) == 0 && threadIdx.x == 0) {                                                                               \
      unsigned sm_;                                                                                                   \
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm_));                                                                \
      kt_gemv_smid[blockIdx.y * gridDim.x + blockIdx.x] = sm_;                                                        \
    }                                                                                                                 \
  } while (0)
#else
#define KT_GEMV_TRACE(i) \
  do {                   \
  } while (0)
#endif

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

/// Stages 2 / 3: lane 0 initializes the warp's step mbarriers (step st of warp column wn: (st - r_begin) WarpsN + wn)
/// and requests the first kWindow steps (issue_step); the warp barrier orders the initialization before any wait.
template <int WarpsN, int kWindow, class Issue>
__device__ __forceinline__ void gemv_stream_start(const pipe::StepBarriers& step_bars, const Issue& issue_step,
                                                  int s_begin, int s_end, int r_begin, int wn, int lane) {
#if __CUDA_ARCH__ >= 900
  if (lane == 0) {
    for (int st = s_begin; st < s_end; ++st) step_bars.init((st - r_begin) * WarpsN + wn);
    ptx::mbarrier_init_fence();
    for (int st = s_begin; st < s_end && st < s_begin + kWindow; ++st) issue_step(st);
  }
  __syncwarp();  // the barriers are initialized before the lanes wait on them
#else
  (void)step_bars, (void)issue_step, (void)s_begin, (void)s_end, (void)r_begin, (void)wn, (void)lane;
#endif
}

/// Stages 2 / 3, the end of warp step j: requests step j + kWindow (issue_step) into the slots the step has read.
/// Step j + kWindow goes into the weight ring slot of step j - 1 and (stages 3) the X ring slot of step j,
/// whose reads every lane has finished. Those reads went through the generic proxy and the TMA writes go
/// through the async proxy: each lane's proxy fence, then the warp barrier, order them (PTX ISA
/// "fence.proxy.async"; the generic-read / TMA-write case as Triton's proxy-fence pass treats it). Requested
/// at the end of the step, where the fence finds none of the step's reads in flight: right after the X reads
/// the fence holds the weight's reads behind them, and a spare X slot, to request before the step's reads,
/// costs the table formats a block per SM (their decode tables).
template <int kWindow, class Issue>
__device__ __forceinline__ void gemv_stream_step_end(const Issue& issue_step, int j, int nsteps, int step, int lane) {
#if __CUDA_ARCH__ >= 900  // (kStream is sm_90-only; the fence exists there only)
  if (j + kWindow < nsteps) ptx::fence_proxy_async_shared();
#endif
  __syncwarp();
  if (lane == 0 && j + kWindow < nsteps) issue_step(step + kWindow);
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

/// The kernel body; Cluster > 1: the blocks of a thread-block cluster (qkv_gemv_cluster) split K (qkv_proj_config.h);
/// Balance (Cluster 1, config split_k 0): the balanced tail (gemv_balance in qkv_proj_config.h): a 1-D grid of
/// p.gemv_full whole units, then p.gemv_split K pieces of each remaining unit, reduced through p.workspace.
template <DType DT, quant::Format F, int D, bool HasBias, bool Rope, int TileM, int TileN, int WarpsK, int WarpsN,
          int Prefetch, int Stages, int Cluster, bool Balance = false>
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
  // Where each step's per-group scales (and int4 zero points) come from (gemv_smem_scales): shared memory, copied by
  // the block (stages 1, with its rows) or by each warp for its own rows and K steps before its first step (stages 2 /
  // 3: kWarpScales); else (stages 0) their raw bits from global memory with each step's units, in the register ring
  // (kScaleRing), converted where the step uses them.
  constexpr bool kGroupScales = kScale == kScaleOperand || kScale == kScaleStep;  // scales per group along K
  constexpr bool kWarpScales = kStream && kGroupScales;
  constexpr bool kScaleRing = !kSmem;

  // Dynamic shared memory: [WarpsK - 1][WarpsN][R][NT][32 lanes] float4 partials, then (stages 1) the block's rows:
  // data [WarpsN * R tiles][16 rows][row bytes], scales [..][16][scale bytes], zero points [..][16][zero bytes]; row
  // 8 h + g of a tile is its RoPE-paired row (g, h).
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float s_lut[16];
  __shared__ __align__(16) unsigned s_tab[gemv_uses_table(F) ? 256 * kGemvTableCopies : 4];
  __shared__ __align__(8) unsigned long long s_bar;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, q = lane % 4;
  KT_GEMV_TRACE(0);
  const int wn = warp % WarpsN, wk = warp / WarpsN;
  // Block order: the hardware issues blocks in linear order (x fastest); remap it so that the token tiles of one set
  // of rows are neighbours (token tile fastest): blocks sharing weight rows run together and the weight is read from
  // HBM once, the other token tiles hitting L2. bx: the rows' block index, by: the token tile.
  // A cluster is Cluster consecutive x-blocks (ranks): bx = blockIdx.x / Cluster, the token tile is blockIdx.y.
  // Balance: a 1-D grid; block v < gemv_full is unit v, the next ones are pieces (unit, piece) of the tail units; unit u
  // = (rows bx = u / token tiles, token tile by = u % token tiles), token tile fastest as above.
  const int lin = blockIdx.y * gridDim.x + blockIdx.x;
  const int token_tiles = Balance ? (p.m + TileM - 1) / TileM : int(gridDim.y);
  int unit = lin, piece = 0, pieces = 1;  // Balance: this block's unit and its K piece
  // (The pieces come last: the hardware then puts the whole units 2 per SM and a piece beside them on most SMs; pieces
  // first left 3 whole units on some SMs.)
  if (Balance && lin >= p.gemv_full) {
    unit = p.gemv_full + (lin - p.gemv_full) / p.gemv_split;
    piece = (lin - p.gemv_full) % p.gemv_split;
    pieces = p.gemv_split;
  }
  const int bx = Cluster > 1 ? blockIdx.x / Cluster
                 : Balance   ? unit / token_tiles
                             : lin / gridDim.y,
            by = Cluster > 1 ? blockIdx.y
                 : Balance   ? unit % token_tiles
                             : lin % gridDim.y;
#if __CUDA_ARCH__ >= 900
  const int rank = Cluster > 1 ? int(ptx::cluster_rank()) : 0;
#else
  const int rank = 0;
#endif
  // The block's share of K: piece kpart of kparts (cluster rank of Cluster; Balance: piece of pieces; else 0 of 1).
  const int kpart = Cluster > 1 ? rank : piece, kparts = Cluster > 1 ? Cluster : pieces;
  const int m0 = by * TileM;
  const int heads = p.num_heads + 2 * p.num_kv_heads;
  const int tiles_total = heads * kTilesPerHead;

  // K steps of this warp's slice: slice kpart * WarpsK + wk of kparts * WarpsK. The block's rows hold steps
  // [r_begin, r_end) (byte kb0 on of each row), its warps' slices inside them (Balance: a warp may get none).
  const int steps_total = (p.k_dim + kStepK - 1) / kStepK;
  const int slice = kpart * WarpsK + wk;
  const int s_begin = steps_total * slice / (kparts * WarpsK), s_end = steps_total * (slice + 1) / (kparts * WarpsK);
  const int nsteps = s_end - s_begin;
  const int r_begin = steps_total * kpart / kparts, r_end = steps_total * (kpart + 1) / kparts;
  const int kb0 = r_begin * kStepK * kBits / 8;

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
  auto row_of = [&](int r, int h) { return head[r] * D + pair[r] + h * (D / 2); };

  // ---- stages 1 / 2: request the block's rows (data by bulk copies / per-warp TMA boxes, scales / zero points by
  //      4-byte cp.async) ----
  const unsigned char* wdata = static_cast<const unsigned char*>(p.w_data);
  // The weight's L2 policy: evict_first or none (QkvParams::w_evict_first, qkv::weight_evict_first).
  const ptx::L2Hint wl2 = ptx::l2_evict_first_if(p.w_evict_first != 0);
  const long long w_row_bytes = (long long)p.k_dim * kBits / 8;
  const int row_bytes = gemv_seg_bytes(F, p.k_dim, Cluster), srow_bytes = row_scale_bytes(F, p.k_dim),
            zrow_bytes = row_zero_bytes(F, p.k_dim);  // row_bytes: the shared-memory row stride
  const int seg_bytes = (r_end * kStepK < p.k_dim ? r_end * kStepK : p.k_dim) * kBits / 8 - kb0;  // this block's
  constexpr int kBlockTiles = WarpsN * R;
  constexpr int kPartialBytes = gemv_partial_bytes(C);
  // stages 2: the TMA destination must be 128-byte aligned (gemv_smem_bytes has 128 bytes of slack for it). Each warp
  // has a ring of kRing slots (the window, prefetch + 1 steps, plus the step being decoded) of R boxes: step j of the
  // warp's slice goes to slot j % kRing, layout [warp][slot][R tiles][16 rows][64 bytes].
  constexpr int kRing = gemv_ring_slots(C);
  // stages 3: the X rings first, [warp][slot] boxes (prefetch + 1 slots) of [tile_m tokens][step K / 64][64] 16-bit
  // elements, 1024-byte aligned for the 128-byte swizzle (gemv_smem_bytes has 1024 bytes of slack for it).
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
  // stages 2: lane 0 of each warp requests its steps in K order, at most kWindow ahead of the step the warp decodes: one
  // mbarrier and one TMA box (16 rows x 64 bytes) per step and m16 tile. Requesting every step at once makes them
  // land in any order, all near the end of the weight stream; a short window lands them in
  // order, so the decode of step j overlaps the stream of the steps after it. The ring keeps shared memory independent
  // of K (16-bit weights: a whole slice, 16 rows x 7 KB per tile, allowed only one block per SM).
  constexpr int kWindow = Prefetch + 1;
  int tiles_w = 0;  // this warp's m16 tiles inside the matrix
#pragma unroll
  for (int r = 0; r < R; ++r) tiles_w += tile_in[r] ? 1 : 0;
  auto issue_step = [&](int st) {
#if __CUDA_ARCH__ >= 900
    const unsigned b = step_bars.arm((st - r_begin) * WarpsN + wn, unsigned(tiles_w * 1024 + (kXTma ? kXBox : 0)));
    if (kXTma)  // box {64 elements, the step's K / 64 halves, tile_m tokens} of the map {64, K / 64, M}; rows >= M zero
      ptx::tma_load_3d(ptx::smem_u32(s_x + (warp * kWindow + (st - s_begin) % kWindow) * kXBox), xmap, 0,
                       st * (kStepK / 64), m0, b, ptx::L2Hint{});
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int T = (bx * WarpsN + wn) * R + r;
      if (!tile_in[r]) continue;
      const unsigned dst = ptx::smem_u32(s_data + ((warp * kRing + (st - s_begin) % kRing) * R + r) * 1024);
      if (p.w_k_blocked)  // box {64 bytes, rows g 0..7, tile T % (D / 16), halves 2 head + 0..1, K block st}
        ptx::tma_load_5d(dst, wmap, 0, 0, T % kTilesPerHead, 2 * (T / kTilesPerHead), st, b, wl2);
      else  // box {64 bytes of K, rows g 0..7, half h 0..1} of tile T % (D / 16) of head T / (D / 16)
        ptx::tma_load_5d(dst, wmap, st * 64, 0, 0, T % kTilesPerHead, T / kTilesPerHead, b, wl2);
    }
#endif
  };
  if (kStream) gemv_stream_start<WarpsN, kWindow>(step_bars, issue_step, s_begin, s_end, r_begin, wn, lane);
  // The scales and zero points of this warp's rows and K steps (kWarpScales), waited for by this warp alone before its
  // first step. The 8 rows of a (tile, half) are contiguous in global and in shared memory; 4-byte words (8 rows x rb
  // bytes is a multiple of 4), lane = 4 x row + j takes words j, j + 4, .. of its row's byte range [lo, hi). Words that
  // straddle two warps' ranges are written by both, with the same bytes. The byte range takes compile-time group sizes
  // (shifts): 64-bit K x bytes / K divisions are a slow subroutine on the path to the first step.
  auto load_warp_scales = [&]() {
#if __CUDA_ARCH__ >= 800
    const int k_lo = s_begin * kStepK, k_hi = s_end * kStepK < p.k_dim ? s_end * kStepK : p.k_dim;
    if (!kWarpScales || k_hi <= k_lo) return;
#pragma unroll
    for (int part = 0; part < 2; ++part) {
      constexpr int kGroup = quant::format_group(F) > 0 ? quant::format_group(F) : 1;
      const int group = part == 0 ? kGroup : 128, eb = part == 0 ? quant::scale_bytes(F) : 1;
      const int rb = part == 0 ? srow_bytes : zrow_bytes;
      if (rb == 0) continue;
      const unsigned char* src = static_cast<const unsigned char*>(part == 0 ? p.w_scales : p.w_zeros);
      unsigned char* dst = part == 0 ? s_scale : s_zero;
      const int lo = k_lo / group * eb, hi = (k_hi + group - 1) / group * eb;
      const int w_first = (g * rb + lo) / 4, w_end = (g * rb + hi + 3) / 4;  // this lane's row g
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (!tile_in[r]) continue;
          const long long row0 = row_of(r, h) - g;  // first of the 8 rows
          const unsigned d0 = ptx::smem_u32(dst + ((wn * R + r) * 16 + 8 * h) * rb);
          for (int w = w_first + q; w < w_end; w += 4) ptx::cp_async_4(d0 + 4 * w, src + row0 * rb + 4 * w);
        }
    }
#endif
  };
  if (kStream) load_warp_scales();
  if (kBulk) {
#if __CUDA_ARCH__ >= 900
    if (tid == 0) ptx::mbarrier_init(bar, 1);
    __syncthreads();  // the barrier is initialized before anyone waits on it
    if (Cluster == 1 && kparts == 1) {
      if (tid == 0) {
        ptx::mbarrier_arrive_expect_tx(bar, unsigned(tiles_here * 16 * row_bytes));
        for (int bt = 0; bt < tiles_here; ++bt)
          for (int h = 0; h < 2; ++h) {  // 8 consecutive weight rows per (tile, half): one bulk copy each
            const int T = tile0 + bt;
            const int row0 = (T / kTilesPerHead) * D + (T % kTilesPerHead) * 8 + h * (D / 2);
            ptx::bulk_copy_g2s(ptx::smem_u32(s_data + (bt * 16 + 8 * h) * row_bytes), wdata + row0 * w_row_bytes,
                               unsigned(8 * row_bytes), bar, wl2);
          }
      }
    } else if (warp ==
               0) {  // the block's K range of each row (cluster rank, tail piece): one bulk copy per row, by warp 0
      if (lane == 0) ptx::mbarrier_arrive_expect_tx(bar, unsigned(tiles_here * 16 * seg_bytes));
      if (seg_bytes > 0)
        for (int i = lane; i < tiles_here * 16; i += 32) {
          const int bt = i / 16, lr = i % 16, T = tile0 + bt;  // shared-memory row lr = 8 h + g of tile bt
          const int row = (T / kTilesPerHead) * D + (T % kTilesPerHead) * 8 + (lr / 8) * (D / 2) + lr % 8;
          ptx::bulk_copy_g2s(ptx::smem_u32(s_data + i * row_bytes), wdata + row * w_row_bytes + kb0,
                             unsigned(seg_bytes), bar, wl2);
        }
    }
#endif
  }
  KT_GEMV_TRACE(4);
#if __CUDA_ARCH__ >= 800
  if (kBulk) {  // scales and zero points: 8 rows are contiguous in global memory too; 4-byte words (K is a multiple of 64)
    const unsigned char* gsc = static_cast<const unsigned char*>(p.w_scales);
    const unsigned char* gzp = static_cast<const unsigned char*>(p.w_zeros);
    for (int part = 0; part < 2; ++part) {
      const int rb = part == 0 ? srow_bytes : zrow_bytes;
      if (rb == 0) continue;
      const unsigned char* src = part == 0 ? gsc : gzp;
      unsigned char* dst = part == 0 ? s_scale : s_zero;
      const int words = tiles_here * 2 * (8 * rb / 4);
      for (int w = tid; w < words; w += WarpsK * WarpsN * 32) {
        const int grp = w / (8 * rb / 4), off = (w % (8 * rb / 4)) * 4;  // group = (tile, half) of 8 rows
        const int bt = grp / 2, h = grp % 2, T = tile0 + bt;
        const int row0 = (T / kTilesPerHead) * D + (T % kTilesPerHead) * 8 + h * (D / 2);
        ptx::cp_async_4(ptx::smem_u32(dst + (bt * 16 + 8 * h) * rb + off), src + (long long)row0 * rb + off);
      }
    }
  }
#endif
  KT_GEMV_TRACE(5);

  // ---- register rings: for stages 0, Prefetch steps of weight (R tiles x rows (g, g + 8)); kXSlots steps of X (token
  //      m0 + 8 t + g, the lane's kUnitElems elements of the step; zero past M or K). X is read by every block (L2 /
  //      L1 hits), so its ring is shallower than the weight's, which comes from HBM. ----
  const unsigned short* x = static_cast<const unsigned short*>(p.x);
  constexpr int kXSlots = !kXTma && Prefetch >= 2 ? 2 : 1;  // Prefetch is 1, 2 or 4: step j uses X slot j % kXSlots
  uint4 wreg[kSmem ? 1 : Prefetch][R][2];
  unsigned sbits[kScaleRing ? Prefetch : 1][R][2];  // kScaleRing: the ring's raw scale bits (global_bits)
  UnitScales sreg[R][2];                            // this step's unit scales
  uint4 xreg[kXSlots][NT][kWords / 4];  // [X slot][n8 token tile][16 bytes]: token 8 t + g, the lane's K unit
  auto load_x = [&](int slot, int step) {
    const int k0 = step * kStepK + q * kUnitElems;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const int m = m0 + 8 * t + g;
      const uint4* src = reinterpret_cast<const uint4*>(x + (long long)m * p.x_row_stride + k0);
#pragma unroll
      for (int c = 0; c < kWords / 4; ++c)
        xreg[slot][t][c] = (m < p.m && k0 < p.k_dim) ? __ldg(src + c) : make_uint4(0, 0, 0, 0);
    }
  };
  // The 16-byte unit of (row, step, quad q) is at row w_unit_row + step w_unit_step + 16 q (a warp step is 64 bytes of
  // every row for each format): row-major {K bits / 8, 64}; K-blocked (QkvParams::w_k_blocked; quant_format.h) {64,
  // 64 N}, so there a quad column's 8 rows are one 512-byte run and each warp load two contiguous runs instead of 16
  // pieces of 64 bytes.
  static_assert(kStepK * kBits / 8 == 64, "a gemv warp step is 64 bytes of a row");
  const int w_unit_row = p.w_k_blocked ? 64 : int(w_row_bytes),
            w_unit_step = p.w_k_blocked ? 64 * 16 * tiles_total : 64;
  auto load_w = [&](int slot, int step) {
    const int k0 = step * kStepK + q * kUnitElems;
    if (!kSmem) {
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row_of(r, h);
          if (k0 < p.k_dim && tile_in[r]) {
            // (the policy made at each load, from the parameter, so that the register ring keeps no policy register
            // live: hoisted, it made three nvfp4 variants with two row tiles per warp spill 12 bytes)
            wreg[kSmem ? 0 : slot][r][h] =
                ptx::ldg_u4(wdata + (long long)row * w_unit_row + (long long)step * w_unit_step + 16 * q,
                            ptx::l2_evict_first_if(p.w_evict_first != 0));
            if constexpr (kScaleRing && kGroupScales)
              sbits[slot][r][h] = quant::FormatTraits<F>::global_bits(p.w_scales, p.w_zeros, p.k_dim, row, k0);
          } else {
            wreg[kSmem ? 0 : slot][r][h] = make_uint4(0, 0, 0, 0);
            if constexpr (kScaleRing) sbits[slot][r][h] = 0u;  // (unused: the step gives the unit scale 0)
          }
        }
    }
  };
#pragma unroll
  for (int pp = 0; pp < Prefetch; ++pp)
    if (pp < nsteps) load_w(pp, s_begin + pp);
#pragma unroll
  for (int pp = 0; pp < kXSlots; ++pp)
    if (!kXTma && pp < nsteps) load_x(pp, s_begin + pp);
  // stages 3: step j's X from its ring slot (j % kWindow: X is read into registers when the step starts, so the
  // request of step j + kWindow right after reuses the slot), after the step's mbarrier: token row r = 8 t + g,
  // element kk of the step in box row r (K / 64 halves) + kk / 64, 16-byte chunk (kk % 64) / 8 XOR the row's low 3
  // bits (the 128-byte swizzle: the 8 lanes of an lds.128 phase, 2 tokens x 4 quads, hit 8 different chunks of a
  // 128-byte line).
  auto load_x_smem = [&](int j) {
    const unsigned char* box = s_x + (warp * kWindow + j % kWindow) * kXBox;
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int c = 0; c < kWords / 4; ++c) {
        const int kk = q * kUnitElems + 8 * c, row = (8 * t + g) * (kStepK / 64) + kk / 64;
        xreg[0][t][c] = *reinterpret_cast<const uint4*>(box + row * 128 + ((((kk % 64) / 8) ^ (row % 8)) * 16));
      }
  };

  KT_GEMV_TRACE(6);
  // ---- decode tables (after the loads are in flight) ----
  build_decode_tables<DT, F, kGemvTableCopies>(s_lut, s_tab, tid, WarpsK * WarpsN * 32);
  // ---- epilogue inputs, loaded while the weight is in flight (K slice 0 only) ----
  unsigned short bias_v[R][2] =
      {};                      // the dtype's bits, converted in the epilogue (no wait on the load before the mainloop)
  float row_scale[R][2] = {};  // kScaleRow (int8): the scales of rows (g, g + 8), applied to the finished sums
  unsigned long long turns[R] = {};  // rope_turns of pair r
  int pos[NT][2] = {};
  if (wk == 0 && rank == 0) {
    const unsigned short* bias = static_cast<const unsigned short*>(p.bias);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (HasBias && tile_in[r]) {
        bias_v[r][0] = bias[row_of(r, 0)];
        bias_v[r][1] = bias[row_of(r, 1)];
      }
      if (kScale == kScaleRow && tile_in[r]) {
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
  auto rope_cs = [&](int r, int t, int i, float& cs, float& sn) { rope_sincos(pos[t][i], turns[r], sn, cs); };
  // Small tiles compute the rotations here, while the weight is in flight, rather than after the mainloop.
  constexpr bool kRopeEarly = Rope && R * NT <= 4 && !kStream;  // stages 2 starts decoding before positions land
  float rope_c[kRopeEarly ? R : 1][kRopeEarly ? NT : 1][2], rope_s[kRopeEarly ? R : 1][kRopeEarly ? NT : 1][2];
  if (kRopeEarly && wk == 0 && rank == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int i = 0; i < 2; ++i)
          rope_cs(r, t, i, rope_c[kRopeEarly ? r : 0][kRopeEarly ? t : 0][i],
                  rope_s[kRopeEarly ? r : 0][kRopeEarly ? t : 0][i]);
  }
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
        {  // this step's units (stages >= 1) from the shared-memory copy of rows (g, h) of tiles wn * R + r, and its
           // scales from there or from the ring's raw bits (kScaleRing), converted here
          const int k0 = step * kStepK + q * kUnitElems;
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int lr = (wn * R + r) * 16 + 8 * h + g;
              const bool in = k0 < p.k_dim && tile_in[r];
              if (kSmem) {
                const unsigned char* unit =
                    kStream ? s_data + (((warp * kRing + j % kRing) * R + r) * 16 + 8 * h + g) * 64 + q * 16
                            : s_data + lr * row_bytes + (k0 * kBits / 8 - kb0);
                wreg[0][r][h] = in ? *reinterpret_cast<const uint4*>(unit) : make_uint4(0, 0, 0, 0);
              }
              // (one expression, selected on `in`: written as if / else branches, some binaries took up to 10 more
              // registers)
              sreg[r][h] =
                  kGroupScales ? (in ? quant::FormatTraits<F>::unit_scales(
                                           kScaleRing ? sbits[kScaleRing ? pp : 0][r][h]
                                                      : quant::FormatTraits<F>::smem_bits(s_scale + lr * srow_bytes,
                                                                                          s_zero + lr * zrow_bytes, k0),
                                           p.tensor_scale)
                                     : UnitScales{0.f, 0.f, 0.f})
                               : UnitScales{1.f, 1.f, 0.f};
            }
        }
        // Operand constants; for the table formats a unit whose scale the dtype cannot hold sends the warp's whole step
        // through the fp32 decode (warp-uniform branch).
        UnitScales2 s2[R][2];
        bool all_ok = true;
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            s2[r][h] = unit_scales2<DT, F>(sreg[r][h]);
            all_ok = all_ok && s2[r][h].ok;
          }
        const bool fast = kScale != kScaleOperand || __all_sync(0xffffffffu, all_ok);
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
  float(&acc)[R][NT][4] = acc2[0];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[r][t][e] += acc2[1][r][t][e];

  // ---- K slices meet in shared memory (same fragment layout, one float4 per lane: conflict-free) ----
  // Slot of partial k (1..) of fragment (r, t) in a region of float4s; add_partials sums partials 1..n-1 of a region
  // into acc in order (deterministic).
  float4* part = reinterpret_cast<float4*>(smem);
  auto slot = [&](int k, int r, int t) { return (((k - 1) * WarpsN + wn) * R * NT + r * NT + t) * 32 + lane; };
  auto add_partials = [&](const float4* region, int n) {
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
  };
  if (WarpsK > 1) {
    gemv_store_k_partial<WarpsN, R, NT>(acc, part, wk, wn, lane);
    if (Cluster == 1 && wk > 0) return;
    if (wk == 0) add_partials(part, WarpsK);
  }
  // ---- Balance, a tail piece: the block sums meet in the workspace. Each warp column is independent: it stores its
  //      fragments ([tail unit][piece][warp column][R][NT][32 lanes] float4, L2 only), fences, and counts itself in
  //      on its counter (tail unit, warp column); the last of the pieces to arrive adds all of them in piece order
  //      (deterministic: the same sum whichever arrives last), resets the counter for the next launch and runs the
  //      epilogue; the others return (threadfence reduction, as the split-K path in qkv_proj.cuh). ----
  // (This block's piece is read again from %ctaid.x and the parameters, not kept live across the mainloop: that cost
  // stages-0 table-format variants 8-24 bytes of spills.)
  unsigned cta = 0;
  if (Balance) asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(cta));
  if (Balance && p.gemv_split > 1 && int(cta) >= p.gemv_full) {
    const int piece = (int(cta) - p.gemv_full) % p.gemv_split, pieces = p.gemv_split;
    const int tail = (int(cta) - p.gemv_full) / p.gemv_split;
    constexpr int kFrag = R * NT * 32;  // float4s per (piece, warp column)
    float4* ws = reinterpret_cast<float4*>(p.workspace) + (long long)tail * pieces * WarpsN * kFrag;
    auto at = [&](int pc, int r, int t) {
      return ws + ((long long)pc * WarpsN + wn) * kFrag + (r * NT + t) * 32 + lane;
    };
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
    if (last == 0u) return;
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
  }
#if __CUDA_ARCH__ >= 900
  // ---- cluster: ranks 1.. store their block sums into rank 0's shared memory (the region after the K-slice
  //      partials), one cluster barrier, rank 0 adds them in rank order (deterministic) and runs the epilogue ----
  if (Cluster > 1) {
    float4* cpart = part + (WarpsK - 1) * WarpsN * R * NT * 32;
    gemv_cluster_store<WarpsN, R, NT>(acc, cpart, rank, wk, wn, lane);
    if (rank > 0 || wk > 0) return;
    add_partials(cpart, Cluster);
  }
#endif

  // ---- epilogue in registers: C fragment e = 2 h + i -> feature row g + 8 h (pair partner h = 1), token 2 q + i ----
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
        if (kScale == kScaleRow) {
          y1 *= row_scale[r][0];
          y2 *= row_scale[r][1];
        }
        y1 += ptx::to_float<DT>(bias_v[r][0]);  // 0 bits: +0
        y2 += ptx::to_float<DT>(bias_v[r][1]);
        if (rotate) {
          float sn, cs;
          if (kRopeEarly) {
            cs = rope_c[kRopeEarly ? r : 0][kRopeEarly ? t : 0][i];
            sn = rope_s[kRopeEarly ? r : 0][kRopeEarly ? t : 0][i];
          } else {
            rope_cs(r, t, i, cs, sn);
          }
          const float o1 = y1 * cs - y2 * sn, o2 = y2 * cs + y1 * sn;
          y1 = o1;
          y2 = o2;
        }
        const unsigned pr = ptx::pack2<DT>(y1, y2);
        unsigned short* dst = out + (long long)m * stride + (long long)local_head * D + pair[r];
        dst[0] = (unsigned short)(pr & 0xffffu);
        dst[D / 2] = (unsigned short)(pr >> 16);
      }
  }
  KT_GEMV_TRACE(3);
}

/// gemv stages 0 / 1 (qkv_proj_config.h); Balance: config split_k 0, the balanced tail (gemv_balance: a 1-D grid of
/// gemv_balance(..).blocks() blocks, QkvParams::gemv_full / gemv_split, workspace and counters).
template <DType DT, quant::Format F, int D, bool HasBias, bool Rope, int TileM, int TileN, int WarpsK, int WarpsN,
          int Prefetch, int Stages, bool Balance = false>
__global__ void __launch_bounds__(WarpsK* WarpsN * 32, gemv_min_blocks(WarpsK* WarpsN * 32))
    qkv_gemv(const QkvParams p) {
  gemv_body<DT, F, D, HasBias, Rope, TileM, TileN, WarpsK, WarpsN, Prefetch, Stages, 1, Balance>(p, nullptr);
}

/// gemv stages 2 (sm_90): each warp requests its K steps in order by TMA, one mbarrier per step. w.w_map is the packed
/// weight data as a 5-D byte tensor {K bytes, 8 rows g, 2 halves h, D / 16 tiles, heads} with strides {row, D / 2 rows,
/// 8 rows, D rows} bytes, box {64, 8, 2, 1, 1}: one box is the 16 RoPE-paired rows of an m16 tile for one warp step
/// (runtime/qkv.cpp encodes it); w.x_map is unused. Balance: as qkv_gemv's.
template <DType DT, quant::Format F, int D, bool HasBias, bool Rope, int TileM, int TileN, int WarpsK, int WarpsN,
          int Prefetch, bool Balance = false>
__global__ void __launch_bounds__(WarpsK* WarpsN * 32, gemv_min_blocks(WarpsK* WarpsN * 32))
    qkv_gemv_tma(const __grid_constant__ WsParams w) {
  gemv_body<DT, F, D, HasBias, Rope, TileM, TileN, WarpsK, WarpsN, Prefetch, 2, 1, Balance>(w.p, &w.w_map);
}

/// gemv stages 3 (sm_90, packed weights): as qkv_gemv_tma, and each step's X tile also comes by TMA on the step's
/// mbarrier. w.x_map is X as a 3-D tensor of 16-bit elements {64, K / 64, M} with strides {128 bytes, x_row_stride},
/// box {64, step K / 64, TileM} (one warp step of K for the block's tokens), 128-byte swizzle, tokens past M read as
/// zeros (runtime/qkv.cpp encode_gemv_x; K a multiple of 64).
template <DType DT, quant::Format F, int D, bool HasBias, bool Rope, int TileM, int TileN, int WarpsK, int WarpsN,
          int Prefetch, bool Balance = false>
__global__ void __launch_bounds__(WarpsK* WarpsN * 32, gemv_min_blocks(WarpsK* WarpsN * 32))
    qkv_gemv_tma_x(const __grid_constant__ WsParams w) {
  gemv_body<DT, F, D, HasBias, Rope, TileM, TileN, WarpsK, WarpsN, Prefetch, 3, 1, Balance>(w.p, &w.w_map, &w.x_map);
}

/// gemv with K split over the Cluster blocks of a thread-block cluster (stages 1, sm_90): grid.x = row blocks x
/// Cluster, cluster dims (Cluster, 1, 1) fixed at compile time, so a plain launch forms the clusters. Defined for
/// sm_90 only: NVRTC rejects __cluster_dims__ when compiling for an older arch, even in a template nobody instantiates
/// (every gemv binary for sm_80 failed to compile).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
template <DType DT, quant::Format F, int D, bool HasBias, bool Rope, int TileM, int TileN, int WarpsK, int WarpsN,
          int Prefetch, int Cluster>
__global__ void __cluster_dims__(Cluster, 1, 1)
    __launch_bounds__(WarpsK* WarpsN * 32, gemv_min_blocks(WarpsK* WarpsN * 32)) qkv_gemv_cluster(const QkvParams p) {
  gemv_body<DT, F, D, HasBias, Rope, TileM, TileN, WarpsK, WarpsN, Prefetch, 1, Cluster>(p, nullptr);
}
#endif

}  // namespace qkv
}  // namespace kt
