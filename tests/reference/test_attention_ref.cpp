// Checks of the float64 CPU attention reference against an independent naive implementation and
// against properties of softmax attention that any correct implementation must satisfy.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/attention_ref.h"
#include "reference/dtype_convert.h"

namespace {

using kt::ref::AttentionShape;

struct Inputs {
  std::vector<float> q, k, v;
};

size_t q_elems(const AttentionShape& s) { return static_cast<size_t>(s.batch) * s.seqlen_q * s.num_heads * s.head_dim; }
size_t kv_elems(const AttentionShape& s) {
  return static_cast<size_t>(s.batch) * s.seqlen_k * s.num_kv_heads * s.head_dim;
}

std::vector<float> random_tensor(kt::DType dt, size_t n, uint64_t seed) {
  std::vector<uint16_t> bits(n);
  kt::fill_random(dt, bits.data(), n, seed);
  std::vector<float> out(n);
  for (size_t e = 0; e < n; ++e) out[e] = kt::dtype_to_float(dt, bits[e]);
  return out;
}

Inputs random_inputs(const AttentionShape& s, kt::DType dt, uint64_t seed) {
  return {random_tensor(dt, q_elems(s), seed), random_tensor(dt, kv_elems(s), seed + 1),
          random_tensor(dt, kv_elems(s), seed + 2)};
}

// Independent naive attention: gathers the K/V rows of the head group into matrices, builds an
// explicit mask from absolute positions (query i sits at key position i + Sk - Sq), and applies
// the textbook softmax exp(s) / sum exp(s) without max subtraction (inputs are small enough).
// Output layout [B, Sq, Hq, D], lse [B, Hq, Sq].
void naive_attention(const AttentionShape& s, const Inputs& in, std::vector<double>& out, std::vector<double>& lse) {
  const int B = s.batch, Sq = s.seqlen_q, Sk = s.seqlen_k, Hq = s.num_heads, Hkv = s.num_kv_heads, D = s.head_dim;
  const int group = Hq / Hkv;
  out.assign(q_elems(s), 0.0);
  lse.assign(static_cast<size_t>(B) * Hq * Sq, 0.0);
  for (int b = 0; b < B; ++b)
    for (int kvh = 0; kvh < Hkv; ++kvh) {
      // Gather K and V for this (b, kv head): [Sk][D].
      std::vector<std::vector<double>> K(Sk, std::vector<double>(D)), V(Sk, std::vector<double>(D));
      for (int j = 0; j < Sk; ++j)
        for (int d = 0; d < D; ++d) {
          const size_t idx = ((static_cast<size_t>(b) * Sk + j) * Hkv + kvh) * D + d;
          K[j][d] = in.k[idx];
          V[j][d] = in.v[idx];
        }
      for (int hh = 0; hh < group; ++hh) {
        const int h = kvh * group + hh;
        for (int i = 0; i < Sq; ++i) {
          const long long qpos = static_cast<long long>(i) + (Sk - Sq);
          std::vector<double> w(Sk, 0.0);
          double denom = 0.0;
          for (int j = 0; j < Sk; ++j) {
            const bool visible = !s.causal || j <= qpos;
            if (!visible) continue;
            double dot = 0.0;
            for (int d = 0; d < D; ++d) dot += K[j][d] * in.q[((static_cast<size_t>(b) * Sq + i) * Hq + h) * D + d];
            w[j] = std::exp(dot * s.softmax_scale);
            denom += w[j];
          }
          double* o = &out[((static_cast<size_t>(b) * Sq + i) * Hq + h) * D];
          lse[(static_cast<size_t>(b) * Hq + h) * Sq + i] =
              denom > 0 ? std::log(denom) : -std::numeric_limits<double>::infinity();
          if (denom == 0) continue;
          for (int d = 0; d < D; ++d) {
            double acc = 0.0;
            for (int j = 0; j < Sk; ++j) acc += (w[j] / denom) * V[j][d];
            o[d] = acc;
          }
        }
      }
    }
}

AttentionShape make_shape(int B, int Sq, int Sk, int Hq, int Hkv, int D, bool causal) {
  return AttentionShape{B, Sq, Sk, Hq, Hkv, D, causal, 1.0 / std::sqrt(static_cast<double>(D))};
}

}  // namespace

