// kt_quant: codecs bit-exact against the specs, hand-computed vectors per format, round-trip error bounds,
// packed layout, validation errors, importers (GPTQ int4, bitsandbytes NF4) and NF4 double quantization.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "quant/quant.h"
#include "reference/dtype_convert.h"

using kt::quant::Format;
using kt::quant::PackedWeight;

namespace {

const Format kAllFormats[] = {Format::fp16,        Format::bf16,       Format::int8,       Format::int4,
                              Format::nf4,         Format::mxfp4,      Format::nvfp4,      Format::fp16_kb64,
                              Format::bf16_kb64,   Format::int8_kb64,  Format::int4_kb128, Format::nf4_kb128,
                              Format::mxfp4_kb128, Format::nvfp4_kb128};
static_assert(sizeof(kAllFormats) / sizeof(kAllFormats[0]) == kt::quant::kFormatCount, "every format is tested");

// bitsandbytes functional.py, get_4bit_type("nf4") (copied independently of quant_format.h).
const double kBnbNf4[16] = {-1.0,
                            -0.6961928009986877,
                            -0.5250730514526367,
                            -0.39491748809814453,
                            -0.28444138169288635,
                            -0.18477343022823334,
                            -0.09105003625154495,
                            0.0,
                            0.07958029955625534,
                            0.16093020141124725,
                            0.24611230194568634,
                            0.33791524171829224,
                            0.44070982933044434,
                            0.5626170039176941,
                            0.7229568362236023,
                            1.0};

float f32_le(const uint8_t* p) {
  uint32_t u = p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t u16_le(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint8_t nib(const PackedWeight& pw, int r, int c) {
  const uint8_t b = pw.data[static_cast<size_t>(r) * pw.k / 2 + c / 2];
  return (c & 1) ? b >> 4 : b & 0xF;
}

// OCP OFP8 E4M3 value of a byte by the spec's formula (independent of the implementation).
double e4m3_spec(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "<no exception>";
}

// Inverse standard normal CDF by bisection on erfc (for the independent NF4 construction).
double norm_ppf(double p) {
  double lo = -40, hi = 40;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

// Half the spacing of the E2M1 grid around |x| (saturation beyond 6): the largest rounding error.
double e2m1_err_bound(double x) {
  const double a = std::fabs(x);
  return a <= 2 ? 0.25 : a <= 4 ? 0.5 : a <= 6 ? 1.0 : a - 6.0;
}

std::vector<float> normal_weights(int n, int k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 0.02f);
  std::vector<float> w(static_cast<size_t>(n) * k);
  for (auto& x : w) x = nd(rng);
  return w;
}

}  // namespace

TEST_CASE("format names round trip and unknown names are rejected", "[quant]") {
  const char* names[] = {"fp16",       "bf16",      "int8",        "int4",       "nf4",
                         "mxfp4",      "nvfp4",     "fp16_kb64",   "bf16_kb64",  "int8_kb64",
                         "int4_kb128", "nf4_kb128", "mxfp4_kb128", "nvfp4_kb128"};
  for (int i = 0; i < kt::quant::kFormatCount; ++i) {
    CHECK(std::string(kt::quant::format_name(kAllFormats[i])) == names[i]);
    CHECK(kt::quant::parse_format(names[i]) == kAllFormats[i]);
  }
  CHECK(
      error_of([] { kt::quant::parse_format("fp8"); }) ==
      "unknown weight format 'fp8' (expected fp16, bf16, int8, int4, nf4, mxfp4, nvfp4, fp16_kb64, bf16_kb64, int8_kb64, "
      "int4_kb128, nf4_kb128, mxfp4_kb128 or nvfp4_kb128)");
  CHECK_THROWS_AS(kt::quant::parse_format("NF4"), std::invalid_argument);
}

TEST_CASE("E2M1: all 16 codes, rounding ties to even, saturation", "[quant]") {
  // OCP MX v1.0 table 5 (FP4 E2M1): exponent bias 1, subnormal 0.5.
  const float want[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  for (int c = 0; c < 16; ++c) {
    const float v = kt::quant::e2m1_to_float(static_cast<uint8_t>(c));
    CHECK(v == (c & 8 ? -want[c & 7] : want[c & 7]));
    CHECK(std::signbit(v) == ((c & 8) != 0));
    CHECK(kt::quant::float_to_e2m1(v) == c);  // round trip, -0 included
  }
  CHECK(kt::quant::float_to_e2m1(0.25f) == 0x0);
  CHECK(kt::quant::float_to_e2m1(0.26f) == 0x1);
  CHECK(kt::quant::float_to_e2m1(0.75f) == 0x2);
  CHECK(kt::quant::float_to_e2m1(1.25f) == 0x2);
  CHECK(kt::quant::float_to_e2m1(1.75f) == 0x4);
  CHECK(kt::quant::float_to_e2m1(2.5f) == 0x4);
  CHECK(kt::quant::float_to_e2m1(3.5f) == 0x6);
  CHECK(kt::quant::float_to_e2m1(5.f) == 0x6);
  CHECK(kt::quant::float_to_e2m1(5.01f) == 0x7);
  CHECK(kt::quant::float_to_e2m1(-5.f) == 0xE);
  CHECK(kt::quant::float_to_e2m1(7.f) == 0x7);
  CHECK(kt::quant::float_to_e2m1(1e30f) == 0x7);
  CHECK(kt::quant::float_to_e2m1(-INFINITY) == 0xF);
  CHECK(kt::quant::float_to_e2m1(-0.1f) == 0x8);
  CHECK(kt::quant::float_to_e2m1(NAN) == 0x0);
}

TEST_CASE("E4M3: all 256 codes match the OCP FP8 spec, round trip, RNE ties, saturation", "[quant]") {
  CHECK(kt::quant::e4m3_to_float(0x7E) == 448.f);
  CHECK(kt::quant::e4m3_to_float(0xFE) == -448.f);
  CHECK(kt::quant::e4m3_to_float(0x08) == std::ldexp(1.f, -6));
  CHECK(kt::quant::e4m3_to_float(0x01) == std::ldexp(1.f, -9));
  CHECK(kt::quant::e4m3_to_float(0x38) == 1.f);
  CHECK(std::isnan(kt::quant::e4m3_to_float(0x7F)));
  CHECK(std::isnan(kt::quant::e4m3_to_float(0xFF)));
  CHECK(std::isinf(kt::quant::e4m3_to_float(0x78)) == false);  // no infinities: 0x78 = 256
  CHECK(kt::quant::e4m3_to_float(0x78) == 256.f);
  CHECK(std::signbit(kt::quant::e4m3_to_float(0x80)));
  for (int c = 0; c < 256; ++c) {
    const double want = e4m3_spec(c);
    const float got = kt::quant::e4m3_to_float(static_cast<uint8_t>(c));
    INFO("code " << c);
    if (std::isnan(want)) {
      CHECK(std::isnan(got));
      continue;
    }
    CHECK(static_cast<double>(got) == want);
    CHECK(kt::quant::float_to_e4m3(got) == c);
  }
  // Midpoints between consecutive finite positive codes go to the even code; just off them, to the nearest.
  for (int c = 0; c < 0x7E; ++c) {
    const double lo = e4m3_spec(c), hi = e4m3_spec(c + 1);
    const float mid = static_cast<float>(0.5 * (lo + hi));  // exact in fp32
    REQUIRE(static_cast<double>(mid) == 0.5 * (lo + hi));
    INFO("between codes " << c << " and " << c + 1);
    const int even = (c % 2 == 0) ? c : c + 1;
    CHECK(kt::quant::float_to_e4m3(mid) == even);
    CHECK(kt::quant::float_to_e4m3(-mid) == (even | 0x80));
    CHECK(kt::quant::float_to_e4m3(std::nextafter(mid, 0.f)) == c);
    CHECK(kt::quant::float_to_e4m3(std::nextafter(mid, 1e9f)) == c + 1);
  }
  CHECK(kt::quant::float_to_e4m3(449.f) == 0x7E);
  CHECK(kt::quant::float_to_e4m3(464.f) == 0x7E);
  CHECK(kt::quant::float_to_e4m3(480.f) == 0x7E);
  CHECK(kt::quant::float_to_e4m3(1e30f) == 0x7E);
  CHECK(kt::quant::float_to_e4m3(INFINITY) == 0x7E);
  CHECK(kt::quant::float_to_e4m3(-INFINITY) == 0xFE);
  CHECK(kt::quant::float_to_e4m3(NAN) == 0x7F);
  CHECK(kt::quant::float_to_e4m3(std::ldexp(1.f, -10)) == 0x00);  // half the smallest subnormal: tie to 0
  CHECK(kt::quant::float_to_e4m3(std::ldexp(1.f, -11)) == 0x00);
  CHECK(kt::quant::float_to_e4m3(-0.f) == 0x80);
}

TEST_CASE("E8M0: power-of-two scales", "[quant]") {
  CHECK(kt::quant::e8m0_to_float(127) == 1.f);
  CHECK(kt::quant::e8m0_to_float(128) == 2.f);
  CHECK(kt::quant::e8m0_to_float(125) == 0.25f);
  CHECK(kt::quant::e8m0_to_float(0) == std::ldexp(1.f, -127));
  CHECK(kt::quant::e8m0_to_float(0) > 0.f);
  CHECK(kt::quant::e8m0_to_float(254) == std::ldexp(1.f, 127));
  CHECK(std::isnan(kt::quant::e8m0_to_float(255)));
}

TEST_CASE("NF4 table equals bitsandbytes' values and its normal-quantile construction", "[quant]") {
  const float table[16] = KT_NF4_CODE;
  for (int i = 0; i < 16; ++i) CHECK(table[i] == static_cast<float>(kBnbNf4[i]));
  for (int i = 0; i < 16; ++i) CHECK(kt::quant::nf4_code(i) == table[i]);  // the kernels' switch form
  // bitsandbytes create_normal_map(offset=0.9677083, use_extra_value=True): 8 positive quantiles of
  // linspace(offset, 0.5, 9)[:-1], 7 negative of linspace(offset, 0.5, 8)[:-1], a zero, normalized by the max.
  const double offset = 0.9677083;
  std::vector<double> v;
  for (int i = 0; i < 8; ++i) v.push_back(norm_ppf(offset + (0.5 - offset) * i / 8.0));
  for (int i = 0; i < 7; ++i) v.push_back(-norm_ppf(offset + (0.5 - offset) * i / 7.0));
  v.push_back(0.0);
  std::sort(v.begin(), v.end());
  const double mx = v.back();
  for (int i = 0; i < 16; ++i) CHECK(std::fabs(v[i] / mx - table[i]) < 1e-6);
}

TEST_CASE("int8 known vector: per-row absmax / 127, round half to even", "[quant]") {
  std::vector<float> w(2 * 64, 0.f);
  const float row0[7] = {127.f, -2.f, 0.5f, 3.4f, -3.6f, 1.5f, 2.5f};
  std::copy(row0, row0 + 7, w.begin());
  w[63] = -127.f;
  const PackedWeight pw = kt::quant::quantize(Format::int8, w.data(), 2, 64);
  REQUIRE(pw.data.size() == 128);
  REQUIRE(pw.scales.size() == 8);
  CHECK(pw.zeros.empty());
  CHECK(f32_le(&pw.scales[0]) == 1.f);
  CHECK(f32_le(&pw.scales[4]) == 0.f);  // all-zero row
  const int8_t want[7] = {127, -2, 0, 3, -4, 2, 2};
  for (int i = 0; i < 7; ++i) CHECK(static_cast<int8_t>(pw.data[i]) == want[i]);
  CHECK(static_cast<int8_t>(pw.data[63]) == -127);
  for (int i = 64; i < 128; ++i) CHECK(pw.data[i] == 0);
  std::vector<double> out(128);
  kt::quant::dequantize(pw, out.data());
  CHECK(out[4] == -4.0);
  CHECK(out[63] == -127.0);
}

TEST_CASE("int4 known vector: min/max group scale in fp16, zero point, nibble order", "[quant]") {
  std::vector<float> w(3 * 128, 0.f);
  w[0] = -1.5f;  // min
  w[1] = 3.f;    // max
  w[2] = 0.6f;
  // Row 1: positive only -> range widened to [0, 2]; 2/15 rounds down in fp16, so the scale steps up.
  w[128 + 0] = 1.f;
  w[128 + 1] = 2.f;
  // Row 2 stays zero.
  const PackedWeight pw = kt::quant::quantize(Format::int4, w.data(), 3, 128);
  REQUIRE(pw.data.size() == 3 * 64);
  REQUIRE(pw.scales.size() == 3 * 2);
  REQUIRE(pw.zeros.size() == 3);
  CHECK(u16_le(&pw.scales[0]) == 0x34CD);  // fp16(4.5 / 15 = 0.3) = 0.300048828125
  CHECK(pw.zeros[0] == 5);                 // round(1.5 / 0.30005)
  CHECK(pw.data[0] == 0xF0);               // element 0 (q 0) low nibble, element 1 (q 15) high
  CHECK(nib(pw, 0, 2) == 7);               // round(0.6 / 0.30005) + 5
  CHECK(nib(pw, 0, 3) == 5);               // 0 -> the zero point
  CHECK(u16_le(&pw.scales[2]) == 0x3045);  // 2/15: nearest fp16 0x3044 is below, so 0x3045 = 0.13342285
  CHECK(pw.zeros[1] == 0);
  CHECK(nib(pw, 1, 0) == 7);
  CHECK(nib(pw, 1, 1) == 15);
  CHECK(u16_le(&pw.scales[4]) == 0x3C00);  // all-zero group: s = 1, z = 0
  CHECK(pw.zeros[2] == 0);
  std::vector<double> out(3 * 128);
  kt::quant::dequantize(pw, out.data());
  CHECK(out[0] == -5 * 0.300048828125);
  CHECK(out[1] == 10 * 0.300048828125);
  CHECK(out[3] == 0.0);
  CHECK(out[129] == 15 * static_cast<double>(kt::half_to_float(0x3045)));
}

TEST_CASE("nf4 known vector: absmax per 64, nearest code", "[quant]") {
  std::vector<float> w(128, 0.f);
  const float v[6] = {2.f, -2.f, 0.f, 1.f, 0.2f, -0.7f};
  std::copy(v, v + 6, w.begin());
  w[64] = 0.5f;  // second block: absmax 0.5, element -> code 15
  const PackedWeight pw = kt::quant::quantize(Format::nf4, w.data(), 1, 128);
  REQUIRE(pw.scales.size() == 8);
  CHECK(f32_le(&pw.scales[0]) == 2.f);
  CHECK(f32_le(&pw.scales[4]) == 0.5f);
  const int want[6] = {15, 0, 7, 12, 8, 3};
  for (int i = 0; i < 6; ++i) CHECK(nib(pw, 0, i) == want[i]);
  CHECK(nib(pw, 0, 64) == 15);
  CHECK(nib(pw, 0, 65) == 7);
  std::vector<double> out(128);
  kt::quant::dequantize(pw, out.data());
  CHECK(out[3] == static_cast<double>(static_cast<float>(kBnbNf4[12])) * 2.0);
  CHECK(out[5] == static_cast<double>(static_cast<float>(kBnbNf4[3])) * 2.0);
}

TEST_CASE("mxfp4 known vector: shared exponent floor(log2(absmax)) - 2", "[quant]") {
  std::vector<float> w(64 * 2, 0.f);
  // Block 0 (absmax 6 -> exponent 0, E8M0 127).
  const float b0[8] = {6.f, -3.f, 0.25f, 0.75f, 5.f, 1.25f, -0.5f, 0.f};
  std::copy(b0, b0 + 8, w.begin());
  // Block 1 (absmax 1 -> exponent -2, E8M0 125): 1 -> 4, 0.7 -> 2.8 -> 3.
  w[32] = 1.f;
  w[33] = 0.7f;
  // Row 1, block 0: absmax 7.9 -> exponent 0, 7.9 saturates to 6.
  w[64] = 7.9f;
  w[65] = -7.f;
  const PackedWeight pw = kt::quant::quantize(Format::mxfp4, w.data(), 2, 64);
  REQUIRE(pw.scales.size() == 4);
  CHECK(pw.scales[0] == 127);
  CHECK(pw.scales[1] == 125);
  CHECK(pw.scales[2] == 127);
  CHECK(pw.scales[3] == 127);  // all-zero block
  const int want0[8] = {0x7, 0xD, 0x0, 0x2, 0x6, 0x2, 0x9, 0x0};
  for (int i = 0; i < 8; ++i) CHECK(nib(pw, 0, i) == want0[i]);
  CHECK(nib(pw, 0, 32) == 0x6);
  CHECK(nib(pw, 0, 33) == 0x5);
  CHECK(nib(pw, 1, 0) == 0x7);
  CHECK(nib(pw, 1, 1) == 0xF);
  std::vector<double> out(128);
  kt::quant::dequantize(pw, out.data());
  CHECK(out[33] == 0.75);
  CHECK(out[64] == 6.0);
}

TEST_CASE("nvfp4 known vector: tensor scale, E4M3 block scales, E2M1 elements", "[quant]") {
  std::vector<float> w(64, 0.f);
  w[0] = 6.f;  // block 0: absmax 6 -> scale E4M3(1) = 0x38
  w[1] = -1.5f;
  w[16] = 2688.f;  // block 1: absmax 2688 = 448 * 6 -> tensor scale 1, scale 0x7E
  w[17] = 448.f;
  w[32] = 0.3f;  // block 2: 0.3 / 6 = 0.05 -> E4M3 0x15 (0.05078125); 0.3 / 0.05078125 = 5.9 -> 6
  // block 3: zero -> scale 0, elements 0
  const PackedWeight pw = kt::quant::quantize(Format::nvfp4, w.data(), 1, 64);
  CHECK(pw.tensor_scale == 1.f);
  REQUIRE(pw.scales.size() == 4);
  CHECK(pw.scales[0] == 0x38);
  CHECK(pw.scales[1] == 0x7E);
  CHECK(pw.scales[2] == 0x15);
  CHECK(pw.scales[3] == 0x00);
  CHECK(nib(pw, 0, 0) == 0x7);
  CHECK(nib(pw, 0, 1) == 0xB);
  CHECK(nib(pw, 0, 16) == 0x7);
  CHECK(nib(pw, 0, 17) == 0x2);
  CHECK(nib(pw, 0, 32) == 0x7);
  std::vector<double> out(64);
  kt::quant::dequantize(pw, out.data());
  CHECK(out[32] == 6 * 0.05078125);
  CHECK(out[17] == 448.0);
  // Tensor scale = absmax / 2688 in general.
  for (auto& x : w) x *= 0.5f;
  CHECK(kt::quant::quantize(Format::nvfp4, w.data(), 1, 64).tensor_scale == 0.5f);
}

TEST_CASE("round trip error bounds per format on normal weights", "[quant]") {
  const int n = 64, k = 512;
  const std::vector<float> w = normal_weights(n, k, 1234);
  std::vector<double> out(static_cast<size_t>(n) * k);
  const float nf4[16] = KT_NF4_CODE;
  double nf4_gap = 0;
  for (int i = 0; i < 15; ++i) nf4_gap = std::max(nf4_gap, static_cast<double>(nf4[i + 1] - nf4[i]));
  double wnorm = 0;
  for (float x : w) wnorm += static_cast<double>(x) * x;
  for (Format f : kAllFormats) {
    const PackedWeight pw = kt::quant::quantize(f, w.data(), n, k);
    REQUIRE_NOTHROW(kt::quant::validate(pw));
    kt::quant::dequantize(pw, out.data());
    const int g = kt::quant::format_group(f);
    const int gpr = g > 0 ? k / g : 1;
    double err2 = 0;
    size_t violations = 0;
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < k; ++c) {
        const size_t i = static_cast<size_t>(r) * k + c;
        const double x = w[i], e = std::fabs(x - out[i]);
        err2 += e * e;
        const size_t si = static_cast<size_t>(r) * gpr + (g > 0 ? c / g : 0);
        double bound = 0;
        switch (kt::quant::format_element(f)) {  // K-blocked: the element format's bound (same values)
          case Format::fp16:
          case Format::fp16_kb64: bound = std::max(std::ldexp(std::fabs(x), -11), std::ldexp(1.0, -25)); break;
          case Format::bf16:
          case Format::bf16_kb64: bound = std::ldexp(std::fabs(x), -8); break;
          case Format::int8: bound = f32_le(&pw.scales[si * 4]) / 2.0 * (1 + 1e-9); break;
          case Format::int4: bound = kt::half_to_float(u16_le(&pw.scales[si * 2])) / 2.0 * (1 + 1e-9); break;
          case Format::nf4: bound = f32_le(&pw.scales[si * 4]) * (nf4_gap / 2 + 1e-6); break;
          case Format::mxfp4: {
            const double s = std::ldexp(1.0, pw.scales[si] - 127);
            bound = e2m1_err_bound(x / s) * s * (1 + 1e-9);
            break;
          }
          case Format::nvfp4: {
            const double s = kt::quant::e4m3_to_float(pw.scales[si]) * static_cast<double>(pw.tensor_scale);
            bound = e2m1_err_bound(x / s) * s * (1 + 1e-9);
            break;
          }
          default: FAIL("format_element returned a K-blocked packed format");
        }
        if (e > bound && ++violations <= 3)
          FAIL_CHECK(kt::quant::format_name(f) << " w[" << r << ", " << c << "] = " << x << " -> " << out[i]
                                               << ", error " << e << " > bound " << bound);
      }
    CHECK(violations == 0);
    const double rel = std::sqrt(err2 / wnorm);
    std::cout << "quantization error (relative Frobenius, N(0, 0.02^2) weights 64x512) " << kt::quant::format_name(f)
              << ": " << rel << std::endl;
    // Sanity ceilings (a quantizer that lost its scale or its rounding would exceed them).
    const Format el = kt::quant::format_element(f);
    const double ceiling = el == Format::fp16    ? 5e-4
                           : el == Format::bf16  ? 4e-3
                           : el == Format::int8  ? 0.015
                           : el == Format::mxfp4 ? 0.15
                                                 : 0.13;
    CHECK(rel < ceiling);
    CHECK(rel > 0);
  }
  // Block scales follow the definitions: mxfp4 absmax / 2^e in [4, 8); nvfp4 scales are the nearest E4M3.
  const PackedWeight mx = kt::quant::quantize(Format::mxfp4, w.data(), n, k);
  const PackedWeight nv = kt::quant::quantize(Format::nvfp4, w.data(), n, k);
  float amax_all = 0;
  for (float x : w) amax_all = std::max(amax_all, std::fabs(x));
  CHECK(nv.tensor_scale == static_cast<float>(amax_all / 2688.0));
  for (int r = 0; r < n; ++r) {
    for (int b = 0; b < k / 32; ++b) {
      float a = 0;
      for (int c = b * 32; c < b * 32 + 32; ++c) a = std::max(a, std::fabs(w[static_cast<size_t>(r) * k + c]));
      const double ratio = a / std::ldexp(1.0, mx.scales[static_cast<size_t>(r) * (k / 32) + b] - 127);
      CHECK((ratio >= 4 && ratio < 8));
    }
    for (int b = 0; b < k / 16; ++b) {
      float a = 0;
      for (int c = b * 16; c < b * 16 + 16; ++c) a = std::max(a, std::fabs(w[static_cast<size_t>(r) * k + c]));
      const double target = a / (6.0 * nv.tensor_scale);
      const double got = kt::quant::e4m3_to_float(nv.scales[static_cast<size_t>(r) * (k / 16) + b]);
      // No finite E4M3 value is closer to the target than the stored one.
      for (int c = 0; c < 0x7F; ++c) CHECK_FALSE(std::fabs(e4m3_spec(c) - target) < std::fabs(got - target));
    }
  }
}

TEST_CASE("K-blocked 16-bit layout: element (r, c) at ((c / 64) n + r) 64 + c % 64, same values as row-major",
          "[quant]") {
  // n = 5 rows, k = 192 (three K blocks): every element distinct, so a misplaced element is caught.
  const int n = 5, k = 192;
  std::vector<float> w(static_cast<size_t>(n) * k);
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < k; ++c) w[static_cast<size_t>(r) * k + c] = static_cast<float>(r * 1000 + c);
  for (const auto& pair :
       {std::make_pair(Format::fp16, Format::fp16_kb64), std::make_pair(Format::bf16, Format::bf16_kb64)}) {
    INFO(kt::quant::format_name(pair.second));
    const PackedWeight rm = kt::quant::quantize(pair.first, w.data(), n, k);
    const PackedWeight kb = kt::quant::quantize(pair.second, w.data(), n, k);
    REQUIRE(kb.data.size() == rm.data.size());
    CHECK(kb.scales.empty());
    CHECK(kb.zeros.empty());
    CHECK(kt::quant::format_bits(pair.second) == 16);
    CHECK(kt::quant::format_element(pair.second) == pair.first);
    CHECK(kt::quant::format_k_blocked(pair.second));
    CHECK_FALSE(kt::quant::format_k_blocked(pair.first));
    size_t moved = 0;
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < k; ++c) {
        const size_t at_rm = (static_cast<size_t>(r) * k + c) * 2,
                     at_kb = ((static_cast<size_t>(c / 64) * n + r) * 64 + c % 64) * 2;
        CHECK(kb.data[at_kb] == rm.data[at_rm]);
        CHECK(kb.data[at_kb + 1] == rm.data[at_rm + 1]);
        moved += at_kb != at_rm;
      }
    CHECK(moved > 0);
    // Known bytes: element (r = 1, c = 64) = 1064 = fp16 0x6428 / bf16 0x4485 sits at the start of K block 1, row 1:
    // byte ((1 * 5 + 1) * 64) * 2 = 768, little-endian.
    const uint16_t want = pair.first == Format::fp16 ? 0x6428 : 0x4485;
    CHECK((kb.data[768] | (kb.data[769] << 8)) == want);
    // dequantize reads the layout back: equal to the row-major twin's values.
    std::vector<double> a(static_cast<size_t>(n) * k), b(a.size());
    kt::quant::dequantize(rm, a.data());
    kt::quant::dequantize(kb, b.data());
    CHECK(a == b);
  }
}

