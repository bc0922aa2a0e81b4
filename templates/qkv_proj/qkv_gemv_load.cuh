// The gemv kernel's weight loads (qkv_gemv.cuh), one piece per load strategy: bulk_rows (the block's rows by
// cp.async.bulk onto one mbarrier, scales by cp.async), tma / tma_x (each warp's own K steps by TMA boxes, one
// mbarrier per step, the warp's scales by cp.async), and the register ring's loads (which stay in gemv_body, where
// the ring lives). Rows: m16 tile T of the matrix holds rows (T / (D / 16)) D + (T % (D / 16)) 8 + g + h D / 2,
// RoPE-paired (g = 0..7, h = 0, 1); shared-memory row 8 h + g of a tile is row (g, h). Compiled by NVRTC only.
#pragma once
#include "common/tma_ring.cuh"
#include "qkv_proj/qkv_proj.cuh"

namespace kt {
namespace qkv {

/// bulk_rows: requests the block's rows (wdata: the packed weight, w_row_bytes bytes per row) (m16 tiles tile0 .. tile0 + tiles_here - 1) into s_data ([tile][16 rows]
/// [row_bytes]) on the mbarrier bar, which it initializes: whole rows by thread 0, 8 rows per bulk copy (one K part);
/// else (cluster rank, tail piece) the block's K range of each row (byte kb0 on, seg_bytes) by the lanes of warp 0,
/// one copy per row. Then the rows' scales and zero points into s_scale / s_zero ([tile][16 rows][srow_bytes /
/// zrow_bytes]) by 4-byte cp.async from every thread (8 rows are contiguous in global memory too; K is a multiple of
/// 64). The caller waits (cp.async, the barrier) before the mainloop.
template <quant::Format F, int D, int Cluster, int kThreads>
__device__ __forceinline__ void gemv_bulk_rows_load(const QkvParams& p, const unsigned char* wdata,
                                                    long long w_row_bytes, ptx::L2Hint wl2, unsigned char* s_data,
                                                    unsigned char* s_scale, unsigned char* s_zero, unsigned bar,
                                                    int tile0, int tiles_here, int row_bytes, int seg_bytes,
                                                    int srow_bytes, int zrow_bytes, int kb0, int kparts, int tid,
                                                    int warp, int lane) {
  constexpr int kTilesPerHead = D / 16;
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
  } else if (warp == 0) {  // the block's K range of each row (cluster rank, tail piece): one bulk copy per row
    if (lane == 0) ptx::mbarrier_arrive_expect_tx(bar, unsigned(tiles_here * 16 * seg_bytes));
    if (seg_bytes > 0)
      for (int i = lane; i < tiles_here * 16; i += 32) {
        const int bt = i / 16, lr = i % 16, T = tile0 + bt;  // shared-memory row lr = 8 h + g of tile bt
        const int row = (T / kTilesPerHead) * D + (T % kTilesPerHead) * 8 + (lr / 8) * (D / 2) + lr % 8;
        ptx::bulk_copy_g2s(ptx::smem_u32(s_data + i * row_bytes), wdata + row * w_row_bytes + kb0, unsigned(seg_bytes),
                           bar, wl2);
      }
  }
#endif
#if __CUDA_ARCH__ >= 800
  const unsigned char* gsc = static_cast<const unsigned char*>(p.w_scales);
  const unsigned char* gzp = static_cast<const unsigned char*>(p.w_zeros);
  for (int part = 0; part < 2; ++part) {
    const int rb = part == 0 ? srow_bytes : zrow_bytes;
    if (rb == 0) continue;
    const unsigned char* src = part == 0 ? gsc : gzp;
    unsigned char* dst = part == 0 ? s_scale : s_zero;
    const int words = tiles_here * 2 * (8 * rb / 4);
    for (int w = tid; w < words; w += kThreads) {
      const int grp = w / (8 * rb / 4), off = (w % (8 * rb / 4)) * 4;  // group = (tile, half) of 8 rows
      const int bt = grp / 2, h = grp % 2, T = tile0 + bt;
      const int row0 = (T / kTilesPerHead) * D + (T % kTilesPerHead) * 8 + h * (D / 2);
      ptx::cp_async_4(ptx::smem_u32(dst + (bt * 16 + 8 * h) * rb + off), src + (long long)row0 * rb + off);
    }
  }
#endif
}

/// tma / tma_x (kWarpScales): the scales and zero points of this warp's rows (m16 tiles wn R + r; tile_in, head,
/// pair as in gemv_body) and K steps [s_begin, s_end) into s_scale / s_zero ([tile][16 rows][srow_bytes /
/// zrow_bytes]), waited for by this warp alone before its first step. The 8 rows of a (tile, half) are contiguous in
/// global and in shared memory; 4-byte words (8 rows x rb bytes is a multiple of 4), lane = 4 x row + j takes words j,
/// j + 4, .. of its row's byte range [lo, hi). Words that straddle two warps' ranges are written by both, with the
/// same bytes. The byte range takes compile-time group sizes (shifts): 64-bit K x bytes / K divisions are a slow
/// subroutine on the path to the first step.
template <quant::Format F, int D, int R, int kStepK>
__device__ __forceinline__ void gemv_load_warp_scales(const QkvParams& p, unsigned char* s_scale, unsigned char* s_zero,
                                                      int srow_bytes, int zrow_bytes, int s_begin, int s_end,
                                                      const bool (&tile_in)[R], const int (&head)[R],
                                                      const int (&pair)[R], int wn, int g, int q) {
#if __CUDA_ARCH__ >= 800
  auto row_of = [&](int r, int h) { return head[r] * D + pair[r] + h * (D / 2); };
  const int k_lo = s_begin * kStepK, k_hi = s_end * kStepK < p.k_dim ? s_end * kStepK : p.k_dim;
  if (k_hi <= k_lo) return;
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
#else
  (void)p, (void)s_scale, (void)s_zero, (void)srow_bytes, (void)zrow_bytes, (void)s_begin, (void)s_end, (void)tile_in,
      (void)head, (void)pair, (void)wn, (void)g, (void)q;
#endif
}

/// register_ring: warp step `step` of X into one slot of the X ring, xs [n8 token tile t][16 bytes c]: token m0 + 8 t
/// + g, the lane's kUnitElems elements of the step (k0 = step kStepK + q kUnitElems); zero past M or K. X is read by
/// every block (L2 / L1 hits), so its ring is shallower than the weight's.
template <int kStepK, int kUnitElems, int NT, int C4>
__device__ __forceinline__ void gemv_load_x_regs(const QkvParams& p, uint4 (&xs)[NT][C4], int step, int m0, int g,
                                                 int q) {
  const unsigned short* x = static_cast<const unsigned short*>(p.x);
  const int k0 = step * kStepK + q * kUnitElems;
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int m = m0 + 8 * t + g;
    const uint4* src = reinterpret_cast<const uint4*>(x + (long long)m * p.x_row_stride + k0);
#pragma unroll
    for (int c = 0; c < C4; ++c) xs[t][c] = (m < p.m && k0 < p.k_dim) ? __ldg(src + c) : make_uint4(0, 0, 0, 0);
  }
}

