// Attention decode family (split-KV flash decoding over a KV cache): the part shared by host (generator,
// runtime) and device (NVRTC). No standard headers: compiled by NVRTC too.
//
// Split of the family's parameters (ARCHITECTURE.md, "A kernel family"):
//  * Problem (result-defining, host side, generator/decode_family.h): dtype, batch, q_len, num_heads,
//    num_kv_heads, head_dim, kv_len, kv_layout, page_size, causal. The kernel is compiled for (dtype, head_dim,
//    kv_layout, page_size) and the config; everything else is a run-time argument (DecodeParams).
//  * Config (speed-only knobs): tile_m, tile_n, warps, stages, kv_chunk, cluster, wgmma, cooperative.
// invalid_reason() is the single source of truth for which (class, config, arch) are valid: the generator prunes
// with it and attention_decode.cuh static_asserts it.
//
// Work decomposition. The query rows of one KV head are packed into the rows of one mma tile (GQA packing): row r of
// the group's rows is query token r / group of query head kv_head * group + r % group, with group = num_heads /
// num_kv_heads, so the K/V of a head is read once for all its query heads and tokens. rows = group * q_len; a block
// owns tile_m of them (row block rb = rows [rb tile_m, (rb + 1) tile_m)), 16 per warp of a key group, the key groups
// splitting every K/V tile's tokens between them. The KV length is split into chunks of kv_chunk tokens, one block per
// chunk (flash decoding); the blocks of one (batch, kv head, row block) store fp32 partials (O normalized, LSE) in the
// workspace and the last one to arrive combines them in split order (cooperative: every split block merges its share
// once all have stored theirs). Grid: (row_blocks * splits, num_kv_heads, batch), blockIdx.x = split * row_blocks + rb:
// the row blocks of one split are neighbours, so the second and later ones read their K/V from L2.
// With a thread-block cluster (Config::cluster, sm_90) the splits of a row block are consecutive blocks,
// blockIdx.x = rb * splits + split, and each cluster of `cluster` splits first merges its partials in distributed
// shared memory; with more than one cluster per row block (kv_chunk > 0), the clusters' merged partials go through the
// workspace as above, one partial per cluster.
#pragma once
#include "common/kt_types.h"

