// Checks of the float64 attention decode reference: against an independent naive softmax attention, paged ==
// contiguous for the same data, the prefill reference for causal multi-token decode, empty sequences, and the
// validation errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "reference/attention_decode_ref.h"
#include "reference/attention_ref.h"
#include "reference/dtype_convert.h"

using kt::ref::DecodeShape;
using kt::ref::KvCacheView;

namespace {

std::vector<float> random_tensor(size_t n, uint64_t seed) {
  std::vector<uint16_t> bits(n);
  kt::fill_random(kt::DType::bf16, bits.data(), n, seed);
  std::vector<float> out(n);
  for (size_t e = 0; e < n; ++e) out[e] = kt::dtype_to_float(kt::DType::bf16, bits[e]);
  return out;
}

/// A contiguous cache [B, s_max, Hkv, D] and the same tokens in a paged cache whose pages are shuffled (page p of
/// sequence b is a random physical page) with one unused page at each end of the pool.
struct Caches {
  int s_max, page_size, max_pages, num_pages;
  std::vector<float> k, v, k_pages, v_pages;
  std::vector<int> table;
  KvCacheView contiguous() const { return {k.data(), v.data(), false, s_max, 0, 0, 0, nullptr}; }
  KvCacheView paged() const {
    return {k_pages.data(), v_pages.data(), true, 0, page_size, num_pages, max_pages, table.data()};
  }
};

Caches make_caches(const DecodeShape& s, int s_max, int page_size, uint64_t seed) {
  Caches c;
  c.s_max = s_max;
  c.page_size = page_size;
  c.max_pages = (s_max + page_size - 1) / page_size;
  c.num_pages = s.batch * c.max_pages + 2;
  const size_t row = static_cast<size_t>(s.num_kv_heads) * s.head_dim;
  c.k = random_tensor(static_cast<size_t>(s.batch) * s_max * row, seed);
  c.v = random_tensor(static_cast<size_t>(s.batch) * s_max * row, seed + 1);
  std::vector<int> perm(static_cast<size_t>(s.batch) * c.max_pages);
  std::iota(perm.begin(), perm.end(), 1);  // pages 1 .. B * max_pages; 0 and the last stay unused
  std::shuffle(perm.begin(), perm.end(), std::mt19937(static_cast<unsigned>(seed)));
  c.table = perm;
  c.k_pages.assign(static_cast<size_t>(c.num_pages) * page_size * row, std::nanf(""));
  c.v_pages.assign(c.k_pages.size(), std::nanf(""));
  for (int b = 0; b < s.batch; ++b)
    for (int t = 0; t < s_max; ++t) {
      const int page = c.table[static_cast<size_t>(b) * c.max_pages + t / page_size];
      const size_t src = (static_cast<size_t>(b) * s_max + t) * row;
      const size_t dst = (static_cast<size_t>(page) * page_size + t % page_size) * row;
      std::copy_n(c.k.begin() + src, row, c.k_pages.begin() + dst);
      std::copy_n(c.v.begin() + src, row, c.v_pages.begin() + dst);
    }
  return c;
}

}  // namespace

TEST_CASE("decode reference: q_len 1 equals a naive softmax attention over each sequence's keys", "[reference]") {
  const DecodeShape s{3, 1, 8, 2, 64, false, 0.125};
  const int s_max = 40;
  const Caches c = make_caches(s, s_max, 16, 11);
  const std::vector<int> lens = {40, 17, 1};
  const auto q = random_tensor(static_cast<size_t>(s.batch) * s.num_heads * s.head_dim, 3);
  std::vector<double> out(q.size()), lse(static_cast<size_t>(s.batch) * s.num_heads);
  kt::ref::attention_decode(s, q.data(), c.contiguous(), lens.data(), out.data(), lse.data());
  const int D = s.head_dim, group = s.num_heads / s.num_kv_heads;
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.num_heads; ++h) {
      // Textbook softmax without max subtraction: p_j = exp(s_j) / sum exp(s_j).
      std::vector<double> e(static_cast<size_t>(lens[b]));
      double z = 0;
      for (int j = 0; j < lens[b]; ++j) {
        double dot = 0;
        for (int d = 0; d < D; ++d)
          dot += double(q[(static_cast<size_t>(b) * s.num_heads + h) * D + d]) *
                 c.k[((static_cast<size_t>(b) * s_max + j) * s.num_kv_heads + h / group) * D + d];
        e[j] = std::exp(s.softmax_scale * dot);
        z += e[j];
      }
      CHECK(lse[static_cast<size_t>(b) * s.num_heads + h] == Approx(std::log(z)).epsilon(1e-12));
      for (int d = 0; d < D; ++d) {
        double ref = 0;
        for (int j = 0; j < lens[b]; ++j)
          ref += e[j] / z * c.v[((static_cast<size_t>(b) * s_max + j) * s.num_kv_heads + h / group) * D + d];
        CHECK(out[(static_cast<size_t>(b) * s.num_heads + h) * D + d] == Approx(ref).margin(1e-12));
      }
    }
}

