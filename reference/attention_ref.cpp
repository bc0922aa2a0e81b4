#include "reference/attention_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace kt::ref {
namespace {

void require_positive(const char* field, int value) {
  if (value < 1)
    throw std::invalid_argument(std::string("AttentionShape: ") + field + " must be >= 1 (got " +
                                std::to_string(value) + ")");
}

}  // namespace

void validate(const AttentionShape& s) {
  require_positive("batch", s.batch);
  require_positive("seqlen_q", s.seqlen_q);
  require_positive("seqlen_k", s.seqlen_k);
  require_positive("num_heads", s.num_heads);
  require_positive("num_kv_heads", s.num_kv_heads);
  require_positive("head_dim", s.head_dim);
  if (s.num_heads % s.num_kv_heads != 0)
    throw std::invalid_argument("AttentionShape: num_heads (" + std::to_string(s.num_heads) +
                                ") must be a multiple of num_kv_heads (" + std::to_string(s.num_kv_heads) + ")");
  if (!std::isfinite(s.softmax_scale)) throw std::invalid_argument("AttentionShape: softmax_scale must be finite");
}

int last_visible_key(const AttentionShape& s, int i) {
  if (!s.causal) return s.seqlen_k - 1;
  const long long last = static_cast<long long>(i) + s.seqlen_k - s.seqlen_q;
  return static_cast<int>(std::min<long long>(s.seqlen_k - 1, std::max<long long>(-1, last)));
}

namespace {

// Row computation without validation; `scores` is scratch of at least Sk doubles.
double row_impl(const AttentionShape& s, const float* q, const float* k, const float* v, int b, int i, int h,
                double* out, std::vector<double>& scores) {
  const int D = s.head_dim;
  const int g = h / (s.num_heads / s.num_kv_heads);
  std::fill(out, out + D, 0.0);
  const int last = last_visible_key(s, i);
  if (last < 0) return -std::numeric_limits<double>::infinity();

  const float* qrow = q + ((static_cast<size_t>(b) * s.seqlen_q + i) * s.num_heads + h) * D;
  const size_t kv_row_stride = static_cast<size_t>(s.num_kv_heads) * D;
  const float* kbase = k + (static_cast<size_t>(b) * s.seqlen_k * s.num_kv_heads + g) * D;
  const float* vbase = v + (static_cast<size_t>(b) * s.seqlen_k * s.num_kv_heads + g) * D;

  double mx = -std::numeric_limits<double>::infinity();
  for (int j = 0; j <= last; ++j) {
    const float* krow = kbase + j * kv_row_stride;
    double dot = 0.0;
    for (int d = 0; d < D; ++d) dot += static_cast<double>(qrow[d]) * static_cast<double>(krow[d]);
    scores[j] = s.softmax_scale * dot;
    mx = std::max(mx, scores[j]);
  }
  double sum = 0.0;
  for (int j = 0; j <= last; ++j) {
    const double p = std::exp(scores[j] - mx);
    sum += p;
    const float* vrow = vbase + j * kv_row_stride;
    for (int d = 0; d < D; ++d) out[d] += p * static_cast<double>(vrow[d]);
  }
  for (int d = 0; d < D; ++d) out[d] /= sum;
  return mx + std::log(sum);
}

}  // namespace

double attention_row(const AttentionShape& s, const float* q, const float* k, const float* v, int b, int i, int h,
                     double* out) {
  validate(s);
  if (b < 0 || b >= s.batch || i < 0 || i >= s.seqlen_q || h < 0 || h >= s.num_heads)
    throw std::invalid_argument("attention_row: (b=" + std::to_string(b) + ", i=" + std::to_string(i) +
                                ", h=" + std::to_string(h) + ") out of range");
  std::vector<double> scores(static_cast<size_t>(s.seqlen_k));
  return row_impl(s, q, k, v, b, i, h, out, scores);
}

void attention(const AttentionShape& s, const float* q, const float* k, const float* v, double* out, double* lse) {
  validate(s);
  std::vector<double> scores(static_cast<size_t>(s.seqlen_k));
  for (int b = 0; b < s.batch; ++b)
    for (int i = 0; i < s.seqlen_q; ++i)
      for (int h = 0; h < s.num_heads; ++h) {
        double* orow = out + ((static_cast<size_t>(b) * s.seqlen_q + i) * s.num_heads + h) * s.head_dim;
        const double l = row_impl(s, q, k, v, b, i, h, orow, scores);
        if (lse) lse[(static_cast<size_t>(b) * s.num_heads + h) * s.seqlen_q + i] = l;
      }
}

Comparison compare(const float* out, const double* ref, size_t n) {
  Comparison c{0.0, 0.0, 0, static_cast<long long>(n)};
  double diff2 = 0.0, ref2 = 0.0;
  for (size_t e = 0; e < n; ++e) {
    if (!std::isfinite(out[e])) {
      ++c.nan_count;
      continue;
    }
    const double d = static_cast<double>(out[e]) - ref[e];
    diff2 += d * d;
    ref2 += ref[e] * ref[e];
    c.max_abs = std::max(c.max_abs, std::abs(d));
  }
  c.rel_l2 = ref2 > 0.0 ? std::sqrt(diff2) / std::sqrt(ref2) : std::sqrt(diff2);
  return c;
}

}  // namespace kt::ref