namespace kt {
namespace decode {

/// KV cache layout.
///  contiguous: K, V [batch, S_max, num_kv_heads, head_dim]: sequence b's token t at k + b k_batch_stride + t
///              k_row_stride.
///  paged:      K, V [num_pages, page_size, num_kv_heads, head_dim] with a block table [batch, max_pages_per_seq]
///              int32: sequence b's token t lies in page block_table[b][t / page_size], row t % page_size (the
///              vLLM / FlashInfer layout).
enum class KvLayout : int { contiguous = 0, paged = 1 };

/// Speed-only knobs. Never part of the database key.
struct Config {
  int tile_m;    ///< packed query rows (group x q_len) per block: 16, 32 or 64 (mma M fragments of 16)
  int tile_n;    ///< KV tokens per tile (one cp.async ring slot holds the tile's K and V)
  int warps;     ///< warps per block: tile_m / 16 row groups x key groups; a warp owns 16 rows and
                 ///< tile_n / key_groups consecutive tokens of every tile
  int stages;    ///< cp.async ring depth: K/V tiles in flight (2..6)
  int kv_chunk;  ///< KV tokens per split block, a multiple of tile_n; 0 = no split (one block per sequence)
  /// 1: splits (kv_chunk) merge through the workspace, the last block of a row block combining them. 2, 4, 8 or 16
  /// (sm_90): the splits form thread-block clusters of `cluster` consecutive splits, which merge their partials in
  /// distributed shared memory. kv_chunk 0: one cluster per row block, its keys divided over the cluster's blocks
  /// (split_keys; no workspace); kv_chunk > 0: as many clusters as kv_len needs (a whole number of clusters of
  /// kv_chunk-token splits), whose merged partials then combine through the workspace.
  int cluster = 1;
  /// 0: each warp computes S = Q K^T and O += P V over its 16 rows with mma.sync (K and V read from shared memory by
  /// ldmatrix, once per row group). 1 (sm_90a, tile_m 64): each key group is one warpgroup whose 4 warps' 64 rows take
  /// the products by wgmma from shared memory (K and V read once per key group), the tiles in the 128-byte swizzle
  /// wgmma's descriptors name.
  int wgmma = 0;
  /// 0: the last split block of a row block to store its partial merges all the splits' partials (any grid).
  /// 1 (cluster 1, kv_chunk > 0): a cooperative launch, the whole grid resident at once: every split block waits
  /// until its row block's partials are all stored, then merges its share of the output (split_combine_share), so the
  /// merge runs on every split's SM at once instead of one. The launch falls back to 0 (the same binary) where the grid
  /// does not fit the GPU at once (runtime/decode.cpp).
  int cooperative = 0;
};

/// Run-time arguments of the kernel. All strides are in elements; the last dimension (head_dim) of every tensor is
/// contiguous. Layouts:
///   q   [batch, q_len, num_heads, head_dim]  dtype
///   k,v contiguous: [batch, S_max, num_kv_heads, head_dim]          (k_batch_stride, k_row_stride, k_head_stride)
///       paged:      [num_pages, page_size, num_kv_heads, head_dim]  (k_page_stride,  k_row_stride, k_head_stride)
///   block_table [batch, max_pages_per_seq] int32, row stride block_table_stride (paged only; null for contiguous)
///   seqlens_k   [batch] int32: the tokens of each sequence in the cache, new tokens included
///   o   [batch, q_len, num_heads, head_dim]  dtype
///   lse [batch, num_heads, q_len] fp32, contiguous, natural log; may be null.
/// Query head h reads KV head h / (num_heads / num_kv_heads). With causal (the new tokens causal among themselves,
/// bottom-right aligned as FlashAttention), query token i of sequence b sees keys [0, seqlens_k[b] - q_len + i];
/// without, keys [0, seqlens_k[b]). A row that sees no key gets o = 0 and lse = -inf.
///
/// What the kernel trusts the caller for (device-resident, not checked by the host): seqlens_k[b] in
/// [0, kv_capacity] (a longer length is clamped to kv_capacity, a negative one counts as 0), and the block-table
/// entries a sequence's length reaches in [0, num_pages) (an entry outside reads as zeros, never out of bounds).
/// A sequence longer than kv_len (the grid's sizing length) is still computed in full: the last split block takes
/// the remainder.
struct DecodeParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  const int* seqlens_k;
  const int* block_table;  ///< paged only
  long long q_batch_stride, q_row_stride, q_head_stride;
  long long k_batch_stride, k_page_stride, k_row_stride, k_head_stride;  ///< batch: contiguous; page: paged
  long long v_batch_stride, v_page_stride, v_row_stride, v_head_stride;
  long long o_batch_stride, o_row_stride, o_head_stride;
  long long block_table_stride;  ///< elements between block-table rows (paged)
  int batch, q_len, num_heads, num_kv_heads;
  int kv_len;           ///< the length the grid is sized for (splits = ceil(kv_len / kv_chunk)); host value
  int kv_capacity;      ///< tokens a sequence may hold: S_max (contiguous) or max_pages_per_seq * page_size (paged)
  int page_size;        ///< tokens per page (paged; the kernel's compiled page size, or it traps); 0 for contiguous
  int causal;           ///< 1: new tokens causal among themselves (see above); 0: every row sees the whole sequence
  float softmax_scale;  ///< multiplies Q K^T before the softmax (default 1/sqrt(head_dim))
  float scale_log2;     ///< softmax_scale * log2(e): the kernel works with exp2
  int num_pages;        ///< pages of the paged cache: a block-table entry outside [0, num_pages) reads as zeros
  /// Config::kv_chunk (set by bind_config, generator/decode_family.h): split s of a sequence of length L covers
  /// keys [s kv_chunk, (s + 1) kv_chunk), the last of the grid's splits up to L. Unused when the grid has one split.
  int kv_chunk;
  /// Config::cooperative (set by bind_config): 1 only in a cooperative launch (every block resident at once), where the
  /// split blocks wait on each other; 0 otherwise.
  int cooperative;
  /// Split partials (null without workspace, see workspace_splits): O [batch, num_kv_heads, row_blocks, slots, tile_m,
  /// head_dim] fp32 (normalized per slot) and LSE [batch, num_kv_heads, row_blocks, slots, tile_m] fp32 (log2), slots =
  /// partial_slots (one per split, or one per cluster);
  /// only the rows a row block holds (< group * q_len) are written and read.
  float* partial_o;
  float* partial_lse;
  /// One counter per (batch, kv head, row block) (groups = batch x num_kv_heads x row_blocks), zero before the first
  /// launch; the combining block resets its counter, so they stay zero between launches. Cooperative: then one
  /// generation word per group, counters[groups + g], which each launch's last arriving block advances by one (any
  /// start value). A workspace and its counters serve one launch at a time (launches on one stream, or otherwise
  /// ordered).
  unsigned* counters;
};

/// Page sizes the paged layout supports (tokens per page; powers of two).
constexpr int kMinPageSize = 16;
constexpr int kMaxPageSize = 256;

/// log2 of a power of two (compile-time shifts for the page size).
KT_HD constexpr int log2_pow2(int x) { return x <= 1 ? 0 : 1 + log2_pow2(x / 2); }

/// nullptr if page_size suits the layout, otherwise the rule it breaks. The page size is part of the kernel class
/// (attention_decode.cuh compiles it in and static_asserts this function): 0 for a contiguous cache; a power of two
/// kMinPageSize..kMaxPageSize tokens for a paged one.
KT_HD constexpr const char* invalid_page_size(KvLayout layout, int page_size) {
  if (layout == KvLayout::contiguous) return page_size == 0 ? nullptr : "page_size must be 0 for a contiguous cache";
  if (page_size < kMinPageSize || page_size > kMaxPageSize || (page_size & (page_size - 1)) != 0)
    return "page_size must be 16, 32, 64, 128 or 256 for a paged cache";
  return nullptr;
}

/// Largest q_len (speculative / multi-token decode) the family supports.
constexpr int kMaxQLen = 16;

/// Row groups of a block: m16 fragments of packed rows, one per warp of a key group.
KT_HD constexpr int row_groups(const Config& c) { return c.tile_m / 16; }
/// Key groups of a block: the warps that share a row group, each with its own slice of every tile's tokens.
KT_HD constexpr int key_groups(const Config& c) { return c.warps / row_groups(c); }
/// KV tokens of every tile each warp owns.
KT_HD constexpr int warp_keys(const Config& c) { return c.tile_n / key_groups(c); }

/// Number of row blocks for a problem: ceil(group * q_len / tile_m).
KT_HD constexpr int row_blocks(const Config& c, int num_heads, int num_kv_heads, int q_len) {
  return ((num_heads / num_kv_heads) * q_len + c.tile_m - 1) / c.tile_m;
}
/// Split blocks per sequence the grid holds for a sizing length kv_len: ceil(kv_len / kv_chunk), 1 without split;
/// with a cluster, `cluster` (kv_chunk 0) or ceil(kv_len / kv_chunk) rounded up to a whole number of clusters.
KT_HD constexpr int num_splits(const Config& c, int kv_len) {
  return c.cluster > 1 && c.kv_chunk == 0 ? c.cluster
         : c.cluster > 1 ? ((kv_len + c.kv_chunk - 1) / c.kv_chunk + c.cluster - 1) / c.cluster * c.cluster
         : c.kv_chunk == 0 || kv_len <= c.kv_chunk ? 1
                                                   : (kv_len + c.kv_chunk - 1) / c.kv_chunk;
}
/// KV tokens per split block of a launch sized for kv_len (DecodeParams::kv_chunk): kv_chunk, or for a cluster
/// config with kv_chunk 0 ceil(kv_len / cluster) rounded up to whole tiles.
KT_HD constexpr int split_keys(const Config& c, int kv_len) {
  return c.cluster > 1 && c.kv_chunk == 0 ? ((kv_len + c.cluster - 1) / c.cluster + c.tile_n - 1) / c.tile_n * c.tile_n
                                          : c.kv_chunk;
}
/// Whether the launch's splits merge through the workspace (partials and counters): more than one split without a
/// cluster, or more than one cluster per row block.
KT_HD constexpr bool workspace_splits(const Config& c, int kv_len) {
  return num_splits(c, kv_len) > (c.cluster > 1 ? c.cluster : 1);
}
/// Partials per (batch, kv head, row block) in the workspace: one per split, or one per cluster; 0 without workspace.
KT_HD constexpr int partial_slots(const Config& c, int kv_len) {
  return !workspace_splits(c, kv_len) ? 0 : num_splits(c, kv_len) / (c.cluster > 1 ? c.cluster : 1);
}

/// Bytes of the cp.async ring plus the Q tile: stages x ([tile_n, D] K + [tile_n, D] V) + [tile_m, D], 2-byte
/// elements.
KT_HD constexpr int ring_bytes(const Config& c, int head_dim) {
  return (c.stages * 2 * c.tile_n + c.tile_m) * head_dim * 2;
}
/// Fp32 row stride of a warp's O in the combine area: D + 8 floats, so that the accumulator-layout float2 stores
/// of a warp (rows g, columns 2t) fall on distinct banks.
KT_HD constexpr int combine_ld(int head_dim) { return head_dim + 8; }
/// Bytes of the warps' combine area (it reuses the ring and Q tile once the mainloop is done): per key group
/// [tile_m, combine_ld] fp32 O and [tile_m] fp32 max and sum, then the block's [tile_m] fp32 LSE.
KT_HD constexpr int combine_bytes(const Config& c, int head_dim) {
  return (key_groups(c) * c.tile_m * combine_ld(head_dim) + (2 * key_groups(c) + 1) * c.tile_m) * 4;
}
/// Cluster merge (cluster > 1): output items (4 columns of one row) each block of the cluster merges; items of the row
/// block's tile_m x head_dim / 4 are dealt round-robin over the cluster's blocks. 0 without a cluster.
KT_HD constexpr int cluster_items(const Config& c, int head_dim) {
  return c.cluster > 1 ? (c.tile_m * head_dim / 4 + c.cluster - 1) / c.cluster : 0;
}
/// Offset of a block's receive area for the cluster merge: after the ring (and the combine area, which reuses it).
KT_HD constexpr int cluster_recv_offset(const Config& c, int head_dim) {
  return ring_bytes(c, head_dim) > combine_bytes(c, head_dim) ? ring_bytes(c, head_dim) : combine_bytes(c, head_dim);
}
/// Bytes of the receive area, into which every other block of the cluster writes its partial's share for this block:
/// LSE [cluster - 1][tile_m] fp32, then O [cluster - 1][cluster_items] float4 (the block's own share stays in its
/// combine area). 0 without a cluster. A dedicated area: a block may receive while its own mainloop still uses the
/// ring.
KT_HD constexpr int cluster_recv_bytes(const Config& c, int head_dim) {
  return c.cluster > 1 ? (c.cluster - 1) * (c.tile_m * 4 + cluster_items(c, head_dim) * 16) : 0;
}
/// Dynamic shared memory of a block in bytes.
KT_HD constexpr int smem_bytes(const Config& c, int head_dim) {
  return cluster_recv_offset(c, head_dim) + cluster_recv_bytes(c, head_dim);
}
/// Fp32 workspace elements for split partials: O then LSE (see DecodeParams::partial_o / partial_lse); 0 without
/// split.
KT_HD constexpr long long partial_o_floats(const Config& c, int batch, int num_heads, int num_kv_heads, int q_len,
                                           int head_dim, int kv_len) {
  return !workspace_splits(c, kv_len)
             ? 0
             : (long long)batch * num_kv_heads * row_blocks(c, num_heads, num_kv_heads, q_len) *
                   partial_slots(c, kv_len) * c.tile_m * head_dim;
}
KT_HD constexpr long long partial_lse_floats(const Config& c, int batch, int num_heads, int num_kv_heads, int q_len,
                                             int kv_len) {
  return !workspace_splits(c, kv_len)
             ? 0
             : (long long)batch * num_kv_heads * row_blocks(c, num_heads, num_kv_heads, q_len) *
                   partial_slots(c, kv_len) * c.tile_m;
}
/// Counters (unsigned): one per (batch, kv head, row block), and as many generation words after them for a
/// cooperative config; 0 without split.
KT_HD constexpr long long counter_count(const Config& c, int batch, int num_heads, int num_kv_heads, int q_len,
                                        int kv_len) {
  return !workspace_splits(c, kv_len) ? 0
                                      : (long long)batch * num_kv_heads *
                                            row_blocks(c, num_heads, num_kv_heads, q_len) * (c.cooperative ? 2 : 1);
}

/// Registers a thread holds for the output accumulator [16, D], the score tile [16, warp_keys] and the Q fragments
/// [16, D] (each warp owns one m16 fragment; with wgmma Q stays in shared memory and P's packed fragments take
/// warp_keys / 4). Used to prune variants that would spill.
KT_HD constexpr int accumulator_registers(const Config& c, int head_dim) {
  return (head_dim / 8) * 4 + (warp_keys(c) / 8) * 4 + (c.wgmma ? warp_keys(c) / 4 : (head_dim / 16) * 4);
}

/// nullptr if (kernel class, config, arch) is a valid variant, otherwise the rule it breaks.
/// One clause per rule; attention_decode.cuh static_asserts the same function.
KT_HD constexpr const char* invalid_reason(DType dtype, int head_dim, KvLayout layout, const Config& c, ArchId arch) {
  // dtype: 16-bit floating-point inputs only (fp32 accumulation).
  if (dtype != DType::f16 && dtype != DType::bf16) return "dtype must be fp16 or bf16";
  // head_dim: 64 or 128 (the shared-memory swizzle works on 8 chunks of 16 bytes per 64 columns).
  if (head_dim != 64 && head_dim != 128) return "head_dim must be 64 or 128";
  // layout: contiguous or paged.
  if (layout != KvLayout::contiguous && layout != KvLayout::paged) return "kv_layout must be contiguous or paged";
  // mma.sync m16n8k16 with bf16 needs sm_80 or newer.
  if (arch.sm < 80) return "mma.sync needs sm_80 or newer";
  // tile_m: 1, 2 or 4 m16 fragments of packed rows.
  if (c.tile_m != 16 && c.tile_m != 32 && c.tile_m != 64) return "tile_m must be 16, 32 or 64";
  // warps: 2, 4 or 8 warps per block, a whole number of key groups of tile_m / 16 warps.
  if (c.warps != 2 && c.warps != 4 && c.warps != 8) return "warps must be 2, 4 or 8";
  if (c.warps % row_groups(c) != 0) return "warps must be a multiple of tile_m / 16";
  // tile_n: a power of two 32..256 (a tile then never straddles a page of a page size >= tile_n), each warp owning
  // a multiple of 16 tokens (the P.V product steps over keys 16 at a time).
  if (c.tile_n != 32 && c.tile_n != 64 && c.tile_n != 128 && c.tile_n != 256)
    return "tile_n must be 32, 64, 128 or 256";
  if (c.tile_n % (16 * key_groups(c)) != 0) return "tile_n must be a multiple of 16 * warps / (tile_m / 16)";
  // stages: 2..6 K/V tiles in the cp.async ring.
  if (c.stages < 2 || c.stages > 6) return "stages must be 2..6";
  // kv_chunk: 0 (no split) or a whole number of tiles, at most 65536 tokens.
  if (c.kv_chunk < 0 || c.kv_chunk > 65536 || c.kv_chunk % c.tile_n != 0)
    return "kv_chunk must be 0 or a multiple of tile_n up to 65536";
  // cluster: 1, or 2 / 4 / 8 blocks (portable cluster sizes) or 16 (non-portable: the launch opts in, see
  // cuda::allow_wide_cluster) on sm_90, which size their splits from kv_len.
  if (c.cluster != 1 && c.cluster != 2 && c.cluster != 4 && c.cluster != 8 && c.cluster != 16)
    return "cluster must be 1, 2, 4, 8 or 16";
  if (c.cluster > 1 && arch.sm < 90) return "a cluster merge needs sm_90 (thread-block clusters)";
  // wgmma (sm_90a): one warpgroup per key group over all the tile's rows (4 row groups), its keys an N of wgmma's
  // m64nNk16 (16..256, a multiple of 16), the tiles in the 128-byte swizzle (column blocks of 64 elements).
  if (c.wgmma != 0 && c.wgmma != 1) return "wgmma must be 0 or 1";
  if (c.wgmma && (arch.sm < 90 || !arch.arch_specific)) return "wgmma needs sm_90a";
  if (c.wgmma && c.tile_m != 64) return "wgmma needs tile_m 64 (the 64 rows of a warpgroup)";
  if (c.wgmma && warp_keys(c) < 16) return "wgmma needs at least 16 keys per key group";
  // cooperative: the split blocks wait on each other, so only splits merged through the workspace (no cluster).
  if (c.cooperative != 0 && c.cooperative != 1) return "cooperative must be 0 or 1";
  if (c.cooperative && (c.cluster != 1 || c.kv_chunk == 0)) return "cooperative needs cluster 1 and kv_chunk > 0";
  // cp.async K/V tile loads: every thread moves the same number of 16-byte chunks.
  if ((c.tile_n * head_dim / 8) % (32 * c.warps) != 0)
    return "tile_n * head_dim / 8 must be a multiple of the block's threads";
  // shared memory: the ring + Q tile (or the warps' combine area, which reuses it), and a cluster's receive area, must fit
  // the architecture's per-block limit.
  if (smem_bytes(c, head_dim) > max_smem_per_block(arch.sm)) return "shared memory exceeds the per-block limit";
  // registers: accumulators must leave room under the 255-register cap, or the variant spills.
  if (accumulator_registers(c, head_dim) > 160) return "accumulator registers exceed 160 per thread";
  return nullptr;
}

}  // namespace decode
}  // namespace kt