TEST_CASE("attention reference matches a naive implementation", "[reference]") {
  struct Case {
    int B, Sq, Sk, Hq, Hkv, D;
    bool causal;
  };
  const Case cases[] = {
      {1, 1, 1, 1, 1, 8, false},   {2, 5, 9, 3, 3, 16, false},  // GQA ratio 1
      {1, 7, 13, 8, 2, 32, true},                               // ratio 4, causal Sq < Sk
      {2, 11, 11, 4, 1, 24, true},                              // ratio 4 (MQA), causal Sq == Sk
      {1, 13, 6, 14, 2, 8, true},                               // ratio 7, causal Sq > Sk
      {1, 9, 37, 7, 1, 16, false},                              // ratio 7, not causal
      {2, 3, 1, 8, 1, 8, true},                                 // causal, Sk = 1 < Sq
  };
  uint64_t seed = 100;
  for (const Case& c : cases) {
    for (kt::DType dt : {kt::DType::f16, kt::DType::bf16}) {
      const AttentionShape s = make_shape(c.B, c.Sq, c.Sk, c.Hq, c.Hkv, c.D, c.causal);
      INFO("B=" << c.B << " Sq=" << c.Sq << " Sk=" << c.Sk << " Hq=" << c.Hq << " Hkv=" << c.Hkv << " D=" << c.D
                << " causal=" << c.causal << " dtype=" << kt::dtype_name(dt));
      const Inputs in = random_inputs(s, dt, seed += 3);
      std::vector<double> out(q_elems(s)), lse(static_cast<size_t>(c.B) * c.Hq * c.Sq);
      kt::ref::attention(s, in.q.data(), in.k.data(), in.v.data(), out.data(), lse.data());
      std::vector<double> nout, nlse;
      naive_attention(s, in, nout, nlse);
      double max_err = 0;
      for (size_t e = 0; e < out.size(); ++e) max_err = std::max(max_err, std::fabs(out[e] - nout[e]));
      CHECK(max_err < 1e-12);
      for (size_t e = 0; e < lse.size(); ++e) {
        if (std::isinf(nlse[e])) {
          CHECK(std::isinf(lse[e]));
          CHECK(lse[e] < 0);
        } else {
          CHECK(std::fabs(lse[e] - nlse[e]) < 1e-12);
        }
      }
      // attention_row agrees with attention for every row, and lse is null-safe.
      std::vector<double> row(c.D);
      for (int b = 0; b < c.B; ++b)
        for (int i = 0; i < c.Sq; ++i)
          for (int h = 0; h < c.Hq; ++h) {
            const double l = kt::ref::attention_row(s, in.q.data(), in.k.data(), in.v.data(), b, i, h, row.data());
            const size_t lidx = (static_cast<size_t>(b) * c.Hq + h) * c.Sq + i;
            REQUIRE((l == lse[lidx] || (std::isinf(l) && std::isinf(lse[lidx]))));
            for (int d = 0; d < c.D; ++d)
              REQUIRE(row[d] == out[((static_cast<size_t>(b) * c.Sq + i) * c.Hq + h) * c.D + d]);
          }
      std::vector<double> out2(q_elems(s));
      kt::ref::attention(s, in.q.data(), in.k.data(), in.v.data(), out2.data(), nullptr);
      CHECK(out2 == out);
    }
  }
}

