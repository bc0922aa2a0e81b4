// Stream-K reduction of the warp-specialized Hopper mainloop (qkv_wgmma_ws.cuh, WsSplit::stream_k): a tile whose K
// steps are split over several blocks is reduced through the workspace.
//
//   Units (tile, K step), tile-major, nk K steps per tile. The first dp_units units are whole tiles (the data-parallel
//   rounds); block b of the G blocks owns units [dp_units + units b / G, dp_units + units (b + 1) / G) of the rest.
//   A tile covered by several blocks is finished by its owner, the block whose range holds the tile's first K steps
//   (blocks.first): that segment is the last of the owner's range, while the other blocks' segments of the tile are
//   the first of theirs. Each other block stores its fp32 partial sums (the accumulator layout: float4 v of consumer
//   thread ctid at v kCThreads + ctid, TileM x TileN floats in all) into its own workspace slot and counts them on the
//   tile's counter with one release (ws_stream_k_publish), early in its range; the owner keeps its partial in
//   registers, waits for the count (normally long reached), adds the others' partials in block order and resets the
//   counter for the next launch (ws_stream_k_fixup). The owner waits only on blocks of higher index, each of which
//   publishes before it waits on anything: no cycle, and with one block per SM every block is resident.
//   Workspace: 2 slots per block (slot 2 b for the tile b's range starts in, 2 b + 1 for the one it ends in), TileM x
//   TileN fp32 each. Counters: one unsigned per tile, 0 between launches.
// Compiled by NVRTC only. No standard headers.
#pragma once
#include "common/ptx.cuh"
#include "qkv_proj/qkv_epilogue.cuh"
#include "qkv_proj/qkv_proj_config.h"

namespace kt {
namespace qkv {

/// Block of the range split that holds unit u (counted from the split's first unit): the largest b with
/// floor(units b / G) <= u.
__device__ __forceinline__ int ws_block_of(int u, int units, int G) { return int(((u + 1LL) * G - 1) / units); }

/// Stream-K geometry of one launch: nk K steps per tile, dp_units units of whole tiles before the split, units of the
/// split over G blocks.
struct WsStreamK {
  int nk, dp_units, units, G;
  /// Workspace slot of block b's partials of tile t: 2 b, or 2 b + 1 for a range that ends in another tile.
  __device__ __forceinline__ long long slot(int b, int t) const {
    return 2LL * b + ((dp_units + int((long long)units * b / G)) / nk == t ? 0 : 1);
  }
};

/// The blocks b_first .. b_last whose ranges cover tile t (ws_tile_blocks); b_first is the tile's owner.
struct WsTileBlocks {
  int first, last;
};
/// The blocks whose ranges cover the split tile t (t's units counted from the split's first unit, dp_units).
__device__ __forceinline__ WsTileBlocks ws_tile_blocks(const WsStreamK& sk, int t) {
  return WsTileBlocks{ws_block_of(t * sk.nk - sk.dp_units, sk.units, sk.G),
                      ws_block_of((t + 1) * sk.nk - 1 - sk.dp_units, sk.units, sk.G)};
}

/// A block other than tile t's owner: stores its partial sums of the tile (acc: kAtoms m64 atoms x TileM / 2
/// accumulators per thread, kCThreads consumer threads) into its workspace slot and counts them on the tile's counter.
template <int kAtoms, int TileM, int TileN, int kCThreads>
__device__ __forceinline__ void ws_stream_k_publish(const float (&acc)[kAtoms][TileM / 2], const QkvParams& p,
                                                    const WsStreamK& sk, int t, int blk, int ctid) {
  auto acc4 = [&](int v) -> const float* { return &acc[(4 * v) / (TileM / 2)][(4 * v) % (TileM / 2)]; };
  constexpr int kVec = kAtoms * TileM / 8;  // float4s per thread; element (v, c) at [(v kCThreads + ctid) 4 + c]
  constexpr long long kSlot = (long long)TileM * TileN;
  float4* mine = reinterpret_cast<float4*>(p.workspace + sk.slot(blk, t) * kSlot);
#pragma unroll
  for (int v = 0; v < kVec; ++v)
    __stcg(mine + v * kCThreads + ctid, make_float4(acc4(v)[0], acc4(v)[1], acc4(v)[2], acc4(v)[3]));
  // One release per block publishes its stores (the barrier orders every thread's stores before thread 0's atomic).
  ptx::named_barrier(1, kCThreads);
  if (ctid == 0) ptx::atomic_add_acq_rel_gpu(p.counters + t, 1u);
}

/// Tile t's owner (blocks.first): waits until the tile's other blocks have counted their partials, then acc (its own
/// partial) += theirs in block order, ((p_first + p_first+1) + ...) + p_last: the same bits on every run. Resets the
/// counter. The acquire load, then the barrier, makes every partial visible to all the owner's threads.
template <int kAtoms, int TileM, int TileN, int kCThreads>
__device__ __forceinline__ void ws_stream_k_fixup(float (&acc)[kAtoms][TileM / 2], const QkvParams& p,
                                                  const WsStreamK& sk, int t, const WsTileBlocks& blocks, int ctid) {
  auto acc4 = [&](int v) -> float* { return &acc[(4 * v) / (TileM / 2)][(4 * v) % (TileM / 2)]; };
  constexpr int kVec = kAtoms * TileM / 8;  // float4s per thread
  constexpr long long kSlot = (long long)TileM * TileN;
  const int n = blocks.last - blocks.first;  // the partials to read: blocks first + 1 .. last
  if (ctid == 0)
    while (ptx::ld_acquire_gpu(p.counters + t) != unsigned(n)) __nanosleep(32);
  ptx::named_barrier(1, kCThreads);
  // At most 16 float4 loads in flight (64 registers beside up to 128 accumulators: no spills at 232 registers):
  // small partials (kVec < 16) are read kPer blocks at a time, so their L2 round trips overlap; large ones 16 loads
  // at a time.
  constexpr int kPer = kVec >= 16 ? 1 : 16 / kVec;
  for (int u0 = 0; u0 < n; u0 += kPer) {
    if (kPer == 1) {
      const float4* part = reinterpret_cast<const float4*>(p.workspace + sk.slot(blocks.first + 1 + u0, t) * kSlot);
#pragma unroll
      for (int v = 0; v < kVec; ++v) {
        if (v % 16 == 0 && v > 0) asm volatile("" ::: "memory");
        add_f4(acc4(v), __ldcg(part + v * kCThreads + ctid));
      }
    } else {
      float4 xv[kPer][kVec];
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        const float4* part =
            reinterpret_cast<const float4*>(p.workspace + sk.slot(blocks.first + 1 + min(u0 + u, n - 1), t) * kSlot);
#pragma unroll
        for (int v = 0; v < kVec; ++v)
          xv[u][v] = u0 + u < n ? __ldcg(part + v * kCThreads + ctid) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        if (u0 + u >= n) break;
#pragma unroll
        for (int v = 0; v < kVec; ++v) add_f4(acc4(v), xv[u][v]);
      }
    }
  }
  if (ctid == 0) p.counters[t] = 0u;  // every other block has counted: ready for the next launch
}

}  // namespace qkv
}  // namespace kt