TEST_CASE("decode reference: a shuffled paged cache gives the contiguous cache's result", "[reference]") {
  for (int page_size : {16, 32}) {
    const DecodeShape s{4, 3, 7, 1, 64, true, 0.1};
    const int s_max = 70;
    const Caches c = make_caches(s, s_max, page_size, 21 + page_size);
    const std::vector<int> lens = {70, 33, 0, 17};  // 33: one token past a page boundary of 16 and 32
    const auto q = random_tensor(static_cast<size_t>(s.batch) * s.q_len * s.num_heads * s.head_dim, 5);
    std::vector<double> a(q.size()), b(q.size()), la(static_cast<size_t>(s.batch) * s.num_heads * s.q_len),
        lb(la.size());
    kt::ref::attention_decode(s, q.data(), c.contiguous(), lens.data(), a.data(), la.data());
    kt::ref::attention_decode(s, q.data(), c.paged(), lens.data(), b.data(), lb.data());
    INFO("page_size " << page_size);
    CHECK(a == b);  // the same keys in the same order: bit-identical
    CHECK(la == lb);
    // The pool's unused pages hold NaN: a page read the table does not name would poison the result.
    for (double x : b) CHECK(std::isfinite(x));
  }
}

TEST_CASE("decode reference: causal multi-token decode equals bottom-right causal prefill attention", "[reference]") {
  // One sequence of L keys whose last q_len are the new tokens: the prefill reference with seqlen_q = q_len,
  // seqlen_k = L and causal (bottom-right aligned) must agree.
  const int L = 37, q_len = 5;
  const DecodeShape s{1, q_len, 8, 4, 64, true, 0.125};
  const Caches c = make_caches(s, L, 16, 31);
  const std::vector<int> lens = {L};
  const auto q = random_tensor(static_cast<size_t>(q_len) * s.num_heads * s.head_dim, 7);
  std::vector<double> out(q.size()), lse(static_cast<size_t>(s.num_heads) * q_len);
  kt::ref::attention_decode(s, q.data(), c.contiguous(), lens.data(), out.data(), lse.data());
  const kt::ref::AttentionShape p{1, q_len, L, s.num_heads, s.num_kv_heads, s.head_dim, true, s.softmax_scale};
  std::vector<double> pout(q.size()), plse(lse.size());
  kt::ref::attention(p, q.data(), c.k.data(), c.v.data(), pout.data(), plse.data());
  for (size_t e = 0; e < out.size(); ++e) CHECK(out[e] == Approx(pout[e]).margin(1e-12));
  for (size_t e = 0; e < lse.size(); ++e) CHECK(lse[e] == Approx(plse[e]).epsilon(1e-12));
  // And the rows differ: token i sees one key more than token i - 1.
  CHECK(out[0] != out[static_cast<size_t>(s.num_heads) * s.head_dim]);
}

TEST_CASE("decode reference: empty sequences and rows with no visible key give o = 0 and lse = -inf", "[reference]") {
  const DecodeShape s{2, 4, 2, 1, 64, true, 0.125};
  const Caches c = make_caches(s, 16, 16, 41);
  const std::vector<int> lens = {0, 2};  // sequence 1: tokens 0 and 1 see keys {0} and {0, 1}; 2 and 3 none
  const auto q = random_tensor(static_cast<size_t>(s.batch) * s.q_len * s.num_heads * s.head_dim, 9);
  std::vector<double> out(q.size(), 7.0), lse(static_cast<size_t>(s.batch) * s.num_heads * s.q_len, 7.0);
  kt::ref::attention_decode(s, q.data(), c.paged(), lens.data(), out.data(), lse.data());
  const double ninf = -std::numeric_limits<double>::infinity();
  const int D = s.head_dim;
  for (int h = 0; h < s.num_heads; ++h)
    for (int i = 0; i < s.q_len; ++i) {
      const bool sees = i >= s.q_len - lens[1];  // sequence 1: last = 2 - 4 + i >= 0 iff i >= 2
      CHECK(lse[static_cast<size_t>(h) * s.q_len + i] == ninf);
      CHECK(std::isfinite(lse[(static_cast<size_t>(s.num_heads) + h) * s.q_len + i]) == sees);
      for (int d = 0; d < D; ++d) CHECK(out[((static_cast<size_t>(i)) * s.num_heads + h) * D + d] == 0.0);
      if (!sees)
        for (int d = 0; d < D; ++d) CHECK(out[((static_cast<size_t>(s.q_len) + i) * s.num_heads + h) * D + d] == 0.0);
    }
  // Token 2 of sequence 1 sees key 0 alone: its output is V row 0 of its KV head exactly.
  for (int d = 0; d < D; ++d)
    CHECK(out[((static_cast<size_t>(s.q_len) + 2) * s.num_heads + 0) * D + d] ==
          double(c.v[(static_cast<size_t>(1) * 16 + 0) * D + d]));
}

TEST_CASE("decode reference: bad lengths and block tables are rejected naming the field", "[reference]") {
  const DecodeShape s{2, 1, 4, 2, 64, false, 0.125};
  Caches c = make_caches(s, 32, 16, 51);
  const auto q = random_tensor(static_cast<size_t>(s.batch) * s.num_heads * s.head_dim, 13);
  std::vector<double> out(q.size());
  const std::vector<int> too_long = {32, 33};
  CHECK_THROWS_WITH(kt::ref::attention_decode(s, q.data(), c.contiguous(), too_long.data(), out.data(), nullptr),
                    Catch::Contains("seqlens_k[1] = 33"));
  const std::vector<int> ok = {32, 20};
  c.table[3] = c.num_pages;  // sequence 1, page 1
  CHECK_THROWS_WITH(kt::ref::attention_decode(s, q.data(), c.paged(), ok.data(), out.data(), nullptr),
                    Catch::Contains("block_table[1][1]"));
  DecodeShape bad = s;
  bad.num_kv_heads = 3;
  CHECK_THROWS_WITH(kt::ref::validate(bad), Catch::Contains("num_kv_heads"));
  bad = s;
  bad.q_len = 0;
  CHECK_THROWS_WITH(kt::ref::validate(bad), Catch::Contains("q_len must be >= 1"));
}
