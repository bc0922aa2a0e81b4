// Bit-exact checks of the host fp16 / bf16 conversions against known IEEE patterns and exhaustive
// round trips over every 16-bit pattern.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "reference/dtype_convert.h"

namespace {

float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint32_t bits_from_f32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

}  // namespace

TEST_CASE("float_to_half: known bit patterns", "[reference]") {
  CHECK(kt::float_to_half(0.0f) == 0x0000);
  CHECK(kt::float_to_half(-0.0f) == 0x8000);
  CHECK(kt::float_to_half(1.0f) == 0x3C00);
  CHECK(kt::float_to_half(-2.0f) == 0xC000);
  CHECK(kt::float_to_half(0.5f) == 0x3800);
  CHECK(kt::float_to_half(65504.0f) == 0x7BFF);   // max finite
  CHECK(kt::float_to_half(65519.99f) == 0x7BFF);  // below the halfway point to 65536
  CHECK(kt::float_to_half(65520.0f) == 0x7C00);   // tie rounds to even = overflow to inf
  CHECK(kt::float_to_half(-65520.0f) == 0xFC00);
  CHECK(kt::float_to_half(1e9f) == 0x7C00);
  CHECK(kt::float_to_half(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK(kt::float_to_half(-std::numeric_limits<float>::infinity()) == 0xFC00);
  CHECK(kt::float_to_half(std::ldexp(1.0f, -24)) == 0x0001);     // smallest subnormal
  CHECK(kt::float_to_half(std::ldexp(1.0f, -14)) == 0x0400);     // smallest normal
  CHECK(kt::float_to_half(std::ldexp(1023.0f, -24)) == 0x03FF);  // largest subnormal
  CHECK(kt::float_to_half(std::ldexp(1.0f, -25)) == 0x0000);     // tie between 0 and 2^-24: even -> 0
  CHECK(kt::float_to_half(std::ldexp(1.5f, -25)) == 0x0001);     // above the tie
  CHECK(kt::float_to_half(std::ldexp(3.0f, -25)) == 0x0002);     // 1.5 * 2^-24 ties to even (2)
  CHECK(kt::float_to_half(std::ldexp(1.0f, -26)) == 0x0000);
  CHECK(kt::float_to_half(-std::ldexp(1.0f, -24)) == 0x8001);
  CHECK(kt::float_to_half(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(kt::float_to_half(0.1f) == 0x2E66);
  CHECK(kt::float_to_half(3.14159265f) == 0x4248);
  // 1 + 2^-11 is exactly halfway between 1 and 1 + 2^-10: ties to even (1.0).
  CHECK(kt::float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);
  // 1 + 3 * 2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even): rounds up.
  CHECK(kt::float_to_half(1.0f + 3.0f * std::ldexp(1.0f, -11)) == 0x3C02);
  CHECK(kt::float_to_half(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3C01);
}

TEST_CASE("float_to_half / float_to_bf16: NaN stays a quiet NaN", "[reference]") {
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  const float snan = f32_from_bits(0x7F800001u);  // signalling NaN with only the lowest payload bit
  for (float n : {qnan, snan, -qnan, f32_from_bits(0xFFC00000u)}) {
    const uint16_t h = kt::float_to_half(n);
    CHECK((h & 0x7C00) == 0x7C00);
    CHECK((h & 0x0200) != 0);  // quiet bit
    CHECK(std::isnan(kt::half_to_float(h)));
    CHECK(((h & 0x8000) != 0) == std::signbit(n));
    const uint16_t b = kt::float_to_bf16(n);
    CHECK((b & 0x7F80) == 0x7F80);
    CHECK((b & 0x0040) != 0);
    CHECK(std::isnan(kt::bf16_to_float(b)));
    CHECK(((b & 0x8000) != 0) == std::signbit(n));
  }
}

TEST_CASE("float_to_bf16: known bit patterns and round-to-nearest-even", "[reference]") {
  CHECK(kt::float_to_bf16(0.0f) == 0x0000);
  CHECK(kt::float_to_bf16(-0.0f) == 0x8000);
  CHECK(kt::float_to_bf16(1.0f) == 0x3F80);
  CHECK(kt::float_to_bf16(-1.0f) == 0xBF80);
  CHECK(kt::float_to_bf16(0.1f) == 0x3DCD);  // 0x3DCCCCCD rounds up
  // 1.00390625 = 1 + 2^-8 is halfway between 1.0 (0x3F80, even) and 1 + 2^-7 (0x3F81): ties to even.
  CHECK(kt::float_to_bf16(1.00390625f) == 0x3F80);
  // 1 + 3 * 2^-8 is halfway between 0x3F81 (odd) and 0x3F82 (even): rounds up to even.
  CHECK(kt::float_to_bf16(1.01171875f) == 0x3F82);
  CHECK(kt::float_to_bf16(f32_from_bits(0x3F808001u)) == 0x3F81);         // just above the tie
  CHECK(kt::float_to_bf16(f32_from_bits(0x3F807FFFu)) == 0x3F80);         // just below the tie
  CHECK(kt::float_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);  // rounds to inf
  CHECK(kt::float_to_bf16(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(kt::float_to_bf16(-std::numeric_limits<float>::infinity()) == 0xFF80);
  CHECK(kt::float_to_bf16(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(kt::bf16_to_float(0x3F80) == 1.0f);
  CHECK(kt::bf16_to_float(0x0001) == f32_from_bits(0x00010000u));  // bf16 subnormal
}

TEST_CASE("half_to_float: known values", "[reference]") {
  CHECK(kt::half_to_float(0x3C00) == 1.0f);
  CHECK(kt::half_to_float(0x7BFF) == 65504.0f);
  CHECK(kt::half_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(kt::half_to_float(0x03FF) == std::ldexp(1023.0f, -24));
  CHECK(kt::half_to_float(0x0400) == std::ldexp(1.0f, -14));
  CHECK(kt::half_to_float(0x7C00) == std::numeric_limits<float>::infinity());
  CHECK(kt::half_to_float(0xFC00) == -std::numeric_limits<float>::infinity());
  CHECK(std::signbit(kt::half_to_float(0x8000)));
  CHECK(kt::half_to_float(0x2E66) == Approx(0.1f).epsilon(1e-3));
}

TEST_CASE("fp16: all 65536 patterns round-trip exactly", "[reference]") {
  long long checked = 0;
  for (uint32_t p = 0; p <= 0xFFFFu; ++p) {
    const uint16_t h = static_cast<uint16_t>(p);
    const float f = kt::half_to_float(h);
    const bool is_nan = (h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0;
    if (is_nan) {
      REQUIRE(std::isnan(f));
      continue;
    }
    REQUIRE(kt::float_to_half(f) == h);
    // The conversion to float is exact: the value lies on the binary16 grid.
    if (std::isfinite(f) && f != 0.0f) REQUIRE((bits_from_f32(f) & 0x1FFFu) == 0u);
    ++checked;
  }
  CHECK(checked == 65536 - 2 * 1023);
}

TEST_CASE("fp16: float_to_half agrees with a nearest-value search on a sweep", "[reference]") {
  // Independent check of rounding: for floats between grid points, the chosen half must be the
  // nearest (ties to even mantissa).
  for (uint32_t p = 0; p < 0x7BFFu; p += 7) {
    const float lo = kt::half_to_float(static_cast<uint16_t>(p));
    const float hi = kt::half_to_float(static_cast<uint16_t>(p + 1));
    const double mid = 0.5 * (static_cast<double>(lo) + hi);
    const float below = std::nextafter(static_cast<float>(mid), 0.0f);
    const float above = std::nextafter(static_cast<float>(mid), 1e6f);
    REQUIRE(kt::float_to_half(below) == p);
    REQUIRE(kt::float_to_half(above) == p + 1);
    REQUIRE(kt::float_to_half(static_cast<float>(mid)) == ((p & 1u) ? p + 1 : p));
  }
}

TEST_CASE("bf16: all 65536 patterns round-trip exactly", "[reference]") {
  for (uint32_t p = 0; p <= 0xFFFFu; ++p) {
    const uint16_t b = static_cast<uint16_t>(p);
    const float f = kt::bf16_to_float(b);
    REQUIRE(bits_from_f32(f) == (p << 16));
    if (std::isnan(f)) {
      REQUIRE(std::isnan(kt::bf16_to_float(kt::float_to_bf16(f))));
      continue;
    }
    REQUIRE(kt::float_to_bf16(f) == b);
  }
}

TEST_CASE("dtype helpers: names, parsing, dispatch", "[reference]") {
  CHECK(std::string(kt::dtype_name(kt::DType::f16)) == "fp16");
  CHECK(std::string(kt::dtype_name(kt::DType::bf16)) == "bf16");
  for (const char* s : {"fp16", "f16", "float16", "half"}) CHECK(kt::parse_dtype(s) == kt::DType::f16);
  for (const char* s : {"bf16", "bfloat16"}) CHECK(kt::parse_dtype(s) == kt::DType::bf16);
  CHECK_THROWS_AS(kt::parse_dtype("fp32"), std::invalid_argument);
  CHECK_THROWS_WITH(kt::parse_dtype("int8"), "unknown dtype 'int8' (expected fp16 or bf16)");
  CHECK_THROWS_WITH(kt::parse_dtype(""), "unknown dtype '' (expected fp16 or bf16)");
  CHECK(kt::float_to_dtype(kt::DType::f16, 1.0f) == 0x3C00);
  CHECK(kt::float_to_dtype(kt::DType::bf16, 1.0f) == 0x3F80);
  CHECK(kt::dtype_to_float(kt::DType::f16, 0xC000) == -2.0f);
  CHECK(kt::dtype_to_float(kt::DType::bf16, 0xC000) == -2.0f);
  CHECK(kt::dtype_to_float(kt::DType::f16, 0x3555) == kt::half_to_float(0x3555));
  CHECK(kt::dtype_to_float(kt::DType::bf16, 0x3555) == kt::bf16_to_float(0x3555));
}

TEST_CASE("fill_random: deterministic, nonzero, normally distributed", "[reference]") {
  for (kt::DType dt : {kt::DType::f16, kt::DType::bf16}) {
    const size_t n = 20000;
    std::vector<uint16_t> a(n), b(n), c(n);
    kt::fill_random(dt, a.data(), n, 42);
    kt::fill_random(dt, b.data(), n, 42);
    kt::fill_random(dt, c.data(), n, 43);
    CHECK(a == b);
    CHECK(a != c);
    double sum = 0, sum2 = 0;
    size_t within1 = 0;
    for (uint16_t x : a) {
      const float f = kt::dtype_to_float(dt, x);
      REQUIRE(std::isfinite(f));
      REQUIRE(f != 0.0f);
      REQUIRE(kt::float_to_dtype(dt, f) == x);
      sum += f;
      sum2 += static_cast<double>(f) * f;
      if (std::fabs(f) < 1.0f) ++within1;
    }
    const double mean = sum / n, var = sum2 / n - mean * mean;
    CHECK(std::fabs(mean) < 0.05);
    CHECK(std::sqrt(var) == Approx(1.0).epsilon(0.05));
    CHECK(static_cast<double>(within1) / n == Approx(0.6827).epsilon(0.03));  // one-sigma mass

    // stddev scales the distribution.
    std::vector<uint16_t> s(n);
    kt::fill_random(dt, s.data(), n, 7, 0.01f);
    double s2 = 0;
    for (uint16_t x : s) s2 += std::pow(static_cast<double>(kt::dtype_to_float(dt, x)), 2);
    CHECK(std::sqrt(s2 / n) == Approx(0.01).epsilon(0.05));
  }
  uint16_t one = 0;
  kt::fill_random(kt::DType::f16, &one, 1, 0, 1e-9f);  // almost all samples underflow; still nonzero
  CHECK((one & 0x7FFF) != 0);
  CHECK_THROWS_AS(kt::fill_random(kt::DType::f16, &one, 1, 0, 0.0f), std::invalid_argument);
  CHECK_THROWS_AS(kt::fill_random(kt::DType::f16, nullptr, 4, 0), std::invalid_argument);
}
