// Float64 Q/K/V projection reference: against an independent naive computation (complex-number RoPE),
// RoPE identity at position 0, pair norms preserved, V never rotated, bias added before RoPE.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <complex>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "qkv_proj/qkv_proj_config.h"
#include "reference/qkv_ref.h"

using kt::ref::QkvShape;

namespace {

struct Problem {
  QkvShape s;
  std::vector<float> x, bias;
  std::vector<double> w;
  std::vector<int> pos;
  int n;
};

Problem make(bool bias, bool rope, uint64_t seed) {
  Problem p;
  p.s = QkvShape{5, 64, 4, 2, 8, bias, rope, 10000.0};
  p.n = (4 + 2 * 2) * 8;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  p.x.resize(5 * 64);
  for (auto& v : p.x) v = nd(rng);
  p.w.resize(static_cast<size_t>(p.n) * 64);
  for (auto& v : p.w) v = nd(rng) * 0.1;
  p.bias.resize(p.n);
  for (auto& v : p.bias) v = nd(rng);
  p.pos = {0, 3, 17, 100, 4095};
  return p;
}

struct Out {
  std::vector<double> q, k, v;
};

Out run(const Problem& p) {
  Out o;
  o.q.resize(5 * 4 * 8);
  o.k.resize(5 * 2 * 8);
  o.v.resize(5 * 2 * 8);
  kt::ref::qkv_projection(p.s, p.x.data(), p.w.data(), p.s.has_bias ? p.bias.data() : nullptr, p.pos.data(), o.q.data(),
                          o.k.data(), o.v.data());
  return o;
}

// Naive: one output feature at a time, then RoPE as multiplication of (y_i + i*y_{i+D/2}) by e^{i*angle}.
Out naive(const Problem& p) {
  const int D = 8, Hq = 4, Hkv = 2;
  Out o;
  std::vector<double> y(p.n);
  for (int t = 0; t < 5; ++t) {
    for (int c = 0; c < p.n; ++c) {
      double acc = p.s.has_bias ? p.bias[c] : 0.0;
      for (int j = 0; j < 64; ++j) acc += static_cast<double>(p.x[t * 64 + j]) * p.w[static_cast<size_t>(c) * 64 + j];
      y[c] = acc;
    }
    for (int h = 0; h < Hq + 2 * Hkv; ++h) {
      std::vector<double> head(y.begin() + h * D, y.begin() + (h + 1) * D);
      if (p.s.rope && h < Hq + Hkv) {
        for (int i = 0; i < D / 2; ++i) {
          const double angle = p.pos[t] / std::pow(p.s.rope_theta, static_cast<double>(2 * i) / D);
          const std::complex<double> z = std::complex<double>(head[i], head[i + D / 2]) * std::polar(1.0, angle);
          head[i] = z.real();
          head[i + D / 2] = z.imag();
        }
      }
      auto& dst = h < Hq ? o.q : h < Hq + Hkv ? o.k : o.v;
      dst.insert(dst.end(), head.begin(), head.end());
    }
  }
  return o;
}

void check_close(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("element " << i);
    CHECK(std::fabs(a[i] - b[i]) <= tol * (1 + std::fabs(b[i])));
  }
}

}  // namespace

TEST_CASE("qkv reference matches a naive computation (bias, RoPE, GQA)", "[quant]") {
  for (bool bias : {false, true})
    for (bool rope : {false, true}) {
      INFO("bias " << bias << " rope " << rope);
      const Problem p = make(bias, rope, 11);
      const Out got = run(p), want = naive(p);
      check_close(got.q, want.q, 1e-12);
      check_close(got.k, want.k, 1e-12);
      check_close(got.v, want.v, 1e-12);
    }
}

TEST_CASE("RoPE: identity at position 0, norm of each pair kept, V never rotated", "[quant]") {
  Problem rot = make(true, true, 3);
  Problem plain = rot;
  plain.s.rope = false;
  const Out a = run(rot), b = run(plain);
  const int D = 8;
  int changed = 0;
  for (int t = 0; t < 5; ++t)
    for (auto which : {0, 1}) {
      const auto& ra = which ? a.k : a.q;
      const auto& rb = which ? b.k : b.q;
      const int H = which ? 2 : 4;
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < D / 2; ++i) {
          const size_t i0 = (static_cast<size_t>(t) * H + h) * D + i, i1 = i0 + D / 2;
          if (rot.pos[t] == 0) {
            CHECK(ra[i0] == rb[i0]);
            CHECK(ra[i1] == rb[i1]);
          } else {
            const double na = ra[i0] * ra[i0] + ra[i1] * ra[i1], nb = rb[i0] * rb[i0] + rb[i1] * rb[i1];
            CHECK(std::fabs(na - nb) <= 1e-12 * (1 + nb));
            if (std::fabs(ra[i0] - rb[i0]) > 1e-9) ++changed;
          }
        }
    }
  CHECK(changed == 4 * 6 * 4);  // every pair of every Q/K head moved at the 4 nonzero positions
  CHECK(a.v == b.v);
}

