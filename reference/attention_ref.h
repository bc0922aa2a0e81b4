// CPU float64 reference for scaled dot-product attention (forward), used by tests and by the tuner's
// verification of every candidate kernel before it may be timed.
//
// Formula (Vaswani et al. 2017, "Attention Is All You Need", eq. 1), per batch b, query row i and
// query head h:
//   s_j   = softmax_scale * dot(q[b, i, h, :], k[b, j, g, :])        for every visible key j
//   lse   = log(sum_j exp(s_j))                                      (natural log)
//   out   = sum_j exp(s_j - lse) * v[b, j, g, :]
// with g = h / (num_heads / num_kv_heads) (grouped-query attention, Ainslie et al. 2023; MQA when
// num_kv_heads == 1). Softmax is evaluated max-subtracted (s_j - max_j s_j) in float64.
// Causal masking is bottom-right aligned as in FlashAttention 2.1+: query i sees key j iff
// j <= i + (seqlen_k - seqlen_q).
#pragma once

#include <cstddef>

namespace kt::ref {

/// Geometry of one attention problem.
///  batch B, seqlen_q Sq, seqlen_k Sk, num_heads Hq (query heads), num_kv_heads Hkv, head_dim D;
///  causal: bottom-right aligned causal mask; softmax_scale: multiplier of q.k (usually 1/sqrt(D)).
struct AttentionShape {
  int batch;
  int seqlen_q;
  int seqlen_k;
  int num_heads;
  int num_kv_heads;
  int head_dim;
  bool causal;
  double softmax_scale;
};

/// Validates a shape: batch, seqlen_q, seqlen_k, num_heads, num_kv_heads, head_dim all >= 1,
/// num_heads % num_kv_heads == 0, softmax_scale finite.
/// Throws std::invalid_argument whose message names the offending field, e.g.
/// "AttentionShape: seqlen_k must be >= 1 (got 0)".
void validate(const AttentionShape& shape);

/// Index of the last key visible to query row i (keys 0..last are visible), or -1 when none is:
/// Sk - 1 when not causal, else min(Sk - 1, i + Sk - Sq). Source: FlashAttention 2.1 causal convention.
int last_visible_key(const AttentionShape& shape, int i);

/// Computes one output row.
/// Inputs are float arrays holding exactly the fp16/bf16 values (convert with kt::dtype_to_float),
/// contiguous row-major:
///   q [B, Sq, Hq, D],  k [B, Sk, Hkv, D],  v [B, Sk, Hkv, D].
/// Writes out[0..D) = output row (b, i, h) in float64 and returns the natural-log LSE
/// log(sum_j exp(scale * q.k_j)) over the visible keys. A row that sees no key (causal with
/// Sq > Sk) gets out = 0 and returns -infinity.
/// Throws std::invalid_argument for an invalid shape (see validate) or b, i, h out of range.
double attention_row(const AttentionShape& shape, const float* q, const float* k, const float* v, int b, int i, int h,
                     double* out);

/// Full attention forward. Same inputs as attention_row. Outputs:
///   out [B, Sq, Hq, D] float64 (contiguous), lse [B, Hq, Sq] float64 natural-log (may be null).
/// Throws std::invalid_argument for an invalid shape.
void attention(const AttentionShape& shape, const float* q, const float* k, const float* v, double* out, double* lse);

/// Result of comparing a device output with the reference over a set of rows.
struct Comparison {
  double rel_l2;        ///< ||out - ref||_2 / ||ref||_2 over finite elements (0 when both are 0)
  double max_abs;       ///< max |out - ref| over finite elements
  long long nan_count;  ///< elements of out that are NaN or infinite
  long long elements;   ///< elements compared
};

/// Compares n elements of a device output (already converted to float) with the float64 reference.
/// A non-finite element of out counts in nan_count and is left out of rel_l2 / max_abs.
/// When ||ref||_2 == 0, rel_l2 is ||out - ref||_2 (absolute).
Comparison compare(const float* out, const double* ref, size_t n);

}  // namespace kt::ref
