// include/kerntune/kerntune.hpp, the C++ layer over the C ABI (standard library only), without a GPU: the version,
// host quantization round trips through it, and every failure arrives as kerntune::Error with the C status.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kerntune/kerntune.hpp"
#include "tests/support.h"

TEST_CASE("kerntune.hpp: version, quantize / dequantize round trip, errors as kerntune::Error", "[runtime][capi]") {
  CHECK(kerntune::version() == KT_VERSION);
  const int n = 32, k = 256;
  std::vector<float> w(size_t(n) * k);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (auto& x : w) x = normal(rng);
  for (int fmt : {KT_WEIGHT_INT8, KT_WEIGHT_INT4, KT_WEIGHT_NF4_KB128, KT_WEIGHT_NVFP4}) {
    INFO("format " << fmt);
    const kerntune::QuantizedWeight q = kerntune::quantize(fmt, w, n, k);
    CHECK(!q.data.empty());
    const std::vector<double> back = kerntune::dequantize(fmt, q, n, k);
    REQUIRE(back.size() == w.size());
    double err = 0, ref = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      err += (back[i] - w[i]) * (back[i] - w[i]);
      ref += double(w[i]) * w[i];
    }
    CHECK(std::sqrt(err / ref) < (fmt == KT_WEIGHT_INT8 ? 0.01 : 0.15));
    CHECK(std::sqrt(err / ref) > 0);  // quantized, not copied
  }
  // Errors carry the C status and the message of kt_last_error().
  try {
    kerntune::quantize(KT_WEIGHT_NF4_KB128, w, n, 100);
    FAIL("k = 100 was accepted");
  } catch (const kerntune::Error& e) {
    CHECK(e.status() == KT_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(e.what(), Catch::StartsWith("KT_ERROR_INVALID_ARGUMENT: ") && Catch::Contains("multiple of 64"));
  }
  CHECK_THROWS_AS(kerntune::quantize(KT_WEIGHT_INT8, std::vector<float>(10), n, k), kerntune::Error);
  kt_test::TempDir t;
  try {
    kerntune::Runtime rt((t.path / "missing.db").string());
    FAIL("a missing database was accepted");
  } catch (const kerntune::Error& e) {
    CHECK(e.status() == KT_ERROR_DATABASE);
    CHECK_THAT(e.what(), Catch::Contains("missing.db"));
  }
}