TEST_CASE("bias is added before RoPE", "[quant]") {
  Problem p = make(true, true, 5);
  std::fill(p.x.begin(), p.x.end(), 0.f);  // Y = bias exactly, then rotated
  const Out o = run(p);
  const int D = 8;
  const int t = 1;  // position 3
  for (int h = 0; h < 4; ++h)
    for (int i = 0; i < D / 2; ++i) {
      const double angle = 3.0 * std::pow(10000.0, -2.0 * i / D);
      const double b0 = p.bias[h * D + i], b1 = p.bias[h * D + i + D / 2];
      const size_t i0 = (static_cast<size_t>(t) * 4 + h) * D + i;
      CHECK(std::fabs(o.q[i0] - (b0 * std::cos(angle) - b1 * std::sin(angle))) < 1e-12);
      CHECK(std::fabs(o.q[i0 + D / 2] - (b1 * std::cos(angle) + b0 * std::sin(angle))) < 1e-12);
    }
  CHECK(std::fabs(o.q[(static_cast<size_t>(t) * 4) * D] - p.bias[0]) > 1e-3);  // bias after RoPE would equal it
  // V = bias, unrotated.
  for (int c = 0; c < 2 * D; ++c)
    CHECK(o.v[static_cast<size_t>(t) * 2 * D + c] == static_cast<double>(p.bias[(4 + 2) * D + c]));
}

TEST_CASE("qkv_projection_rows equals the listed rows of the full projection", "[quant]") {
  const Problem p = make(true, true, 9);
  const Out full = run(p);
  const std::vector<int> rows = {4, 0, 2, 4};
  std::vector<double> q(rows.size() * 32), k(rows.size() * 16), v(rows.size() * 16);
  kt::ref::qkv_projection_rows(p.s, p.x.data(), p.w.data(), p.bias.data(), p.pos.data(), rows, q.data(), k.data(),
                               v.data());
  for (size_t j = 0; j < rows.size(); ++j) {
    for (int c = 0; c < 32; ++c) CHECK(q[j * 32 + c] == full.q[static_cast<size_t>(rows[j]) * 32 + c]);
    for (int c = 0; c < 16; ++c) CHECK(k[j * 16 + c] == full.k[static_cast<size_t>(rows[j]) * 16 + c]);
    for (int c = 0; c < 16; ++c) CHECK(v[j * 16 + c] == full.v[static_cast<size_t>(rows[j]) * 16 + c]);
  }
  CHECK_THROWS_AS(kt::ref::qkv_projection_rows(p.s, p.x.data(), p.w.data(), p.bias.data(), p.pos.data(), {5}, q.data(),
                                               k.data(), v.data()),
                  std::invalid_argument);
}