TEST_CASE("K-blocked packed layout: byte b of row r at ((b / 64) n + r) 64 + b % 64, same scales, zeros and values",
          "[quant]") {
  const int n = 5, k = 384;  // 4-bit: 3 blocks of 64 bytes per row; int8: 6
  const std::vector<float> w = normal_weights(n, k, 77);
  const std::pair<Format, Format> pairs[] = {{Format::int8, Format::int8_kb64},
                                             {Format::int4, Format::int4_kb128},
                                             {Format::nf4, Format::nf4_kb128},
                                             {Format::mxfp4, Format::mxfp4_kb128},
                                             {Format::nvfp4, Format::nvfp4_kb128}};
  for (const auto& [rmf, kbf] : pairs) {
    INFO(kt::quant::format_name(kbf));
    CHECK(kt::quant::format_k_blocked(kbf));
    CHECK_FALSE(kt::quant::format_k_blocked(rmf));
    CHECK(kt::quant::format_element(kbf) == rmf);
    CHECK(kt::quant::format_bits(kbf) == kt::quant::format_bits(rmf));
    CHECK(kt::quant::format_group(kbf) == kt::quant::format_group(rmf));
    CHECK(kt::quant::scale_bytes(kbf) == kt::quant::scale_bytes(rmf));
    const PackedWeight rm = kt::quant::quantize(rmf, w.data(), n, k);
    const PackedWeight kb = kt::quant::quantize(kbf, w.data(), n, k);
    REQUIRE(kb.format == kbf);
    REQUIRE(kb.data.size() == rm.data.size());
    CHECK(kb.scales == rm.scales);
    CHECK(kb.zeros == rm.zeros);
    CHECK(kb.tensor_scale == rm.tensor_scale);
    const size_t rb = rm.data.size() / n;
    size_t moved = 0;
    for (size_t r = 0; r < size_t(n); ++r)
      for (size_t b = 0; b < rb; ++b) {
        const size_t at_kb = (b / 64 * n + r) * 64 + b % 64;
        CHECK(kb.data[at_kb] == rm.data[r * rb + b]);
        moved += at_kb != r * rb + b;
      }
    CHECK(moved > 0);
    // The conversions are each other's inverse and equal quantize's.
    const PackedWeight to = kt::quant::to_k_blocked(rm), back = kt::quant::from_k_blocked(kb);
    CHECK(to.format == kbf);
    CHECK(to.data == kb.data);
    CHECK(back.format == rmf);
    CHECK(back.data == rm.data);
    std::vector<double> a(static_cast<size_t>(n) * k), c(a.size());
    kt::quant::dequantize(rm, a.data());
    kt::quant::dequantize(kb, c.data());
    CHECK(a == c);
    // Wrong direction or a K the 64-byte blocks do not tile: clear errors.
    CHECK_THROWS_WITH(kt::quant::to_k_blocked(kb), Catch::Contains("expected a row-major packed format"));
    CHECK_THROWS_WITH(kt::quant::from_k_blocked(rm), Catch::Contains("expected a K-blocked packed format"));
  }
  // 4-bit K-blocked formats need k a multiple of 128 (64 bytes), int8 of 64.
  const std::vector<float> w64 = normal_weights(2, 64, 5);
  CHECK_THROWS_WITH(kt::quant::quantize(Format::nf4_kb128, w64.data(), 2, 64), Catch::Contains("multiple of 128"));
  CHECK_NOTHROW(kt::quant::quantize(Format::int8_kb64, w64.data(), 2, 64));
  CHECK_THROWS_WITH(kt::quant::to_k_blocked(kt::quant::quantize(Format::mxfp4, w64.data(), 2, 64)),
                    Catch::Contains("multiple of 128"));
  CHECK_THROWS_WITH(kt::quant::to_k_blocked(kt::quant::quantize(Format::fp16, w64.data(), 2, 64)),
                    Catch::Contains("expected a row-major packed format"));
}

