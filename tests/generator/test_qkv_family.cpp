// qkv_proj family (CPU): problem rules and errors, pruning, naming, workspace sizing, JSON, parameter checks;
// [nvrtc]: every binary of one full class compiles, and the template rejects invalid configs itself.
#include <catch2/catch.hpp>

#include <set>

#include "generator/arch.h"
#include "generator/qkv_family.h"
#include "quant/quant.h"

using namespace kt;
using namespace kt::qkv;

namespace {
Problem qwen(quant::Format f = quant::Format::nf4, DType d = DType::bf16, int m = 16) {
  Problem p;
  p.format = f;
  p.dtype = d;
  p.m = m;
  return p;
}
}  // namespace

TEST_CASE("qkv_proj problems are refused with the rule they break", "[generator][qkv]") {
  CHECK_NOTHROW(check_problem(qwen()));
  Problem p = qwen(quant::Format::int4);
  p.k = 3584 + 64;  // a multiple of 64 but not of the int4 group of 128
  CHECK_THROWS_WITH(check_problem(p), Catch::Contains("not a multiple of the int4 block of 128"));
  p = qwen(quant::Format::nf4);
  p.k = 100;
  CHECK_THROWS_WITH(check_problem(p), Catch::Contains("multiple of 64"));
  p = qwen(quant::Format::fp16, DType::bf16);
  CHECK_THROWS_WITH(check_problem(p), Catch::Contains("fp16 weights need fp16 activations"));
  p = qwen();
  p.head_dim = 96;
  CHECK_THROWS_WITH(check_problem(p), Catch::Contains("head_dim 96"));
  p = qwen();
  p.num_kv_heads = 5;
  CHECK_THROWS_WITH(check_problem(p), Catch::Contains("multiple of num_kv_heads"));
  p = qwen();
  p.m = 0;
  CHECK_THROWS_WITH(check_problem(p), Catch::Contains("m (tokens)"));
}

TEST_CASE("qkv_proj space: pruning by M, validity, unique names", "[generator][qkv]") {
  const ArchId arch = parse_arch("sm_90a");
  for (int m : {1, 16, 37, 256, 4096}) {
    const Problem p = qwen(quant::Format::nf4, DType::bf16, m);
    const auto cs = valid_configs(p, arch);
    INFO("m " << m);
    REQUIRE(!cs.empty());
    std::set<std::string> names;
    for (const auto& c : cs) {
      CHECK(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, c, arch) == nullptr);
      CHECK(c.tile_n % p.head_dim == 0);  // RoPE needs whole heads
      if (m <= 16) CHECK(c.tile_m == 16);
      const auto d = launch_dims(p, c);
      if (c.split_k > 1) CHECK(d.grid_x * d.grid_y < 264);
      CHECK(names.insert(variant_name(p, c, arch)).second);
    }
    bool has_split = false;
    for (const auto& c : cs) has_split |= c.split_k > 1;
    CHECK(has_split == (m <= 256));
  }
  const Config c{16, 128, 64, 1, 4, 2, 8, 1};
  const Problem p = qwen();
  CHECK(variant_name(p, c, arch) == "qkv_proj__bf16_nf4_d128_bias_rope__m16_n128_k64_w1x4_s2_sk8_p1__sm_90a");
  CHECK(name_expression(p, c) == "kt::qkv::qkv_proj<kt::DType::bf16, 4, 128, true, true, 16, 128, 64, 1, 4, 2, 1>");
  CHECK(p.key() == "qkv_proj/bf16/nf4/m16/k3584/h28/kv4/d128/bias/rope");
  CHECK(p.n() == 4608);
  CHECK(workspace_bytes(p, c) == size_t(36) * 1 * 8 * 16 * 128 * 4);
  CHECK(counter_bytes(p, c) == 36 * 4);
  CHECK(workspace_bytes(p, Config{16, 128, 64, 1, 4, 2, 1, 1}) == 0);
  CHECK(problem_from_json(problem_to_json(p)).key() == p.key());
  CHECK(same_config(config_from_json(config_to_json(c)), c));
  // The weight bytes the roofline counts: 4-bit data + fp32 absmax per 64.
  CHECK(p.min_bytes() == Approx(4608.0 * 3584 / 2 + 4608.0 * 3584 / 64 * 4 + 2.0 * 16 * 3584 + 2.0 * 16 * 4608 + 2 * 4608));
  // RoPE with a tile narrower than a head is invalid, and says so.
  CHECK(std::string(invalid_reason(DType::bf16, quant::Format::nf4, 128, true, Config{16, 64, 64, 1, 4, 2, 1, 1}, arch))
            .find("RoPE") != std::string::npos);
}

TEST_CASE("qkv_proj kernel arguments are checked", "[generator][qkv]") {
  const Problem p = qwen(quant::Format::int4, DType::f16, 16);
  const Config c{16, 128, 64, 1, 4, 2, 4, 1};
  QkvParams a{};
  auto fake = [](std::uintptr_t v) { return reinterpret_cast<void*>(v); };
  a.x = fake(0x1000);
  a.w_data = fake(0x2000);
  a.w_scales = fake(0x3000);
  a.w_zeros = fake(0x4000);
  a.bias = fake(0x5000);
  a.positions = static_cast<const int*>(fake(0x6000));
  a.q = fake(0x7000);
  a.k = fake(0x8000);
  a.v = fake(0x9000);
  a.workspace = static_cast<float*>(fake(0xa000));
  a.counters = static_cast<unsigned*>(fake(0xb000));
  a.x_row_stride = 3584;
  a.q_row_stride = 28 * 128;
  a.k_row_stride = a.v_row_stride = 4 * 128;
  a.m = 16;
  a.k_dim = 3584;
  a.num_heads = 28;
  a.num_kv_heads = 4;
  a.tensor_scale = 1;
  CHECK_NOTHROW(check_params(p, c, a));
  auto b = a;
  b.x = fake(0x1002);
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("16-byte aligned"));
  b = a;
  b.w_zeros = nullptr;
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("w_zeros"));
  b = a;
  b.workspace = nullptr;
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("workspace"));
  b = a;
  b.positions = nullptr;
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("positions"));
  b = a;
  b.k_row_stride = 4 * 128 + 2;
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("multiples of 8"));
}

TEST_CASE("qkv_proj: every binary of one class compiles, invalid configs are rejected by the template", "[nvrtc][qkv]") {
  const ArchId arch = parse_arch("sm_90a");
  std::vector<KernelSource> src;
  std::set<std::string> seen;
  for (int m : {1, 64, 256, 4096}) {
    const Problem p = qwen(quant::Format::nvfp4, DType::bf16, m);
    for (const auto& c : valid_configs(p, arch))
      if (seen.insert(name_expression(p, c)).second) src.push_back(kernel_source(p, c, arch));
  }
  Compiler compiler(nullptr);
  const auto res = compiler.compile_all(src);
  for (const auto& r : res) {
    INFO(r.kernel.variant_name << "\n" << r.error);
    CHECK(r.ok);
    CHECK(r.report.spill_store_bytes == 0);
  }
  const auto bad = compiler.compile(kernel_source(qwen(), Config{16, 64, 64, 1, 4, 2, 1, 1}, arch));  // RoPE, tile_n 64
  CHECK_FALSE(bad.ok);
  CHECK_THAT(bad.error, Catch::Contains("invalid qkv_proj variant"));
}
