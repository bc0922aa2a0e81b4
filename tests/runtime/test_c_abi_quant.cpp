// [runtime] The C ABI's host-side quantization (kt_quantize_sizes, kt_quantize, kt_dequantize) without a GPU:
// sizes of every format, bytes identical to kt::quant::quantize, exact round trip identical to
// kt::quant::dequantize, and bad input rejected with KT_ERROR_INVALID_ARGUMENT and a message naming the problem.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kerntune/kerntune.h"
#include "quant/quant.h"

using kt::quant::Format;

namespace {

const Format kAllFormats[] = {Format::fp16,        Format::bf16,       Format::int8,       Format::int4,
                              Format::nf4,         Format::mxfp4,      Format::nvfp4,      Format::fp16_kb64,
                              Format::bf16_kb64,   Format::int8_kb64,  Format::int4_kb128, Format::nf4_kb128,
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
  const kt_status s2 =
      kt_quantize(int32_t(f), w.data(), w.size() * sizeof(float), n, k, b.data.data(), db,
                  sb ? b.scales.data() : nullptr, sb, zb ? b.zeros.data() : nullptr, zb, &b.tensor_scale);
  INFO(kt_last_error());
  REQUIRE(s2 == KT_OK);
  return b;
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

/// kt_dequantize of CBuffers-like vectors with their exact lengths (NULL for an empty one) into out.
kt_status c_dequantize(Format f, int n, int k, const std::vector<uint8_t>& data, const std::vector<uint8_t>& scales,
                       const std::vector<uint8_t>& zeros, float tensor_scale, std::vector<double>& out) {
  return kt_dequantize(int32_t(f), n, k, data.empty() ? nullptr : data.data(), data.size(),
                       scales.empty() ? nullptr : scales.data(), scales.size(), zeros.empty() ? nullptr : zeros.data(),
                       zeros.size(), tensor_scale, out.data(), out.size() * sizeof(double));
}

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
    const kt_status s = c_dequantize(f, n, k, b.data, b.scales, b.zeros, b.tensor_scale, got);
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
  const size_t wb = w.size() * sizeof(float);
  std::vector<uint8_t> data(4096), scales(4096), zeros(4096);
  std::vector<double> out(static_cast<size_t>(n) * k);
  const size_t ob = out.size() * sizeof(double);
  float ts = 0;
  size_t db = 0, sb = 0, zb = 0;
  auto expect = [](kt_status s, const std::vector<std::string>& words) {
    CHECK(s == KT_ERROR_INVALID_ARGUMENT);
    const std::string msg = kt_last_error();
    INFO(msg);
    for (const auto& word : words) CHECK(contains(msg, word));
  };
  // The exact sizes of format f at (n, k).
  auto sizes = [&](int32_t f) {
    size_t d = 0, s = 0, z = 0;
    REQUIRE(kt_quantize_sizes(f, n, k, &d, &s, &z) == KT_OK);
    return std::vector<size_t>{d, s, z};
  };

  SECTION("n < 1") {
    expect(kt_quantize_sizes(KT_WEIGHT_INT8, 0, k, &db, &sb, &zb), {"kt_quantize_sizes", "n must be >= 1", "got 0"});
    expect(kt_quantize(KT_WEIGHT_INT8, w.data(), wb, -3, k, data.data(), 512, scales.data(), 16, nullptr, 0, &ts),
           {"kt_quantize", "n must be >= 1", "got -3"});
    expect(kt_dequantize(KT_WEIGHT_INT8, 0, k, data.data(), 512, scales.data(), 16, nullptr, 0, 1.f, out.data(), ob),
           {"kt_dequantize", "n must be >= 1"});
  }
  SECTION("k < 1 or not a multiple of 64 / of the group") {
    expect(kt_quantize_sizes(KT_WEIGHT_FP16, n, 0, &db, &sb, &zb), {"k must be >= 1"});
    expect(kt_quantize_sizes(KT_WEIGHT_FP16, n, 96, &db, &sb, &zb), {"k must be a multiple of 64", "got 96"});
    expect(kt_quantize_sizes(KT_WEIGHT_INT4, n, 64, &db, &sb, &zb), {"int4", "group size 128", "got 64"});
    expect(kt_quantize(KT_WEIGHT_INT4, w.data(), wb, n, 192, data.data(), 384, scales.data(), 8, zeros.data(), 4, &ts),
           {"kt_quantize", "group size 128", "got 192"});
    expect(
        kt_dequantize(KT_WEIGHT_INT4, n, 64, data.data(), 128, scales.data(), 8, zeros.data(), 4, 1.f, out.data(), ob),
        {"kt_dequantize", "group size 128"});
    // K-blocked packed formats tile K into 64-byte blocks: 4-bit k a multiple of 128.
    expect(kt_quantize_sizes(KT_WEIGHT_MXFP4_KB128, n, 64, &db, &sb, &zb),
           {"mxfp4_kb128", "multiple of 128", "got 64"});
  }
  SECTION("unknown format") {
    expect(kt_quantize_sizes(14, n, k, &db, &sb, &zb), {"unknown weight_format 14", "KT_WEIGHT_NVFP4_KB128 = 13"});
    expect(kt_quantize(-1, w.data(), wb, n, k, data.data(), 512, scales.data(), 16, nullptr, 0, &ts),
           {"kt_quantize", "unknown weight_format -1"});
    expect(kt_dequantize(99, n, k, data.data(), 512, scales.data(), 16, nullptr, 0, 1.f, out.data(), ob),
           {"kt_dequantize", "unknown weight_format 99"});
  }
  SECTION("NULL pointers") {
    const auto nf4 = sizes(KT_WEIGHT_NF4), i4 = sizes(KT_WEIGHT_INT4), i8 = sizes(KT_WEIGHT_INT8),
               mx = sizes(KT_WEIGHT_MXFP4);
    expect(kt_quantize(KT_WEIGHT_NF4, nullptr, wb, n, k, data.data(), nf4[0], scales.data(), nf4[1], nullptr, 0, &ts),
           {"kt_quantize", "w is NULL"});
    expect(kt_quantize(KT_WEIGHT_NF4, w.data(), wb, n, k, nullptr, nf4[0], scales.data(), nf4[1], nullptr, 0, &ts),
           {"data is NULL"});
    expect(kt_quantize(KT_WEIGHT_NF4, w.data(), wb, n, k, data.data(), nf4[0], nullptr, nf4[1], nullptr, 0, &ts),
           {"scales is NULL", "nf4"});
    expect(
        kt_quantize(KT_WEIGHT_INT4, w.data(), wb, n, k, data.data(), i4[0], scales.data(), i4[1], nullptr, i4[2], &ts),
        {"zeros is NULL", "int4"});
    expect(
        kt_quantize(KT_WEIGHT_INT8, w.data(), wb, n, k, data.data(), i8[0], scales.data(), i8[1], nullptr, 0, nullptr),
        {"tensor_scale is NULL"});
    expect(kt_quantize_sizes(KT_WEIGHT_INT8, n, k, nullptr, &sb, &zb), {"data_bytes is NULL"});
    expect(kt_dequantize(KT_WEIGHT_INT8, n, k, data.data(), i8[0], scales.data(), i8[1], nullptr, 0, 1.f, nullptr, ob),
           {"out is NULL"});
    expect(kt_dequantize(KT_WEIGHT_MXFP4, n, k, data.data(), mx[0], nullptr, mx[1], nullptr, 0, 1.f, out.data(), ob),
           {"scales is NULL", "mxfp4"});
    // Formats without scales / zeros take NULL with length 0 for them.
    const size_t b16 = sizes(KT_WEIGHT_BF16)[0];
    CHECK(kt_quantize(KT_WEIGHT_BF16, w.data(), wb, n, k, data.data(), b16, nullptr, 0, nullptr, 0, &ts) == KT_OK);
    CHECK(ts == 1.f);
    CHECK(kt_dequantize(KT_WEIGHT_BF16, n, k, data.data(), b16, nullptr, 0, nullptr, 0, 1.f, out.data(), ob) == KT_OK);
  }
  SECTION("byte lengths must equal kt_quantize_sizes' (never read or written past a buffer)") {
    const CBuffers b = c_quantize(Format::int4, w, n, k);
    const auto sz = sizes(KT_WEIGHT_INT4);
    REQUIRE((b.data.size() == sz[0] && b.scales.size() == sz[1] && b.zeros.size() == sz[2]));
    // kt_dequantize: short, long and missing lengths, each named.
    expect(kt_dequantize(KT_WEIGHT_INT4, n, k, b.data.data(), 10, b.scales.data(), sz[1], b.zeros.data(), sz[2], 1.f,
                         out.data(), ob),
           {"kt_dequantize", "data_bytes is 10", "int4 n=4 k=128", "exactly 256"});
    expect(kt_dequantize(KT_WEIGHT_INT4, n, k, b.data.data(), sz[0] + 1000, b.scales.data(), sz[1], b.zeros.data(),
                         sz[2], 1.f, out.data(), ob),
           {"data_bytes is 1256", "exactly 256"});
    expect(kt_dequantize(KT_WEIGHT_INT4, n, k, b.data.data(), sz[0], b.scales.data(), 2, b.zeros.data(), sz[2], 1.f,
                         out.data(), ob),
           {"scales_bytes is 2", "exactly 8 bytes of scales"});
    expect(kt_dequantize(KT_WEIGHT_INT4, n, k, b.data.data(), sz[0], b.scales.data(), sz[1], b.zeros.data(), 0, 1.f,
                         out.data(), ob),
           {"zeros_bytes is 0", "exactly 4 bytes of zero points"});
    expect(kt_dequantize(KT_WEIGHT_INT4, n, k, b.data.data(), sz[0], b.scales.data(), sz[1], b.zeros.data(), sz[2], 1.f,
                         out.data(), ob - 8),
           {"out_bytes is 4088", "exactly 4096 bytes of float64"});
    // A format without scales given a scales length, and a format without zeros given a zeros length.
    const auto f16 = sizes(KT_WEIGHT_FP16);
    expect(kt_dequantize(KT_WEIGHT_FP16, n, k, data.data(), f16[0], scales.data(), 8, nullptr, 0, 1.f, out.data(), ob),
           {"scales_bytes is 8", "fp16 n=4 k=128 has no scales"});
    expect(kt_dequantize(KT_WEIGHT_NF4, n, k, data.data(), sizes(KT_WEIGHT_NF4)[0], scales.data(),
                         sizes(KT_WEIGHT_NF4)[1], zeros.data(), 4, 1.f, out.data(), ob),
           {"zeros_bytes is 4", "has no zero points"});
    // n * k far larger than the buffer (issue 36: 1 MiB of process memory decoded from a 1 KiB buffer): refused.
    expect(kt_dequantize(KT_WEIGHT_FP16, 4096, 128, data.data(), 1024, nullptr, 0, nullptr, 0, 1.f, out.data(), ob),
           {"data_bytes is 1024", "fp16 n=4096 k=128", "exactly 1048576"});
    // kt_quantize: w of doubles (twice the bytes), short outputs.
    std::vector<double> wd(w.begin(), w.end());
    expect(kt_quantize(KT_WEIGHT_FP16, reinterpret_cast<const float*>(wd.data()), wd.size() * sizeof(double), n, k,
                       data.data(), f16[0], nullptr, 0, nullptr, 0, &ts),
           {"kt_quantize", "w_bytes is 4096", "exactly 2048 bytes of float32"});
    expect(kt_quantize(KT_WEIGHT_FP16, w.data(), 16, 1024, 1024, data.data(), 4096, nullptr, 0, nullptr, 0, &ts),
           {"w_bytes is 16", "exactly 4194304"});
    expect(kt_quantize(KT_WEIGHT_INT4, w.data(), wb, n, k, data.data(), sz[0] - 1, scales.data(), sz[1], zeros.data(),
                       sz[2], &ts),
           {"data_bytes is 255", "exactly 256 bytes of data"});
    expect(kt_quantize(KT_WEIGHT_INT4, w.data(), wb, n, k, data.data(), sz[0], scales.data(), sz[1], zeros.data(),
                       sz[2] + 1, &ts),
           {"zeros_bytes is 5", "exactly 4"});
    // n * k * 8 overflows size_t arithmetic nowhere: the largest shape still gets a clear length error.
    expect(kt_dequantize(KT_WEIGHT_INT8, 2147483647, 2147483584, data.data(), 1, scales.data(), 1, nullptr, 0, 1.f,
                         out.data(), ob),
           {"data_bytes is 1"});
  }
  SECTION("non-finite weight") {
    auto bad = w;
    bad[static_cast<size_t>(2) * k + 5] = std::nanf("");
    const auto i8 = sizes(KT_WEIGHT_INT8);
    expect(kt_quantize(KT_WEIGHT_INT8, bad.data(), wb, n, k, data.data(), i8[0], scales.data(), i8[1], nullptr, 0, &ts),
           {"kt_quantize", "w[2, 5] is not finite"});
  }
  SECTION("invalid packed weight given to kt_dequantize") {
    const CBuffers b = c_quantize(Format::int4, w, n, k);
    auto z = b.zeros;
    z[1] = 16;
    expect(c_dequantize(Format::int4, n, k, b.data, b.scales, z, 1.f, out), {"kt_dequantize", "zeros[1] = 16"});
    expect(c_dequantize(Format::int4, n, k, b.data, b.scales, b.zeros, 2.f, out), {"tensor_scale must be 1"});
    const CBuffers nv = c_quantize(Format::nvfp4, w, n, k);
    expect(c_dequantize(Format::nvfp4, n, k, nv.data, nv.scales, nv.zeros, 0.f, out),
           {"tensor_scale must be finite and >= 2^-126"});
    auto sc = nv.scales;
    sc[0] = 0x7F;  // E4M3 NaN
    expect(c_dequantize(Format::nvfp4, n, k, nv.data, sc, nv.zeros, nv.tensor_scale, out), {"scales entry 0 is NaN"});
  }
  SECTION("nothing is written on failure") {
    std::vector<uint8_t> d(64 * 4, 0x5A);
    float t = -7.f;
    CHECK(kt_quantize(KT_WEIGHT_INT8, nullptr, 64 * 4 * 4, n, 64, d.data(), d.size(), scales.data(), 16, nullptr, 0,
                      &t) == KT_ERROR_INVALID_ARGUMENT);
    CHECK(t == -7.f);
    CHECK(d[0] == 0x5A);
    CHECK(kt_quantize(KT_WEIGHT_INT8, w.data(), 64 * 4 * 4, n, 64, d.data(), d.size() - 1, scales.data(), 16, nullptr,
                      0, &t) == KT_ERROR_INVALID_ARGUMENT);
    CHECK(t == -7.f);
    CHECK(d[0] == 0x5A);
    size_t a = 11, b = 12, c = 13;
    CHECK(kt_quantize_sizes(KT_WEIGHT_INT8, n, 65, &a, &b, &c) == KT_ERROR_INVALID_ARGUMENT);
    CHECK((a == 11 && b == 12 && c == 13));
  }
}

TEST_CASE("C ABI kt_dequantize refuses what quantize never writes; quantize's output always passes (issue 36)",
          "[runtime]") {
  const int n = 2, k = 64;
  std::vector<double> out(static_cast<size_t>(n) * k, -1.0);
  auto error = [](kt_status s) {
    CHECK(s == KT_ERROR_INVALID_ARGUMENT);
    return std::string(kt_last_error());
  };
  SECTION("NaN and infinity in fp16 / bf16 data, row-major and K-blocked") {
    struct Case {
      Format f;
      uint16_t bits;
      const char* what;
    };
    for (const Case c : {Case{Format::fp16, 0x7E00, "NaN"}, Case{Format::fp16, 0xFC00, "infinite"},
                         Case{Format::bf16, 0x7FC0, "NaN"}, Case{Format::bf16, 0x7F80, "infinite"},
                         Case{Format::fp16_kb64, 0x7C01, "NaN"}, Case{Format::bf16_kb64, 0xFF80, "infinite"}}) {
      INFO(kt::quant::format_name(c.f) << " " << c.bits);
      std::fill(out.begin(), out.end(), -1.0);
      std::vector<float> w(static_cast<size_t>(n) * k, 0.25f);
      const CBuffers b = c_quantize(c.f, w, n, k);
      // Element (1, 5): row-major byte offset (1 * 64 + 5) * 2; K-blocked ((5 / 64) * n + 1) * 64 + 5 -> the same here.
      auto d = b.data;
      d[(64 + 5) * 2] = static_cast<uint8_t>(c.bits & 0xFF);
      d[(64 + 5) * 2 + 1] = static_cast<uint8_t>(c.bits >> 8);
      const std::string msg = error(c_dequantize(c.f, n, k, d, b.scales, b.zeros, 1.f, out));
      INFO(msg);
      CHECK(contains(msg, "data element w[1, 5]"));
      CHECK(contains(msg, std::string("is ") + c.what));
      CHECK(out[0] == -1.0);  // nothing written
      // The largest finite values pass.
      d[(64 + 5) * 2] = kt::quant::format_element(c.f) == Format::fp16 ? 0xFF : 0x7F;
      d[(64 + 5) * 2 + 1] = kt::quant::format_element(c.f) == Format::fp16 ? 0x7B : 0x7F;
      CHECK(c_dequantize(c.f, n, k, d, b.scales, b.zeros, 1.f, out) == KT_OK);
    }
  }
  SECTION("a negative int8 or nf4 (absmax) scale") {
    for (const Format f : {Format::int8, Format::nf4, Format::int8_kb64, Format::nf4_kb128}) {
      INFO(kt::quant::format_name(f));
      const int kk = f == Format::nf4_kb128 ? 128 : k;
      std::vector<float> ww(static_cast<size_t>(n) * kk, 0.5f);
      const CBuffers b = c_quantize(f, ww, n, kk);
      std::vector<double> o(static_cast<size_t>(n) * kk);
      auto sc = b.scales;
      const float neg = -1.f;
      std::memcpy(&sc[4], &neg, 4);  // entry 1
      const std::string msg = error(kt_dequantize(int32_t(f), n, kk, b.data.data(), b.data.size(), sc.data(), sc.size(),
                                                  nullptr, 0, 1.f, o.data(), o.size() * sizeof(double)));
      INFO(msg);
      CHECK(contains(msg, "scales entry 1 is negative (-1)"));
      CHECK(contains(msg, "absmax"));
    }
  }
  SECTION("nvfp4: tiny and zero weights give a tensor scale kt_dequantize accepts (never a subnormal)") {
    for (const float v : {1e-40f, 1e-38f, 1e-36f, 3e-35f, 1e-30f, 0.f}) {
      INFO("w = " << v);
      for (const Format f : {Format::nvfp4, Format::nvfp4_kb128}) {
        const int kk = f == Format::nvfp4_kb128 ? 128 : k;
        std::vector<float> ww(static_cast<size_t>(n) * kk, v);
        const CBuffers b = c_quantize(f, ww, n, kk);
        CHECK(std::isnormal(b.tensor_scale));
        CHECK(b.tensor_scale >= std::numeric_limits<float>::min());
        if (v == 0.f) CHECK(b.tensor_scale == 1.f);
        std::vector<double> o(static_cast<size_t>(n) * kk);
        INFO(kt_last_error());
        REQUIRE(c_dequantize(f, n, kk, b.data, b.scales, b.zeros, b.tensor_scale, o) == KT_OK);
        // Each value is on nvfp4's grid: within half an E2M1 step of its block scale, or 0 for a block below it.
        for (const double x : o) CHECK(std::fabs(x - v) <= 0.25 * v + 1e-45);
      }
    }
    // Below 2688 * 2^-126 the tensor scale is exactly 2^-126; above, absmax / 2688.
    std::vector<float> tiny(static_cast<size_t>(n) * k, 1e-40f);
    CHECK(c_quantize(Format::nvfp4, tiny, n, k).tensor_scale == std::numeric_limits<float>::min());
    std::vector<float> big(static_cast<size_t>(n) * k, 2688.f * 0.5f);
    CHECK(c_quantize(Format::nvfp4, big, n, k).tensor_scale == 0.5f);
    // A subnormal tensor scale given to kt_dequantize is refused by name.
    const CBuffers b = c_quantize(Format::nvfp4, tiny, n, k);
    const std::string msg = error(
        c_dequantize(Format::nvfp4, n, k, b.data, b.scales, b.zeros, std::numeric_limits<float>::denorm_min(), out));
    CHECK(contains(msg, "tensor_scale must be finite and >= 2^-126"));
  }
}