TEST_CASE("packed layout: sizes, nibble order, row-major scales and zeros", "[quant]") {
  const int n = 3, k = 256;
  std::vector<float> w(static_cast<size_t>(n) * k, 0.f);
  for (Format f : kAllFormats) {
    const PackedWeight pw = kt::quant::quantize(f, w.data(), n, k);
    INFO(kt::quant::format_name(f));
    const size_t bits = kt::quant::format_bits(f);
    CHECK(pw.data.size() == n * k * bits / 8);
    const Format el = kt::quant::format_element(f);
    const size_t want_scales = bits == 16            ? 0
                               : el == Format::int8  ? n * 4
                               : el == Format::int4  ? n * (k / 128) * 2
                               : el == Format::nf4   ? n * (k / 64) * 4
                               : el == Format::mxfp4 ? n * (k / 32)
                                                     : n * (k / 16);
    CHECK(pw.scales.size() == want_scales);
    CHECK(pw.zeros.size() == (el == Format::int4 ? static_cast<size_t>(n) * 2 : 0u));
    CHECK(pw.tensor_scale == 1.f);
  }
  // int4: group (r, g) gets range proportional to 1 + r*2 + g and its own zero point round(15 m / (15 + m)).
  for (int r = 0; r < n; ++r)
    for (int g = 0; g < 2; ++g) {
      const float top = static_cast<float>(1 + r * 2 + g);
      w[static_cast<size_t>(r) * k + g * 128] = top * 15.f / 16.f;
      w[static_cast<size_t>(r) * k + g * 128 + 1] = -top / 16.f * (g ? 4.f : 2.f);
    }
  const PackedWeight i4 = kt::quant::quantize(Format::int4, w.data(), n, k);
  for (int r = 0; r < n; ++r)
    for (int g = 0; g < 2; ++g) {
      const double top = 1 + r * 2 + g;
      const double s = kt::half_to_float(u16_le(&i4.scales[(static_cast<size_t>(r) * 2 + g) * 2]));
      CHECK(std::fabs(s - top * (15.0 + (g ? 4.0 : 2.0)) / 16.0 / 15.0) < 1e-3 * top);
      CHECK(i4.zeros[static_cast<size_t>(r) * 2 + g] == (g ? 3 : 2));  // m = 4: round(3.16); m = 2: round(1.76)
    }
  // 16-bit: little-endian values in K order.
  std::vector<float> one(64, 0.f);
  one[1] = 1.f;
  const PackedWeight h = kt::quant::quantize(Format::fp16, one.data(), 1, 64);
  CHECK(h.data[2] == 0x00);
  CHECK(h.data[3] == 0x3C);
  const PackedWeight b = kt::quant::quantize(Format::bf16, one.data(), 1, 64);
  CHECK(b.data[2] == 0x80);
  CHECK(b.data[3] == 0x3F);
  // 4-bit: element 0 low nibble, element 1 high nibble of byte 0 (mxfp4 codes of 6 and 0).
  one[0] = 6.f;
  one[1] = 0.f;
  one[3] = -6.f;
  const PackedWeight m = kt::quant::quantize(Format::mxfp4, one.data(), 1, 64);
  CHECK(m.data[0] == 0x07);
  CHECK(m.data[1] == 0xF0);
}