/// register_ring: warp step `step` of the weight into one slot of the weight ring, w [m16 tile r][row g, g + 8]: the
/// lane's 16-byte unit (quad q) of rows head D + pair (+ D / 2), and with it (GroupScales) its scale entry's raw bits
/// sbits (FormatTraits<F>::global_bits, converted where the step uses them); zero outside the matrix. The unit of
/// (row, step, quad q) is at wdata + row w_unit_row + step w_unit_step + 16 q (a warp step is 64 bytes of every row
/// for each format): row-major {K bits / 8, 64}; K-blocked (QkvParams::w_k_blocked; quant_format.h) {64, 64 N}, so
/// there a quad column's 8 rows are one 512-byte run and each warp loads two contiguous runs instead of 16 pieces of
/// 64 bytes.
template <quant::Format F, int D, int R, bool GroupScales>
__device__ __forceinline__ void gemv_load_w_regs(const QkvParams& p, const unsigned char* wdata, int w_unit_row,
                                                 int w_unit_step, uint4 (&w)[R][2], unsigned (&sbits)[R][2], int step,
                                                 const bool (&tile_in)[R], const int (&head)[R], const int (&pair)[R],
                                                 int q) {
  constexpr int kUnitElems = quant::FormatTraits<F>::kUnitElems, kStepK = 4 * kUnitElems;
  const int k0 = step * kStepK + q * kUnitElems;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = head[r] * D + pair[r] + h * (D / 2);
      if (k0 < p.k_dim && tile_in[r]) {
        // (the policy made at each load, from the parameter, so that the register ring keeps no policy register
        // live: hoisted, it made three nvfp4 variants with two row tiles per warp spill 12 bytes)
        w[r][h] = ptx::ldg_u4(wdata + (long long)row * w_unit_row + (long long)step * w_unit_step + 16 * q,
                              ptx::l2_evict_first_if(p.w_evict_first != 0));
        if constexpr (GroupScales)
          sbits[r][h] = quant::FormatTraits<F>::global_bits(p.w_scales, p.w_zeros, p.k_dim, row, k0);
      } else {
        w[r][h] = make_uint4(0, 0, 0, 0);
        sbits[r][h] = 0u;  // (unused: the step gives the unit scale 0)
      }
    }
}

