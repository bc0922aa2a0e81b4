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

/// Keys the query rows [m0, m0 + tile_m) attend to: all seqlen_k, or (causal, bottom-right aligned: row r sees keys
/// up to r + seqlen_k - seqlen_q) up to the last row's diagonal; 0 or less when no row sees a key.
template <bool Causal>
__device__ __forceinline__ int keys_needed(const FwdParams& p, int m0, int tile_m) {
  if (!Causal) return p.seqlen_k;
  return min(p.seqlen_k, min(m0 + tile_m, p.seqlen_q) + p.seqlen_k - p.seqlen_q);
}

}  // namespace attn
}  // namespace kt
