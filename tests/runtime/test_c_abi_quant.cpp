// [runtime] The C ABI's host-side quantization (kt_quantize_sizes, kt_quantize, kt_dequantize) without a GPU:
// sizes of every format, bytes identical to kt::quant::quantize, exact round trip identical to
// kt::quant::dequantize, and bad input rejected with KT_ERROR_INVALID_ARGUMENT and a message naming the problem.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kerntune/kerntune.h"
#include "quant/quant.h"

using kt::quant::Format;

namespace {

const Format kAllFormats[] = {Format::fp16,      Format::bf16,       Format::int8,      Format::int4,
                              Format::nf4,       Format::mxfp4,      Format::nvfp4,     Format::fp16_kb64,
                              Format::bf16_kb64, Format::int8_kb64,  Format::int4_kb128, Format::nf4_kb128,
                              Format::mxfp4_kb128, Format::nvfp4_kb128};

/// Random weights with a spread of magnitudes (and some exact zeros) so every scale path is exercised.
std::vector<float> random_weights(int n, int k, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.f, 0.05f);
  std::uniform_int_distribution<int> pick(0, 15);
  std::vector<float> w(static_cast<size_t>(n) * k);
  for (size_t i = 0; i < w.size(); ++i) {
    const int p = pick(gen);
    w[i] = p == 0 ? 0.f : p == 1 ? nd(gen) * 40.f : nd(gen);
  }
  return w;
}

struct CBuffers {
  std::vector<uint8_t> data, scales, zeros;
  float tensor_scale = -1.f;
};

/// Quantizes through the C ABI into buffers sized by kt_quantize_sizes (NULL for 0-byte buffers).
CBuffers c_quantize(Format f, const std::vector<float>& w, int n, int k) {
  size_t db = 0, sb = 0, zb = 0;
  const kt_status s1 = kt_quantize_sizes(int32_t(f), n, k, &db, &sb, &zb);
  INFO(kt_last_error());
  REQUIRE(s1 == KT_OK);
  CBuffers b;
  b.data.assign(db, 0xAB);
  b.scales.assign(sb, 0xAB);
  b.zeros.assign(zb, 0xAB);
  const kt_status s2 = kt_quantize(int32_t(f), w.data(), n, k, b.data.data(), sb ? b.scales.data() : nullptr,
                                   zb ? b.zeros.data() : nullptr, &b.tensor_scale);
  INFO(kt_last_error());
  REQUIRE(s2 == KT_OK);
  return b;
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

}  // namespace

TEST_CASE("C ABI kt_quantize_sizes: every format matches kt::quant::quantize's buffers", "[runtime]") {
  struct Shape {
    int n, k;
  };
  for (const Shape sh : {Shape{1, 128}, Shape{3, 256}, Shape{20, 384}}) {
    for (const Format f : kAllFormats) {
      INFO(kt::quant::format_name(f) << " n=" << sh.n << " k=" << sh.k);
      size_t db = 7, sb = 7, zb = 7;
      REQUIRE(kt_quantize_sizes(int32_t(f), sh.n, sh.k, &db, &sb, &zb) == KT_OK);
      const auto w = random_weights(sh.n, sh.k, 1);
      const kt::quant::PackedWeight pw = kt::quant::quantize(f, w.data(), sh.n, sh.k);
      CHECK(db == pw.data.size());
      CHECK(sb == pw.scales.size());
      CHECK(zb == pw.zeros.size());
      // The documented formulas.
      const size_t n = sh.n, k = sh.k;
      CHECK(db == n * k * kt::quant::format_bits(f) / 8);
      switch (kt::quant::format_element(f)) {
        case Format::fp16:
        case Format::bf16: CHECK(sb == 0); break;
        case Format::int8: CHECK(sb == n * 4); break;
        case Format::int4: CHECK(sb == n * (k / 128) * 2); break;
        case Format::nf4: CHECK(sb == n * (k / 64) * 4); break;
        case Format::mxfp4: CHECK(sb == n * (k / 32)); break;
        case Format::nvfp4: CHECK(sb == n * (k / 16)); break;
        default: FAIL("format_element returned a K-blocked format");
      }
      CHECK(zb == (kt::quant::format_element(f) == Format::int4 ? n * (k / 128) : 0));
    }
  }
  // Qwen2.5-7B fused QKV: n = (28 + 2 * 4) * 128 = 4608, k = 3584.
  size_t db = 0, sb = 0, zb = 0;
  REQUIRE(kt_quantize_sizes(KT_WEIGHT_INT4, 4608, 3584, &db, &sb, &zb) == KT_OK);
  CHECK(db == size_t(4608) * 3584 / 2);
  CHECK(sb == size_t(4608) * 28 * 2);
  CHECK(zb == size_t(4608) * 28);
}