TEST_CASE("attention reference: GQA maps query head h to kv head h / (Hq/Hkv)", "[reference]") {
  // Give each kv head a constant V equal to its index: output of query head h must be h / group.
  const AttentionShape s = make_shape(1, 4, 6, 28, 4, 8, false);
  Inputs in = random_inputs(s, kt::DType::bf16, 9);
  for (int j = 0; j < s.seqlen_k; ++j)
    for (int g = 0; g < s.num_kv_heads; ++g)
      for (int d = 0; d < s.head_dim; ++d)
        in.v[(static_cast<size_t>(j) * s.num_kv_heads + g) * s.head_dim + d] = float(g);
  std::vector<double> out(q_elems(s));
  kt::ref::attention(s, in.q.data(), in.k.data(), in.v.data(), out.data(), nullptr);
  for (int i = 0; i < s.seqlen_q; ++i)
    for (int h = 0; h < s.num_heads; ++h)
      for (int d = 0; d < s.head_dim; ++d)
        REQUIRE(out[(static_cast<size_t>(i) * s.num_heads + h) * s.head_dim + d] == Approx(h / 7).margin(1e-12));
}

TEST_CASE("attention reference: softmax properties", "[reference]") {
  SECTION("constant V gives that constant") {
    const AttentionShape s = make_shape(2, 9, 17, 4, 2, 16, true);
    Inputs in = random_inputs(s, kt::DType::f16, 21);
    std::fill(in.v.begin(), in.v.end(), -1.75f);
    std::vector<double> out(q_elems(s));
    kt::ref::attention(s, in.q.data(), in.k.data(), in.v.data(), out.data(), nullptr);
    for (double x : out) REQUIRE(x == Approx(-1.75).margin(1e-12));
  }
  SECTION("each output component lies within [min v, max v] over the visible keys") {
    for (bool causal : {false, true}) {
      const AttentionShape s = make_shape(1, 12, 20, 7, 1, 8, causal);
      const Inputs in = random_inputs(s, kt::DType::bf16, 33);
      std::vector<double> out(s.head_dim);
      for (int i = 0; i < s.seqlen_q; ++i)
        for (int h = 0; h < s.num_heads; ++h) {
          kt::ref::attention_row(s, in.q.data(), in.k.data(), in.v.data(), 0, i, h, out.data());
          const int last = causal ? i + s.seqlen_k - s.seqlen_q : s.seqlen_k - 1;
          for (int d = 0; d < s.head_dim; ++d) {
            double lo = 1e300, hi = -1e300;
            for (int j = 0; j <= last; ++j) {
              const double x = in.v[static_cast<size_t>(j) * s.head_dim + d];
              lo = std::min(lo, x);
              hi = std::max(hi, x);
            }
            REQUIRE(out[d] >= lo - 1e-12);
            REQUIRE(out[d] <= hi + 1e-12);
          }
        }
    }
  }
  SECTION("lse is the log of the softmax denominator: shifting all scores by a constant shifts lse") {
    // q = 0 makes every score 0: lse = log(number of visible keys), output = mean of visible V.
    const AttentionShape s = make_shape(1, 5, 8, 2, 2, 4, true);
    Inputs in = random_inputs(s, kt::DType::f16, 41);
    std::fill(in.q.begin(), in.q.end(), 0.0f);
    std::vector<double> out(q_elems(s)), lse(static_cast<size_t>(s.num_heads) * s.seqlen_q);
    kt::ref::attention(s, in.q.data(), in.k.data(), in.v.data(), out.data(), lse.data());
    for (int h = 0; h < s.num_heads; ++h)
      for (int i = 0; i < s.seqlen_q; ++i) {
        const int visible = i + 3 + 1;
        CHECK(lse[static_cast<size_t>(h) * s.seqlen_q + i] == Approx(std::log(visible)).margin(1e-12));
        for (int d = 0; d < s.head_dim; ++d) {
          double mean = 0;
          for (int j = 0; j < visible; ++j)
            mean += in.v[(static_cast<size_t>(j) * s.num_kv_heads + h) * s.head_dim + d];
          mean /= visible;
          CHECK(out[(static_cast<size_t>(i) * s.num_heads + h) * s.head_dim + d] == Approx(mean).margin(1e-12));
        }
      }
  }
  SECTION("large scores do not overflow (max-subtracted softmax)") {
    AttentionShape s = make_shape(1, 3, 5, 1, 1, 4, false);
    s.softmax_scale = 1000.0;  // scores in the thousands: exp() without max subtraction overflows
    const Inputs in = random_inputs(s, kt::DType::f16, 51);
    std::vector<double> out(q_elems(s)), lse(static_cast<size_t>(s.seqlen_q));
    kt::ref::attention(s, in.q.data(), in.k.data(), in.v.data(), out.data(), lse.data());
    for (double x : out) REQUIRE(std::isfinite(x));
    for (double x : lse) REQUIRE(std::isfinite(x));
  }
}

