// Which (m-block, head, batch) tile a prefill thread block computes, and how many keys it needs: the block
// scheduler shared by the mma.sync (flash_fwd.cuh) and wgmma_ws (flash_fwd_ws.cuh) mainloops.
// Compiled by NVRTC only. No standard headers.
#pragma once
#include "attention/attention_config.h"

namespace kt {
namespace attn {

/// A thread block's tile: query rows [m_block tile_m, + tile_m) of (batch, query head).
struct BlockTile {
  int m_block, head, batch;
};

/// Raster 0: grid (m-blocks, heads, batch); raster 1: grid (heads, batch, m-blocks). Causal blocks are visited
/// heaviest (most keys) first: per (batch, head) in raster 0, across the whole grid in raster 1 (blocks are
/// dispatched in linear block-index order, x fastest).
template <bool Causal, int Raster>
__device__ __forceinline__ BlockTile block_tile() {
  const int num_m_blocks = Raster == 0 ? gridDim.x : gridDim.z;
  const int m_index = Raster == 0 ? blockIdx.x : blockIdx.z;
  BlockTile t;
  t.m_block = Causal ? num_m_blocks - 1 - m_index : m_index;
  t.head = Raster == 0 ? blockIdx.y : blockIdx.x;
  t.batch = Raster == 0 ? blockIdx.z : blockIdx.y;
  return t;
}

/// The tiles of a launch in the order of a non-persistent grid's linear block index (x fastest), for the raster's grid:
/// raster 0 (m-blocks, heads, batch), raster 1 (heads, batch, m-blocks); causal m-blocks heaviest first, as
/// block_tile. Persistent: block b of a grid of G blocks computes tiles b, b + G, b + 2 G, ... (a static schedule: with
/// heaviest-first order every round hands the G blocks tiles of similar cost). Otherwise block b computes tile b alone.
template <bool Causal, int Raster, bool Persistent>
struct TileScheduler {
  int m_blocks, heads, batches;

  __device__ __forceinline__ int total() const { return m_blocks * heads * batches; }
  __device__ __forceinline__ int first() const {
    return Persistent ? int(blockIdx.x) : int(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
  }
  __device__ __forceinline__ int stride() const { return Persistent ? int(gridDim.x) : total(); }
  /// Tile t (0 <= t < total()).
  __device__ __forceinline__ BlockTile tile(int t) const {
    int m_index;
    BlockTile b;
    if (Raster == 0) {
      m_index = t % m_blocks;
      b.head = (t / m_blocks) % heads;
      b.batch = t / (m_blocks * heads);
    } else {
      b.head = t % heads;
      b.batch = (t / heads) % batches;
      m_index = t / (heads * batches);
    }
    b.m_block = Causal ? m_blocks - 1 - m_index : m_index;
    return b;
  }
};

/// Keys the query rows [m0, m0 + tile_m) attend to: all seqlen_k, or (causal, bottom-right aligned: row r sees keys
/// up to r + seqlen_k - seqlen_q) up to the last row's diagonal; 0 or less when no row sees a key.
template <bool Causal>
__device__ __forceinline__ int keys_needed(const FwdParams& p, int m0, int tile_m) {
  if (!Causal) return p.seqlen_k;
  return min(p.seqlen_k, min(m0 + tile_m, p.seqlen_q) + p.seqlen_k - p.seqlen_q);
}

}  // namespace attn
}  // namespace kt