TEST_CASE("validate and quantize reject bad input, naming the field", "[quant]") {
  std::vector<float> w(4 * 256, 0.5f);
  const PackedWeight good = kt::quant::quantize(Format::int4, w.data(), 4, 256);
  REQUIRE_NOTHROW(kt::quant::validate(good));
  auto msg = [](PackedWeight pw) { return error_of([&] { kt::quant::validate(pw); }); };
  PackedWeight p = good;
  p.data.pop_back();
  CHECK_THAT(msg(p), Catch::Contains("data has 511 bytes, expected 512"));
  p = good;
  p.scales.push_back(0);
  CHECK_THAT(msg(p), Catch::Contains("scales has 17 bytes, expected 16"));
  p = good;
  p.zeros.clear();
  CHECK_THAT(msg(p), Catch::Contains("zeros has 0 bytes"));
  p = good;
  p.zeros[3] = 16;
  CHECK_THAT(msg(p), Catch::Contains("zeros[3]"));
  p = good;
  p.scales[1] = 0x7C;  // fp16 inf
  CHECK_THAT(msg(p), Catch::Contains("scales entry 0"));
  p = good;
  p.tensor_scale = 2.f;
  CHECK_THAT(msg(p), Catch::Contains("tensor_scale must be 1"));
  p = good;
  p.k = 192;
  CHECK_THAT(msg(p), Catch::Contains("group size 128"));
  p = good;
  p.n = 0;
  CHECK_THAT(msg(p), Catch::Contains("n must be >= 1"));
  PackedWeight nv = kt::quant::quantize(Format::nvfp4, w.data(), 4, 256);
  REQUIRE_NOTHROW(kt::quant::validate(nv));
  nv.tensor_scale = 0.f;
  CHECK_THAT(msg(nv), Catch::Contains("tensor_scale must be finite and >= 2^-126"));
  nv.tensor_scale = std::numeric_limits<float>::denorm_min() * 27;  // 3.78e-44, what quantize once gave 1e-40 weights
  CHECK_THAT(msg(nv), Catch::Contains("tensor_scale must be finite and >= 2^-126"));
  nv.tensor_scale = std::numeric_limits<float>::min();
  CHECK_NOTHROW(kt::quant::validate(nv));
  PackedWeight mx = kt::quant::quantize(Format::mxfp4, w.data(), 4, 256);
  mx.scales[5] = 255;
  CHECK_THAT(msg(mx), Catch::Contains("scales entry 5"));
  PackedWeight i8 = kt::quant::quantize(Format::int8, w.data(), 4, 256);
  i8.zeros.push_back(1);
  CHECK_THAT(msg(i8), Catch::Contains("zeros has 1 bytes, expected 0"));
  std::vector<double> out(4 * 256);
  CHECK_THROWS_AS(kt::quant::dequantize(p, out.data()), std::invalid_argument);

  auto qmsg = [&](Format f, const float* x, int n, int k) {
    return error_of([&] { kt::quant::quantize(f, x, n, k); });
  };
  CHECK_THAT(qmsg(Format::int4, w.data(), 1, 192), Catch::Contains("multiple of the group size 128"));
  CHECK_THAT(qmsg(Format::fp16, w.data(), 1, 100), Catch::Contains("multiple of 64"));
  CHECK_THAT(qmsg(Format::nf4, w.data(), 0, 64), Catch::Contains("n must be >= 1"));
  CHECK_THAT(qmsg(Format::nf4, w.data(), 1, 0), Catch::Contains("k must be >= 1"));
  CHECK_THAT(qmsg(Format::int8, nullptr, 1, 64), Catch::Contains("w is null"));
  w[70] = NAN;
  CHECK_THAT(qmsg(Format::mxfp4, w.data(), 2, 64), Catch::Contains("w[1, 6] is not finite"));
  w[70] = INFINITY;
  CHECK_THAT(qmsg(Format::nvfp4, w.data(), 2, 64), Catch::Contains("w[1, 6] is not finite"));
  w[70] = 1e6f;
  CHECK_THAT(qmsg(Format::fp16, w.data(), 2, 64), Catch::Contains("overflows fp16"));
  CHECK_NOTHROW(kt::quant::quantize(Format::bf16, w.data(), 2, 64));
}

