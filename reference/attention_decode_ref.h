// CPU float64 reference for attention decode over a KV cache (contiguous or paged), used by tests and by the
// tuner's verification of attention_decode candidates.
//
// Per sequence b, query token i (of q_len new tokens) and query head h, with L = seqlens_k[b] and
// g = h / (num_heads / num_kv_heads):
//   visible keys  j in [0, last], last = L - q_len + i when causal (the new tokens are the cache's last q_len
//                 tokens, causal among themselves: FlashAttention's bottom-right alignment), else L - 1
//   s_j   = softmax_scale * dot(q[b, i, h, :], K_b[j, g, :])
//   lse   = log(sum_j exp(s_j))                                   (natural log)
//   out   = sum_j exp(s_j - lse) * V_b[j, g, :]
// K_b[j] is k[b, j] for a contiguous cache [B, S_max, Hkv, D] and k_pages[block_table[b][j / page_size],
// j % page_size] for a paged cache [num_pages, page_size, Hkv, D]. A row with no visible key (L == 0, or causal
// with L - q_len + i < 0) gets out = 0 and lse = -infinity. Evaluated max-subtracted in float64.
#pragma once

#include <cstddef>

namespace kt::ref {

/// Geometry of one decode call: batch B, q_len new tokens per sequence, num_heads Hq, num_kv_heads Hkv, head_dim D.
struct DecodeShape {
  int batch;
  int q_len;
  int num_heads;
  int num_kv_heads;
  int head_dim;
  bool causal;
  double softmax_scale;
};

/// A KV cache as float arrays holding exactly the fp16/bf16 values, contiguous row-major.
///  contiguous (paged == false): k, v [batch, s_max, Hkv, D]; block_table ignored.
///  paged: k, v [num_pages, page_size, Hkv, D]; block_table [batch, max_pages_per_seq] int32.
struct KvCacheView {
  const float* k;
  const float* v;
  bool paged;
  int s_max;              ///< contiguous: tokens per sequence slot
  int page_size;          ///< paged: tokens per page
  int num_pages;          ///< paged: pages in k and v
  int max_pages_per_seq;  ///< paged: block-table row length
  const int* block_table;
};

/// Validates a shape: every size >= 1, num_heads % num_kv_heads == 0, softmax_scale finite. Throws
/// std::invalid_argument naming the field, e.g. "DecodeShape: q_len must be >= 1 (got 0)".
void validate(const DecodeShape& shape);

/// Validates the cache against the lengths: seqlens_k[b] in [0, capacity] (s_max, or max_pages_per_seq * page_size),
/// and for paged every block-table entry a length reaches in [0, num_pages). Throws std::invalid_argument naming the
/// field and the sequence.
void validate(const DecodeShape& shape, const KvCacheView& cache, const int* seqlens_k);

/// Full decode attention: q [B, q_len, Hq, D] float (exact dtype values), seqlens_k [B]. Writes out [B, q_len, Hq, D]
/// float64 and lse [B, Hq, q_len] float64 natural log (may be null). Throws std::invalid_argument for an invalid
/// shape or cache (see validate).
void attention_decode(const DecodeShape& shape, const float* q, const KvCacheView& cache, const int* seqlens_k,
                      double* out, double* lse);

/// One output row (b, i, h) into out[0..D), returning its lse; same conventions and errors as attention_decode (also
/// for b, i, h out of range).
double attention_decode_row(const DecodeShape& shape, const float* q, const KvCacheView& cache, const int* seqlens_k,
                            int b, int i, int h, double* out);

}  // namespace kt::ref