/// tma_x: step X from its ring slot box ([tile_m tokens][step K / 64][64] 16-bit elements, 128-byte swizzle) into xs
/// [n8 token tile t][16 bytes c]: token row r = 8 t + g, element kk of the step in box row r (K / 64 halves) + kk / 64,
/// 16-byte chunk (kk % 64) / 8 XOR the row's low 3 bits (the 8 lanes of an lds.128 phase, 2 tokens x 4 quads, hit 8
/// different chunks of a 128-byte line). The slot is j % window for the warp's step j: X is read into registers when
/// the step starts, so the request of step j + window right after reuses the slot.
template <int kStepK, int kUnitElems, int NT, int C4>
__device__ __forceinline__ void gemv_load_x_smem(const unsigned char* box, uint4 (&xs)[NT][C4], int g, int q) {
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int c = 0; c < C4; ++c) {
      const int kk = q * kUnitElems + 8 * c, row = (8 * t + g) * (kStepK / 64) + kk / 64;
      xs[t][c] = *reinterpret_cast<const uint4*>(box + row * 128 + ((((kk % 64) / 8) ^ (row % 8)) * 16));
    }
}

/// tma / tma_x: requests warp step st (lane 0 of the warp) on its mbarrier ((st - r_begin) WarpsN + wn, armed for the
/// bytes of the warp's tiles_w m16 tiles inside the matrix, and X): one TMA box per tile (m16 tiles tile_first + r,
/// tile_in) into weight ring slot (st - s_begin) % kRing ([warp][slot][R tiles][16 rows][64 bytes] of s_data), and
/// (XTma) the step's X box {64 elements, step K / 64 halves, tile_m tokens} of the map {64, K / 64, M} (tokens past M
/// read as zeros) into X ring slot (st - s_begin) % kWindow of s_x. wmap: the weight as {K bytes, 8 rows g, 2 halves
/// h, D / 16 tiles, heads} (row-major) or {64 bytes, 8 rows g, D / 16 tiles, 2 heads + h, K blocks} (K-blocked).
/// Lane 0 of each warp requests its steps in K order, at most kWindow ahead of the step the warp decodes: one mbarrier
/// and one TMA box (16 rows x 64 bytes) per step and m16 tile. Requesting every step at once makes them land in any
/// order, all near the end of the weight stream; a short window lands them in order, so the decode of step j overlaps
/// the stream of the steps after it. The ring keeps shared memory independent of K (16-bit weights: a whole slice,
/// 16 rows x 7 KB per tile, allowed only one block per SM).
template <int D, int WarpsN, int R, bool XTma, int kWindow, int kRing, int kXBox, int kStepK>
__device__ __forceinline__ void gemv_tma_issue_step(const QkvParams& p, const TmaDescriptor* wmap,
                                                    const TmaDescriptor* xmap, const pipe::StepBarriers& step_bars,
                                                    ptx::L2Hint wl2, unsigned char* s_data, unsigned char* s_x, int st,
                                                    int s_begin, int r_begin, int tiles_w, int tile_first,
                                                    const bool (&tile_in)[R], int m0, int warp, int wn) {
#if __CUDA_ARCH__ >= 900
  constexpr int kTilesPerHead = D / 16;
  const unsigned b = step_bars.arm((st - r_begin) * WarpsN + wn, unsigned(tiles_w * 1024 + (XTma ? kXBox : 0)));
  if (XTma)
    ptx::tma_load_3d(ptx::smem_u32(s_x + (warp * kWindow + (st - s_begin) % kWindow) * kXBox), xmap, 0,
                     st * (kStepK / 64), m0, b, ptx::L2Hint{});
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int T = tile_first + r;
    if (!tile_in[r]) continue;
    const unsigned dst = ptx::smem_u32(s_data + ((warp * kRing + (st - s_begin) % kRing) * R + r) * 1024);
    if (p.w_k_blocked)  // box {64 bytes, rows g 0..7, tile T % (D / 16), halves 2 head + 0..1, K block st}
      ptx::tma_load_5d(dst, wmap, 0, 0, T % kTilesPerHead, 2 * (T / kTilesPerHead), st, b, wl2);
    else  // box {64 bytes of K, rows g 0..7, half h 0..1} of tile T % (D / 16) of head T / (D / 16)
      ptx::tma_load_5d(dst, wmap, st * 64, 0, 0, T % kTilesPerHead, T / kTilesPerHead, b, wl2);
  }
#else
  (void)p, (void)wmap, (void)xmap, (void)step_bars, (void)wl2, (void)s_data, (void)s_x, (void)st, (void)s_begin,
      (void)r_begin, (void)tiles_w, (void)tile_first, (void)tile_in, (void)m0, (void)warp, (void)wn;
#endif
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

}  // namespace qkv
}  // namespace kt
