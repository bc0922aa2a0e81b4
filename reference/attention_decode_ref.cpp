#include "reference/attention_decode_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace kt::ref {
namespace {

[[noreturn]] void bad(const std::string& msg) { throw std::invalid_argument("DecodeShape: " + msg); }

void require_positive(const char* field, int value) {
  if (value < 1) bad(std::string(field) + " must be >= 1 (got " + std::to_string(value) + ")");
}

/// Row j of head g of sequence b's K (or V) in the cache.
const float* cache_row(const DecodeShape& s, const KvCacheView& c, const float* base, int b, int j, int g) {
  const size_t hd = static_cast<size_t>(s.num_kv_heads) * s.head_dim;
  if (!c.paged) return base + (static_cast<size_t>(b) * c.s_max + j) * hd + static_cast<size_t>(g) * s.head_dim;
  const int page = c.block_table[static_cast<size_t>(b) * c.max_pages_per_seq + j / c.page_size];
  return base + (static_cast<size_t>(page) * c.page_size + j % c.page_size) * hd + static_cast<size_t>(g) * s.head_dim;
}

double row_impl(const DecodeShape& s, const float* q, const KvCacheView& c, const int* seqlens_k, int b, int i, int h,
                double* out, std::vector<double>& scores) {
  const int D = s.head_dim;
  const int g = h / (s.num_heads / s.num_kv_heads);
  std::fill(out, out + D, 0.0);
  const int len = seqlens_k[b];
  const int last = s.causal ? len - s.q_len + i : len - 1;
  if (last < 0) return -std::numeric_limits<double>::infinity();
  scores.resize(static_cast<size_t>(last) + 1);
  const float* qrow = q + ((static_cast<size_t>(b) * s.q_len + i) * s.num_heads + h) * D;
  double mx = -std::numeric_limits<double>::infinity();
  for (int j = 0; j <= last; ++j) {
    const float* krow = cache_row(s, c, c.k, b, j, g);
    double dot = 0.0;
    for (int d = 0; d < D; ++d) dot += static_cast<double>(qrow[d]) * static_cast<double>(krow[d]);
    scores[j] = s.softmax_scale * dot;
    mx = std::max(mx, scores[j]);
  }
  double sum = 0.0;
  for (int j = 0; j <= last; ++j) {
    const double p = std::exp(scores[j] - mx);
    sum += p;
    const float* vrow = cache_row(s, c, c.v, b, j, g);
    for (int d = 0; d < D; ++d) out[d] += p * static_cast<double>(vrow[d]);
  }
  for (int d = 0; d < D; ++d) out[d] /= sum;
  return mx + std::log(sum);
}

}  // namespace

void validate(const DecodeShape& s) {
  require_positive("batch", s.batch);
  require_positive("q_len", s.q_len);
  require_positive("num_heads", s.num_heads);
  require_positive("num_kv_heads", s.num_kv_heads);
  require_positive("head_dim", s.head_dim);
  if (s.num_heads % s.num_kv_heads != 0)
    bad("num_heads (" + std::to_string(s.num_heads) + ") must be a multiple of num_kv_heads (" +
        std::to_string(s.num_kv_heads) + ")");
  if (!std::isfinite(s.softmax_scale)) bad("softmax_scale must be finite");
}

void validate(const DecodeShape& s, const KvCacheView& c, const int* seqlens_k) {
  validate(s);
  if (!c.k || !c.v || !seqlens_k) bad("k, v and seqlens_k must be non-null");
  long long capacity = c.s_max;
  if (c.paged) {
    require_positive("page_size", c.page_size);
    require_positive("num_pages", c.num_pages);
    require_positive("max_pages_per_seq", c.max_pages_per_seq);
    if (!c.block_table) bad("block_table must be non-null for a paged cache");
    capacity = static_cast<long long>(c.max_pages_per_seq) * c.page_size;
  } else {
    require_positive("s_max", c.s_max);
  }
  for (int b = 0; b < s.batch; ++b) {
    const int len = seqlens_k[b];
    if (len < 0 || len > capacity)
      bad("seqlens_k[" + std::to_string(b) + "] = " + std::to_string(len) + " is outside [0, " +
          std::to_string(capacity) + "]");
    if (!c.paged) continue;
    for (int p = 0; p < (len + c.page_size - 1) / c.page_size; ++p) {
      const int page = c.block_table[static_cast<size_t>(b) * c.max_pages_per_seq + p];
      if (page < 0 || page >= c.num_pages)
        bad("block_table[" + std::to_string(b) + "][" + std::to_string(p) + "] = " + std::to_string(page) +
            " is outside [0, num_pages = " + std::to_string(c.num_pages) + ")");
    }
  }
}

double attention_decode_row(const DecodeShape& s, const float* q, const KvCacheView& c, const int* seqlens_k, int b,
                            int i, int h, double* out) {
  validate(s, c, seqlens_k);
  if (b < 0 || b >= s.batch || i < 0 || i >= s.q_len || h < 0 || h >= s.num_heads)
    throw std::invalid_argument("attention_decode_row: (b, i, h) = (" + std::to_string(b) + ", " + std::to_string(i) +
                                ", " + std::to_string(h) + ") is out of range");
  std::vector<double> scores;
  return row_impl(s, q, c, seqlens_k, b, i, h, out, scores);
}

void attention_decode(const DecodeShape& s, const float* q, const KvCacheView& c, const int* seqlens_k, double* out,
                      double* lse) {
  validate(s, c, seqlens_k);
  std::vector<double> scores;
  for (int b = 0; b < s.batch; ++b)
    for (int i = 0; i < s.q_len; ++i)
      for (int h = 0; h < s.num_heads; ++h) {
        double* o = out + ((static_cast<size_t>(b) * s.q_len + i) * s.num_heads + h) * s.head_dim;
        const double l = row_impl(s, q, c, seqlens_k, b, i, h, o, scores);
        if (lse) lse[(static_cast<size_t>(b) * s.num_heads + h) * s.q_len + i] = l;
      }
}

}  // namespace kt::ref