TEST_CASE("qkv reference rejects invalid shapes and missing inputs", "[quant]") {
  const Problem p = make(true, true, 1);
  std::vector<double> q(5 * 32), k(5 * 16), v(5 * 16);
  auto msg = [&](QkvShape s, const float* bias, const int* pos) {
    try {
      kt::ref::qkv_projection(s, p.x.data(), p.w.data(), bias, pos, q.data(), k.data(), v.data());
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("<no exception>");
  };
  QkvShape s = p.s;
  s.head_dim = 7;
  CHECK_THAT(msg(s, p.bias.data(), p.pos.data()), Catch::Contains("head_dim must be even"));
  s = p.s;
  s.num_kv_heads = 3;
  CHECK_THAT(msg(s, p.bias.data(), p.pos.data()), Catch::Contains("num_kv_heads"));
  s = p.s;
  s.rope_theta = 0;
  CHECK_THAT(msg(s, p.bias.data(), p.pos.data()), Catch::Contains("rope_theta"));
  CHECK_THAT(msg(p.s, nullptr, p.pos.data()), Catch::Contains("bias"));
  CHECK_THAT(msg(p.s, p.bias.data(), nullptr), Catch::Contains("positions"));
  CHECK(kt::ref::qkv_out_features(p.s) == 64);
}

TEST_CASE("RoPE fixed-point angle reduction matches a long double reduction", "[quant]") {
  // rope_angle (the qkv kernels' epilogues): pos x turns mod 2^64, turns = round(2^64 theta^(-2i/D) / (2 pi)).
  const long double two_pi = 6.283185307179586476925286766559L;
  const int positions[] = {0,          1,  2,  3,       17,         1000, 4095, 32767, 131071, 1 << 20, (1 << 24) - 1,
                           2000000000, -1, -5, -100000, -2000000000};
  double worst = 0.0;
  for (double theta : {10000.0, 1000000.0})
    for (int d : {64, 128})
      for (int i = 0; i < d / 2; ++i) {
        const double inv_freq = std::exp2(-double(2 * i) / double(d) * std::log2(theta));
        const unsigned long long turns =
            (unsigned long long)std::nearbyint(inv_freq * (18446744073709551616.0 / 6.283185307179586));
        for (int pos : positions) {
          const float got = kt::qkv::rope_angle(pos, turns);
          REQUIRE(got >= -3.14159274f);
          REQUIRE(got < 3.14159274f);
          // the exact angle pos x inv_freq (inv_freq as the double the kernels start from), reduced in long double
          const long double want = std::remainder((long double)pos * inv_freq, two_pi);
          long double diff = std::fabs((long double)got - want);
          diff = std::min(diff, two_pi - diff);  // +pi and -pi are the same angle
          // 4e-7 from rope_angle, plus the table entry's rounding: |pos| x 2^-52 relative of inv_freq
          const double bound = 4e-7 + std::fabs(double(pos)) * inv_freq * 6e-16;
          INFO("theta " << theta << " d " << d << " i " << i << " pos " << pos << " got " << got << " want "
                        << double(want));
          REQUIRE(double(diff) <= bound);
          worst = std::max(worst, double(diff));
        }
      }
  REQUIRE(worst > 0.0);  // the float result is not exact: the comparison is live
}

TEST_CASE("kv_cache_write places each token's K and V heads at its slot and leaves the rest", "[quant]") {
  const Problem p = make(true, true, 11);
  const Out o = run(p);
  const int num_pages = 3, page_size = 4, slot_elems = 2 * 8;  // Hkv 2, D 8
  // Token 0 -> page 2 offset 1, token 1 skipped, token 2 -> page 0 offset 3, token 3 -> page 1 offset 0, token 4
  // skipped: pages out of order, a page boundary crossed.
  const std::vector<int> slots = {9, -1, 3, 4, -1};
  const double poison = -12345.0;
  std::vector<double> kc(size_t(num_pages) * page_size * slot_elems, poison), vc = kc;
  kt::ref::kv_cache_write(p.s, o.k.data(), o.v.data(), slots, num_pages, page_size, kc.data(), vc.data());
  for (int slot = 0; slot < num_pages * page_size; ++slot) {
    const auto it = std::find(slots.begin(), slots.end(), slot);
    for (int e = 0; e < slot_elems; ++e) {
      const size_t at = size_t(slot) * slot_elems + e;
      if (it == slots.end()) {
        CHECK(kc[at] == poison);
        CHECK(vc[at] == poison);
      } else {
        const size_t tok = size_t(it - slots.begin());
        CHECK(kc[at] == o.k[tok * slot_elems + e]);  // after RoPE: the projection's K
        CHECK(vc[at] == o.v[tok * slot_elems + e]);
      }
    }
  }
  CHECK(kc[9 * slot_elems] != o.v[0]);  // K and V are not swapped (random data: distinct)
}

TEST_CASE("kv_cache_write rejects slots out of range, repeated slots and bad sizes, naming the argument", "[quant]") {
  const Problem p = make(false, false, 12);
  const Out o = run(p);
  std::vector<double> kc(2 * 4 * 16), vc = kc;
  auto msg = [&](const std::vector<int>& slots, int pages, int page_size) {
    try {
      kt::ref::kv_cache_write(p.s, o.k.data(), o.v.data(), slots, pages, page_size, kc.data(), vc.data());
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("<no exception>");
  };
  CHECK(msg({0, 1, 2, 3, 7}, 2, 4) == "<no exception>");
  CHECK_THAT(msg({0, 1, 2, 3, 8}, 2, 4), Catch::Contains("slot_mapping[4] = 8 is outside"));
  CHECK_THAT(msg({0, -2, 2, 3, 4}, 2, 4), Catch::Contains("slot_mapping[1] = -2"));
  CHECK_THAT(msg({0, 1, 2, 1, -1}, 2, 4), Catch::Contains("slot_mapping[3] = 1 is mapped twice"));
  CHECK_THAT(msg({0, 1, 2, 3}, 2, 4), Catch::Contains("slot_mapping has 4 entries, m = 5"));
  CHECK_THAT(msg({0, 1, 2, 3, 4}, 0, 4), Catch::Contains("num_pages"));
  CHECK_THAT(msg({0, 1, 2, 3, 4}, 2, 0), Catch::Contains("page_size"));
}