TEST_CASE("C ABI kt_quantize: bytes equal kt::quant::quantize; kt_dequantize equals kt::quant::dequantize",
          "[runtime]") {
  const int n = 24, k = 256;
  const auto w = random_weights(n, k, 42);
  for (const Format f : kAllFormats) {
    INFO(kt::quant::format_name(f));
    const kt::quant::PackedWeight ref = kt::quant::quantize(f, w.data(), n, k);
    const CBuffers b = c_quantize(f, w, n, k);
    CHECK(b.data == ref.data);
    CHECK(b.scales == ref.scales);
    CHECK(b.zeros == ref.zeros);
    CHECK(b.tensor_scale == ref.tensor_scale);
    if (kt::quant::format_element(f) != Format::nvfp4) CHECK(b.tensor_scale == 1.f);

    std::vector<double> want(static_cast<size_t>(n) * k), got(want.size(), std::nan(""));
    kt::quant::dequantize(ref, want.data());
    const kt_status s = kt_dequantize(int32_t(f), n, k, b.data.data(), b.scales.empty() ? nullptr : b.scales.data(),
                                      b.zeros.empty() ? nullptr : b.zeros.data(), b.tensor_scale, got.data());
    INFO(kt_last_error());
    REQUIRE(s == KT_OK);
    // Exact (bitwise) equality, and the round trip is close to w.
    CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(double)) == 0);
    double err = 0, norm = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      err += (got[i] - w[i]) * (got[i] - w[i]);
      norm += double(w[i]) * w[i];
    }
    CHECK(std::sqrt(err / norm) < 0.2);  // 4-bit formats: about 0.1 on this data; fp16/bf16: < 0.01
    if (kt::quant::format_bits(f) == 16) CHECK(std::sqrt(err / norm) < 0.01);
  }
}