TEST_CASE("attention reference: causal alignment", "[reference]") {
  SECTION("Sq == Sk: row 0 sees only key 0 and equals v[0]") {
    const AttentionShape s = make_shape(2, 10, 10, 6, 3, 16, true);
    const Inputs in = random_inputs(s, kt::DType::bf16, 61);
    std::vector<double> out(q_elems(s)), lse(static_cast<size_t>(s.batch) * s.num_heads * s.seqlen_q);
    kt::ref::attention(s, in.q.data(), in.k.data(), in.v.data(), out.data(), lse.data());
    for (int b = 0; b < s.batch; ++b)
      for (int h = 0; h < s.num_heads; ++h) {
        const int g = h / 2;
        double dot = 0;
        for (int d = 0; d < s.head_dim; ++d) {
          const double vd = in.v[((static_cast<size_t>(b) * s.seqlen_k) * s.num_kv_heads + g) * s.head_dim + d];
          CHECK(out[((static_cast<size_t>(b) * s.seqlen_q) * s.num_heads + h) * s.head_dim + d] == vd);
          dot += double(in.q[(static_cast<size_t>(b) * s.seqlen_q * s.num_heads + h) * s.head_dim + d]) *
                 in.k[(static_cast<size_t>(b) * s.seqlen_k * s.num_kv_heads + g) * s.head_dim + d];
        }
        CHECK(lse[(static_cast<size_t>(b) * s.num_heads + h) * s.seqlen_q] ==
              Approx(dot * s.softmax_scale).margin(1e-12));
      }
  }
  SECTION("Sq > Sk: rows with no visible key give 0 and lse -inf; the rest are finite") {
    const AttentionShape s = make_shape(1, 9, 4, 2, 1, 8, true);  // rows 0..4 see nothing
    const Inputs in = random_inputs(s, kt::DType::f16, 71);
    std::vector<double> out(q_elems(s), 99.0), lse(static_cast<size_t>(s.num_heads) * s.seqlen_q);
    kt::ref::attention(s, in.q.data(), in.k.data(), in.v.data(), out.data(), lse.data());
    for (int h = 0; h < s.num_heads; ++h)
      for (int i = 0; i < s.seqlen_q; ++i) {
        const bool empty = i < s.seqlen_q - s.seqlen_k;
        const double l = lse[static_cast<size_t>(h) * s.seqlen_q + i];
        CHECK(kt::ref::last_visible_key(s, i) == (empty ? -1 : i - 5));
        if (empty) {
          CHECK(std::isinf(l));
          CHECK(l < 0);
        } else {
          CHECK(std::isfinite(l));
        }
        for (int d = 0; d < s.head_dim; ++d) {
          const double x = out[(static_cast<size_t>(i) * s.num_heads + h) * s.head_dim + d];
          if (empty) CHECK(x == 0.0);
          else CHECK(x != 0.0);
        }
      }
    // Row Sq-Sk (first non-empty) sees exactly key 0.
    std::vector<double> row(s.head_dim);
    kt::ref::attention_row(s, in.q.data(), in.k.data(), in.v.data(), 0, 5, 1, row.data());
    for (int d = 0; d < s.head_dim; ++d) CHECK(row[d] == in.v[d]);
  }
  SECTION("Sq < Sk: the last query sees all keys, equal to the non-causal result") {
    AttentionShape s = make_shape(1, 4, 11, 4, 4, 8, true);
    const Inputs in = random_inputs(s, kt::DType::bf16, 81);
    std::vector<double> a(s.head_dim), b(s.head_dim);
    const double la = kt::ref::attention_row(s, in.q.data(), in.k.data(), in.v.data(), 0, 3, 2, a.data());
    const double la0 = kt::ref::attention_row(s, in.q.data(), in.k.data(), in.v.data(), 0, 0, 2, b.data());
    s.causal = false;
    std::vector<double> c(s.head_dim);
    const double lc = kt::ref::attention_row(s, in.q.data(), in.k.data(), in.v.data(), 0, 3, 2, c.data());
    CHECK(la == lc);
    CHECK(a == c);
    const double lc0 = kt::ref::attention_row(s, in.q.data(), in.k.data(), in.v.data(), 0, 0, 2, c.data());
    CHECK(la0 < lc0);  // row 0 sees 8 of the 11 keys: a strictly smaller sum of exponentials
    CHECK(b != c);
  }
}