TEST_CASE("validate refuses what quantize never writes: 16-bit NaN/inf, negative absmax scales", "[quant]") {
  std::vector<float> w(2 * 128, 0.5f);
  auto msg = [](const PackedWeight& pw) { return error_of([&] { kt::quant::validate(pw); }); };
  for (const Format f : {Format::fp16, Format::bf16, Format::fp16_kb64, Format::bf16_kb64}) {
    INFO(kt::quant::format_name(f));
    const PackedWeight good = kt::quant::quantize(f, w.data(), 2, 128);
    REQUIRE_NOTHROW(kt::quant::validate(good));
    const bool half = kt::quant::format_element(f) == Format::fp16;
    // Element (1, 70): row-major at (1 * 128 + 70) * 2, K-blocked at ((70 / 64) * 2 + 1) * 64 + 6, times 2.
    const size_t off = kt::quant::format_k_blocked(f) ? ((1 * 2 + 1) * 64 + 6) * 2 : (128 + 70) * 2;
    for (const uint16_t bits : {uint16_t(half ? 0x7E00 : 0x7FC1), uint16_t(half ? 0xFC00 : 0xFF80)}) {
      PackedWeight p = good;
      p.data[off] = static_cast<uint8_t>(bits & 0xFF);
      p.data[off + 1] = static_cast<uint8_t>(bits >> 8);
      const std::string m = msg(p);
      CHECK_THAT(m, Catch::Contains("data element w[1, 70]"));
      CHECK_THAT(m, Catch::Contains((bits & 0x8000) ? "is infinite" : "is NaN"));
      std::vector<double> out(2 * 128);
      CHECK_THROWS_AS(kt::quant::dequantize(p, out.data()), std::invalid_argument);
    }
  }
  for (const Format f : {Format::int8, Format::nf4}) {
    INFO(kt::quant::format_name(f));
    PackedWeight p = kt::quant::quantize(f, w.data(), 2, 128);
    const float neg = -0.25f;
    std::memcpy(&p.scales[4], &neg, 4);
    CHECK_THAT(msg(p), Catch::Contains("scales entry 1 is negative (-0.25)"));
    const float zero = 0.f;  // an all-zero row / block stores 0: valid
    std::memcpy(&p.scales[4], &zero, 4);
    CHECK_NOTHROW(kt::quant::validate(p));
  }
}