TEST_CASE("C ABI quantization: bad input -> KT_ERROR_INVALID_ARGUMENT naming the problem", "[runtime]") {
  const int n = 4, k = 128;
  const auto w = random_weights(n, k, 3);
  std::vector<uint8_t> data(4096), scales(4096), zeros(4096);
  std::vector<double> out(static_cast<size_t>(n) * k);
  float ts = 0;
  size_t db = 0, sb = 0, zb = 0;
  auto expect = [](kt_status s, const std::vector<std::string>& words) {
    CHECK(s == KT_ERROR_INVALID_ARGUMENT);
    const std::string msg = kt_last_error();
    INFO(msg);
    for (const auto& word : words) CHECK(contains(msg, word));
  };

  SECTION("n < 1") {
    expect(kt_quantize_sizes(KT_WEIGHT_INT8, 0, k, &db, &sb, &zb), {"kt_quantize_sizes", "n must be >= 1", "got 0"});
    expect(kt_quantize(KT_WEIGHT_INT8, w.data(), -3, k, data.data(), scales.data(), zeros.data(), &ts),
           {"kt_quantize", "n must be >= 1", "got -3"});
    expect(kt_dequantize(KT_WEIGHT_INT8, 0, k, data.data(), scales.data(), zeros.data(), 1.f, out.data()),
           {"kt_dequantize", "n must be >= 1"});
  }
  SECTION("k < 1 or not a multiple of 64 / of the group") {
    expect(kt_quantize_sizes(KT_WEIGHT_FP16, n, 0, &db, &sb, &zb), {"k must be >= 1"});
    expect(kt_quantize_sizes(KT_WEIGHT_FP16, n, 96, &db, &sb, &zb), {"k must be a multiple of 64", "got 96"});
    expect(kt_quantize_sizes(KT_WEIGHT_INT4, n, 64, &db, &sb, &zb), {"int4", "group size 128", "got 64"});
    expect(kt_quantize(KT_WEIGHT_INT4, w.data(), n, 192, data.data(), scales.data(), zeros.data(), &ts),
           {"kt_quantize", "group size 128", "got 192"});
    expect(kt_dequantize(KT_WEIGHT_INT4, n, 64, data.data(), scales.data(), zeros.data(), 1.f, out.data()),
           {"kt_dequantize", "group size 128"});
    // K-blocked packed formats tile K into 64-byte blocks: 4-bit k a multiple of 128.
    expect(kt_quantize_sizes(KT_WEIGHT_MXFP4_KB128, n, 64, &db, &sb, &zb), {"mxfp4_kb128", "multiple of 128", "got 64"});
  }
  SECTION("unknown format") {
    expect(kt_quantize_sizes(14, n, k, &db, &sb, &zb), {"unknown weight_format 14", "KT_WEIGHT_NVFP4_KB128 = 13"});
    expect(kt_quantize(-1, w.data(), n, k, data.data(), scales.data(), zeros.data(), &ts),
           {"kt_quantize", "unknown weight_format -1"});
    expect(kt_dequantize(99, n, k, data.data(), scales.data(), zeros.data(), 1.f, out.data()),
           {"kt_dequantize", "unknown weight_format 99"});
  }
  SECTION("NULL pointers") {
    expect(kt_quantize(KT_WEIGHT_NF4, nullptr, n, k, data.data(), scales.data(), zeros.data(), &ts),
           {"kt_quantize", "w is NULL"});
    expect(kt_quantize(KT_WEIGHT_NF4, w.data(), n, k, nullptr, scales.data(), nullptr, &ts), {"data is NULL"});
    expect(kt_quantize(KT_WEIGHT_NF4, w.data(), n, k, data.data(), nullptr, nullptr, &ts),
           {"scales is NULL", "nf4"});
    expect(kt_quantize(KT_WEIGHT_INT4, w.data(), n, k, data.data(), scales.data(), nullptr, &ts),
           {"zeros is NULL", "int4"});
    expect(kt_quantize(KT_WEIGHT_INT8, w.data(), n, k, data.data(), scales.data(), nullptr, nullptr),
           {"tensor_scale is NULL"});
    expect(kt_quantize_sizes(KT_WEIGHT_INT8, n, k, nullptr, &sb, &zb), {"data_bytes is NULL"});
    expect(kt_dequantize(KT_WEIGHT_INT8, n, k, data.data(), scales.data(), nullptr, 1.f, nullptr), {"out is NULL"});
    expect(kt_dequantize(KT_WEIGHT_MXFP4, n, k, data.data(), nullptr, nullptr, 1.f, out.data()),
           {"scales is NULL", "mxfp4"});
    // Formats without scales / zeros accept NULL for them.
    CHECK(kt_quantize(KT_WEIGHT_BF16, w.data(), n, k, data.data(), nullptr, nullptr, &ts) == KT_OK);
    CHECK(ts == 1.f);
    CHECK(kt_dequantize(KT_WEIGHT_BF16, n, k, data.data(), nullptr, nullptr, 1.f, out.data()) == KT_OK);
  }
  SECTION("non-finite weight") {
    auto bad = w;
    bad[static_cast<size_t>(2) * k + 5] = std::nanf("");
    expect(kt_quantize(KT_WEIGHT_INT8, bad.data(), n, k, data.data(), scales.data(), zeros.data(), &ts),
           {"kt_quantize", "w[2, 5] is not finite"});
  }
  SECTION("invalid packed weight given to kt_dequantize") {
    const CBuffers b = c_quantize(Format::int4, w, n, k);
    auto z = b.zeros;
    z[1] = 16;
    expect(kt_dequantize(KT_WEIGHT_INT4, n, k, b.data.data(), b.scales.data(), z.data(), 1.f, out.data()),
           {"kt_dequantize", "zeros[1] = 16"});
    expect(kt_dequantize(KT_WEIGHT_INT4, n, k, b.data.data(), b.scales.data(), b.zeros.data(), 2.f, out.data()),
           {"tensor_scale must be 1"});
    const CBuffers nv = c_quantize(Format::nvfp4, w, n, k);
    expect(kt_dequantize(KT_WEIGHT_NVFP4, n, k, nv.data.data(), nv.scales.data(), nullptr, 0.f, out.data()),
           {"tensor_scale must be finite and >= 2^-126"});
    auto sc = nv.scales;
    sc[0] = 0x7F;  // E4M3 NaN
    expect(kt_dequantize(KT_WEIGHT_NVFP4, n, k, nv.data.data(), sc.data(), nullptr, nv.tensor_scale, out.data()),
           {"scales entry 0 is NaN"});
  }
  SECTION("nothing is written on failure") {
    std::vector<uint8_t> d(64 * 4, 0x5A);
    float t = -7.f;
    CHECK(kt_quantize(KT_WEIGHT_INT8, nullptr, n, 64, d.data(), scales.data(), nullptr, &t) ==
          KT_ERROR_INVALID_ARGUMENT);
    CHECK(t == -7.f);
    CHECK(d[0] == 0x5A);
    size_t a = 11, b = 12, c = 13;
    CHECK(kt_quantize_sizes(KT_WEIGHT_INT8, n, 65, &a, &b, &c) == KT_ERROR_INVALID_ARGUMENT);
    CHECK((a == 11 && b == 12 && c == 13));
  }
}