TEST_CASE("attention reference: validate() names the offending field", "[reference]") {
  const AttentionShape good = make_shape(1, 2, 3, 4, 2, 8, true);
  CHECK_NOTHROW(kt::ref::validate(good));
  auto expect_field = [&](AttentionShape s, const std::string& field) {
    try {
      kt::ref::validate(s);
      FAIL("expected std::invalid_argument naming " << field);
    } catch (const std::invalid_argument& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(field) != std::string::npos);
    }
  };
  AttentionShape s = good;
  s.batch = 0;
  expect_field(s, "batch");
  s = good;
  s.seqlen_q = -1;
  expect_field(s, "seqlen_q");
  s = good;
  s.seqlen_k = 0;
  expect_field(s, "seqlen_k");
  s = good;
  s.num_heads = 0;
  expect_field(s, "num_heads");
  s = good;
  s.num_kv_heads = 0;
  expect_field(s, "num_kv_heads");
  s = good;
  s.head_dim = 0;
  expect_field(s, "head_dim");
  s = good;
  s.num_kv_heads = 3;
  expect_field(s, "num_kv_heads");
  s = good;
  s.softmax_scale = std::nan("");
  expect_field(s, "softmax_scale");
  // attention_row range checks and validation.
  std::vector<float> q(64, 0.5f), kv(64, 0.5f);
  std::vector<double> out(8);
  CHECK_THROWS_AS(kt::ref::attention_row(good, q.data(), kv.data(), kv.data(), 1, 0, 0, out.data()),
                  std::invalid_argument);
  CHECK_THROWS_AS(kt::ref::attention_row(good, q.data(), kv.data(), kv.data(), 0, 2, 0, out.data()),
                  std::invalid_argument);
  CHECK_THROWS_AS(kt::ref::attention_row(good, q.data(), kv.data(), kv.data(), 0, 0, 4, out.data()),
                  std::invalid_argument);
  s = good;
  s.num_kv_heads = 3;
  CHECK_THROWS_AS(kt::ref::attention(s, q.data(), kv.data(), kv.data(), out.data(), nullptr), std::invalid_argument);
}

TEST_CASE("attention reference: compare() metrics", "[reference]") {
  const std::vector<double> ref = {3.0, 4.0, 0.0, -1.0};
  std::vector<float> out = {3.0f, 4.0f, 0.0f, -1.0f};
  auto c = kt::ref::compare(out.data(), ref.data(), ref.size());
  CHECK(c.rel_l2 == 0.0);
  CHECK(c.max_abs == 0.0);
  CHECK(c.nan_count == 0);
  CHECK(c.elements == 4);
  out = {3.0f, 4.5f, std::nanf(""), -1.0f};
  c = kt::ref::compare(out.data(), ref.data(), ref.size());
  CHECK(c.nan_count == 1);
  CHECK(c.max_abs == Approx(0.5));
  CHECK(c.rel_l2 == Approx(0.5 / std::sqrt(26.0)));
  out[2] = std::numeric_limits<float>::infinity();
  CHECK(kt::ref::compare(out.data(), ref.data(), ref.size()).nan_count == 1);
}