TEST_CASE("nvfp4 tensor scale of tiny and zero weights: a normal fp32 that validate accepts", "[quant]") {
  const float fmin = std::numeric_limits<float>::min();
  for (const float v : {1e-44f, 1e-40f, 1e-38f, 3e-35f, 4e-35f, 1.f}) {
    INFO("w = " << v);
    std::vector<float> w(2 * 64, v);
    w[5] = -v;
    const PackedWeight pw = kt::quant::quantize(Format::nvfp4, w.data(), 2, 64);
    CHECK(std::isnormal(pw.tensor_scale));
    CHECK(pw.tensor_scale == std::max(static_cast<float>(static_cast<double>(v) / 2688.0), fmin));
    REQUIRE_NOTHROW(kt::quant::validate(pw));
    std::vector<double> out(w.size());
    kt::quant::dequantize(pw, out.data());
    // 1e-44 is below the grid's smallest block (6 * 2^-136): every block stores zero. The others keep sign and size.
    for (size_t i = 0; i < out.size(); ++i) {
      if (v < 6 * std::ldexp(1.0, -136)) {
        CHECK(out[i] == 0.0);
      } else {
        CHECK(std::fabs(out[i] - w[i]) <= 0.25 * v);
        CHECK((out[i] < 0) == (w[i] < 0));
      }
    }
  }
  std::vector<float> zero(64, 0.f);
  const PackedWeight z = kt::quant::quantize(Format::nvfp4, zero.data(), 1, 64);
  CHECK(z.tensor_scale == 1.f);
  CHECK(std::all_of(z.scales.begin(), z.scales.end(), [](uint8_t b) { return b == 0; }));
  CHECK(std::all_of(z.data.begin(), z.data.end(), [](uint8_t b) { return b == 0; }));
}

TEST_CASE("GPTQ int4 import reproduces the packed weight", "[quant]") {
  const int n = 16, k = 256, g = 128;
  std::vector<float> w = normal_weights(n, k, 77);
  for (int c = 0; c < 128; ++c) w[static_cast<size_t>(3) * k + c] = std::fabs(w[static_cast<size_t>(3) * k + c]);
  const PackedWeight pw = kt::quant::quantize(Format::int4, w.data(), n, k);
  REQUIRE(pw.zeros[3 * 2] == 0);  // a zero point of 0: stored by GPTQ v1 as 15
  for (auto mode : {kt::quant::GptqZeros::v1_minus_one, kt::quant::GptqZeros::v2_exact}) {
    // GPTQ packing (AutoGPTQ QuantLinear.pack): qweight[kk/8, nn] |= q << 4*(kk%8); qzeros[grp, nn/8] |=
    // (z - 1) << 4*(nn%8) (v1); scales [k/g, n] fp16.
    std::vector<uint32_t> qweight(static_cast<size_t>(k / 8) * n, 0), qzeros(static_cast<size_t>(k / g) * (n / 8), 0);
    std::vector<uint16_t> scales(static_cast<size_t>(k / g) * n);
    for (int nn = 0; nn < n; ++nn)
      for (int kk = 0; kk < k; ++kk)
        qweight[static_cast<size_t>(kk / 8) * n + nn] |= uint32_t(nib(pw, nn, kk)) << (4 * (kk % 8));
    for (int nn = 0; nn < n; ++nn)
      for (int grp = 0; grp < k / g; ++grp) {
        const uint32_t z = pw.zeros[static_cast<size_t>(nn) * (k / g) + grp];
        const uint32_t stored = mode == kt::quant::GptqZeros::v1_minus_one ? (z - 1) & 0xF : z;
        qzeros[static_cast<size_t>(grp) * (n / 8) + nn / 8] |= stored << (4 * (nn % 8));
        scales[static_cast<size_t>(grp) * n + nn] = u16_le(&pw.scales[(static_cast<size_t>(nn) * (k / g) + grp) * 2]);
      }
    std::vector<int32_t> qw(qweight.size()), qz(qzeros.size());
    std::memcpy(qw.data(), qweight.data(), qw.size() * 4);
    std::memcpy(qz.data(), qzeros.data(), qz.size() * 4);
    const PackedWeight im = kt::quant::import_gptq_int4(qw.data(), qz.data(), scales.data(), n, k, g, mode);
    CHECK(im.data == pw.data);
    CHECK(im.scales == pw.scales);
    CHECK(im.zeros == pw.zeros);
    std::vector<double> a(static_cast<size_t>(n) * k), b(a.size());
    kt::quant::dequantize(pw, a.data());
    kt::quant::dequantize(im, b.data());
    CHECK(a == b);
  }
  std::vector<int32_t> dummy(static_cast<size_t>(n) * k, 0);
  std::vector<uint16_t> s(static_cast<size_t>(n) * k, 0x3C00);
  CHECK_THAT(error_of([&] { kt::quant::import_gptq_int4(dummy.data(), dummy.data(), s.data(), n, k, 64); }),
             Catch::Contains("group must be 128"));
  CHECK_THAT(error_of([&] { kt::quant::import_gptq_int4(dummy.data(), dummy.data(), s.data(), 12, k, 128); }),
             Catch::Contains("multiple of 8"));
  CHECK_THAT(error_of([&] { kt::quant::import_gptq_int4(nullptr, dummy.data(), s.data(), n, k, 128); }),
             Catch::Contains("qweight is null"));
}

TEST_CASE("AWQ int4 import (interleaved column order) reproduces the packed weight", "[quant]") {
  const int n = 16, k = 256, g = 128;
  const std::vector<float> w = normal_weights(n, k, 78);
  const PackedWeight pw = kt::quant::quantize(Format::int4, w.data(), n, k);
  // AutoAWQ packing (WQLinear_GEMM.from_linear): for word column c, nibble i holds column 8c + order[i],
  // order = {0, 2, 4, 6, 1, 3, 5, 7}; qweight [k, n/8], qzeros [k/g, n/8] (exact z), scales [k/g, n].
  const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  std::vector<uint32_t> qweight(static_cast<size_t>(k) * (n / 8), 0), qzeros(static_cast<size_t>(k / g) * (n / 8), 0);
  std::vector<uint16_t> scales(static_cast<size_t>(k / g) * n);
  for (int kk = 0; kk < k; ++kk)
    for (int c = 0; c < n / 8; ++c)
      for (int i = 0; i < 8; ++i)
        qweight[static_cast<size_t>(kk) * (n / 8) + c] |= uint32_t(nib(pw, 8 * c + order[i], kk)) << (4 * i);
  for (int grp = 0; grp < k / g; ++grp)
    for (int c = 0; c < n / 8; ++c)
      for (int i = 0; i < 8; ++i) {
        const int nn = 8 * c + order[i];
        qzeros[static_cast<size_t>(grp) * (n / 8) + c] |= uint32_t(pw.zeros[static_cast<size_t>(nn) * (k / g) + grp])
                                                          << (4 * i);
      }
  for (int grp = 0; grp < k / g; ++grp)
    for (int nn = 0; nn < n; ++nn)
      scales[static_cast<size_t>(grp) * n + nn] = u16_le(&pw.scales[(static_cast<size_t>(nn) * (k / g) + grp) * 2]);
  std::vector<int32_t> qw(qweight.size()), qz(qzeros.size());
  std::memcpy(qw.data(), qweight.data(), qw.size() * 4);
  std::memcpy(qz.data(), qzeros.data(), qz.size() * 4);
  const PackedWeight im = kt::quant::import_awq_int4(qw.data(), qz.data(), scales.data(), n, k, g);
  CHECK(im.data == pw.data);
  CHECK(im.scales == pw.scales);
  CHECK(im.zeros == pw.zeros);
  // The interleaving matters: reading the words in plain order (as GPTQ packs along N) gives other data.
  const PackedWeight plain =
      kt::quant::import_gptq_int4(qw.data(), qz.data(), scales.data(), n, k, g, kt::quant::GptqZeros::v2_exact);
  CHECK(plain.data != pw.data);
  CHECK_THAT(error_of([&] { kt::quant::import_awq_int4(qw.data(), qz.data(), scales.data(), n, k, 64); }),
             Catch::Contains("group must be 128"));
  CHECK_THAT(error_of([&] { kt::quant::import_awq_int4(qw.data(), nullptr, scales.data(), n, k, g); }),
             Catch::Contains("qzeros is null"));
}

TEST_CASE("bitsandbytes NF4 import (high nibble first) reproduces the packed weight", "[quant]") {
  const int n = 8, k = 192;
  const std::vector<float> w = normal_weights(n, k, 99);
  const PackedWeight pw = kt::quant::quantize(Format::nf4, w.data(), n, k);
  // bnb: flattened row-major, element 2j in the high nibble of byte j; absmax per 64 flattened elements.
  std::vector<uint8_t> packed(static_cast<size_t>(n) * k / 2, 0);
  std::vector<float> absmax(static_cast<size_t>(n) * k / 64);
  for (size_t e = 0; e < static_cast<size_t>(n) * k; ++e) {
    const uint8_t q = nib(pw, static_cast<int>(e / k), static_cast<int>(e % k));
    packed[e / 2] |= (e % 2 == 0) ? static_cast<uint8_t>(q << 4) : q;
  }
  for (size_t b = 0; b < absmax.size(); ++b) absmax[b] = f32_le(&pw.scales[b * 4]);
  const PackedWeight im = kt::quant::import_bnb_nf4(packed.data(), absmax.data(), n, k);
  CHECK(im.data == pw.data);
  CHECK(im.scales == pw.scales);
  std::vector<double> a(static_cast<size_t>(n) * k), b(a.size());
  kt::quant::dequantize(pw, a.data());
  kt::quant::dequantize(im, b.data());
  CHECK(a == b);
  CHECK(im.data[0] != packed[0]);  // the orders really differ for this data
  CHECK_THROWS_AS(kt::quant::import_bnb_nf4(packed.data(), absmax.data(), n, 96), std::invalid_argument);
}

TEST_CASE("NF4 double quantization of absmax: bounded error, smaller storage", "[quant]") {
  const int n = 40, k = 1600;  // 1000 absmax values: 3 full blocks of 256 and a partial one
  const std::vector<float> w = normal_weights(n, k, 5);
  const PackedWeight pw = kt::quant::quantize(Format::nf4, w.data(), n, k);
  std::vector<float> absmax(pw.scales.size() / 4);
  for (size_t i = 0; i < absmax.size(); ++i) absmax[i] = f32_le(&pw.scales[i * 4]);
  REQUIRE(absmax.size() == 1000);
  const auto dq = kt::quant::double_quantize_absmax(absmax);
  REQUIRE(dq.q.size() == 1000);
  REQUIRE(dq.block_scale.size() == 4);
  double mean = 0;
  for (float a : absmax) mean += a;
  mean /= absmax.size();
  CHECK(std::fabs(dq.offset - mean) <= 1e-6 * mean);
  const std::vector<float> back = kt::quant::expand_absmax(dq);
  REQUIRE(back.size() == absmax.size());
  double max_rel = 0;
  for (size_t i = 0; i < absmax.size(); ++i) {
    const double bound = dq.block_scale[i / 256] / 2.0 + 1e-6 * absmax[i];
    CHECK(std::fabs(static_cast<double>(back[i]) - absmax[i]) <= bound);
    max_rel = std::max(max_rel, std::fabs(static_cast<double>(back[i]) - absmax[i]) / absmax[i]);
  }
  CHECK(max_rel < 0.02);
  const size_t stored = dq.q.size() + 4 * dq.block_scale.size() + 4;
  CHECK(stored < absmax.size() * 4 / 3);
  std::cout << "nf4 double quantization: absmax " << absmax.size() * 4 << " -> " << stored
            << " bytes, max relative error " << max_rel << std::endl;
  std::vector<float> bad = absmax;
  bad[7] = NAN;
  CHECK_THAT(error_of([&] { kt::quant::double_quantize_absmax(bad); }), Catch::Contains("absmax[7]"));
  auto broken = dq;
  broken.block_scale.pop_back();
  CHECK_THROWS_AS(kt::quant::expand_absmax(broken), std::invalid_argument);
}
