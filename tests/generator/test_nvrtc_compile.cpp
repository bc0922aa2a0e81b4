// NVRTC compile checks (CPU only): a pairwise-covering sample of the valid bf16 variants of the qwen7b attention
// problems (and the fp16 leaders) compiles for sm_90a, the wgmma_ws ones without spills or serialized wgmma; the
// template rejects invalid configs itself; the cubin cache hits on a second pass.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <set>

#include "generator/arch.h"
#include "generator/attention_family.h"
#include "generator/compiler.h"
#include "tests/generator/pairwise_sample.h"
#include "tests/support.h"
#include "tuner/attention_problems.h"
#include "tuner/shapes_file.h"

using namespace kt;

namespace {

using kt_test::TempDir;

/// The flash_fwd_ws checks of a compiled variant: no spills, and no wgmma that ptxas serialized (C7515, "Potential
/// Performance Loss": it could not prove the accumulators untouched while a wgmma is in flight, so the overlap
/// schedule would silently become a sequential one).
void check_ws_build(const CompileResult& r) {
  INFO(r.kernel.variant_name << "\n" << r.report.log);
  CHECK(r.report.spill_store_bytes == 0);
  CHECK(r.report.log.find("serialized") == std::string::npos);
}
}  // namespace

TEST_CASE("a pairwise sample of the valid variants of the qwen7b attention problems compiles for sm_90a", "[nvrtc]") {
  const auto shapes = load_shapes(std::string(KT_SOURCE_DIR) + "/shapes/qwen7b.json");
  const ArchId arch = parse_arch("sm_90a");
  std::vector<KernelSource> bf16, fp16;
  std::set<std::string> seen;
  // bf16: the pairwise-covering sample of every valid variant (every pair of template-argument values compiled at
  // least once); fp16 (the same code but for the MMA's input type): the first 16 of the candidate order, what the
  // fast strategy measures. The [gpu] edge-case test compiles and runs every variant of both dtypes.
  for (const auto& p : attention_prefill_problems(shapes)) {
    const auto configs = attn::valid_configs(p, arch);
    const size_t n = p.dtype == DType::bf16 ? configs.size() : std::min<size_t>(16, configs.size());
    for (size_t i = 0; i < n; ++i) {
      auto s = attn::kernel_source(p, configs[i], arch);
      if (seen.insert(s.variant_name).second) (p.dtype == DType::bf16 ? bf16 : fp16).push_back(s);
    }
  }
  REQUIRE(fp16.size() >= 16);
  REQUIRE(bf16.size() >= 400);  // bf16 x causal / full x the pruned space
  std::vector<KernelSource> sources = kt_test::pairwise_sample(bf16);
  REQUIRE(sources.size() >= 60);
  sources.insert(sources.end(), fp16.begin(), fp16.end());
  TempDir dir;
  CubinCache cache(dir.path.string());
  Compiler compiler(&cache);
  const auto results = compiler.compile_all(sources);
  int spilling = 0, ws = 0;
  for (const auto& r : results) {
    INFO(r.kernel.variant_name << "\n" << r.error);
    REQUIRE(r.ok);
    CHECK_FALSE(r.cache_hit);
    CHECK(r.cubin.size() > 1000);
    CHECK(r.cubin.compare(0, 4,
                          "\x7f"
                          "ELF") == 0);
    CHECK(r.report.registers > 0);
    CHECK(r.report.registers <= 255);
    CHECK(r.report.lowered_name.find("flash_fwd") != std::string::npos);
    spilling += r.report.spill_store_bytes > 0;
    if (r.report.lowered_name.find("flash_fwd_ws") != std::string::npos) {
      check_ws_build(r);
      ++ws;
    }
  }
  CHECK(ws >= 60);  // the wgmma_ws variants of both causal modes in the sample
  std::cout << "nvrtc: " << results.size() << " attention_prefill variants compiled for sm_90a (" << ws
            << " wgmma_ws), " << spilling << " spill registers" << std::endl;
  // Second pass: all from the cache, identical bytes.
  const auto again = compiler.compile_all(sources);
  for (size_t i = 0; i < again.size(); ++i) {
    CHECK(again[i].cache_hit);
    CHECK(again[i].cubin == results[i].cubin);
    CHECK(again[i].report.registers == results[i].report.registers);
  }
}

TEST_CASE("the template itself rejects a config that invalid_reason refuses", "[nvrtc]") {
  attn::Problem p;
  p.head_dim = 128;
  const attn::Config bad{48, 64, 4, 2, attn::kMmaSync, 0};  // tile_m not a multiple of 16 * warps
  REQUIRE(attn::invalid_reason(p.dtype, p.head_dim, p.causal, bad, parse_arch("sm_90a")) != nullptr);
  Compiler compiler(nullptr);
  const auto r = compiler.compile(attn::kernel_source(p, bad, parse_arch("sm_90a")));
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.error, Catch::Contains("invalid attention_prefill variant"));
  // Shared memory over the sm_86 limit: valid on sm_90a, rejected when compiled for sm_86.
  const attn::Config big{128, 128, 8, 2, attn::kMmaSync, 1};
  CHECK(compiler.compile(attn::kernel_source(p, big, parse_arch("sm_90a"))).ok);
  CHECK_FALSE(compiler.compile(attn::kernel_source(p, big, parse_arch("sm_86"))).ok);
}

TEST_CASE("cache keys separate arch, options and source", "[nvrtc]") {
  attn::Problem p;
  const attn::Config c{64, 64, 4, 2, attn::kMmaSync, 0};
  Compiler compiler(nullptr);
  const auto a = attn::kernel_source(p, c, parse_arch("sm_90a"));
  auto b = attn::kernel_source(p, c, parse_arch("sm_90"));
  CHECK(compiler.cache_key(a) != compiler.cache_key(b));
  b = a;
  b.source += "// changed\n";
  CHECK(compiler.cache_key(a) != compiler.cache_key(b));
  CHECK(compiler.cache_key(a) == compiler.cache_key(attn::kernel_source(p, c, parse_arch("sm_90a"))));
  CHECK(compiler.options(parse_arch("sm_90a"))[0] == "--gpu-architecture=sm_90a");
}

TEST_CASE(
    "flash_fwd_ws (Hopper mainloop): a pairwise sample of the wgmma_ws configs compiles for sm_90a without spills or "
    "serialized wgmma",
    "[nvrtc][attention]") {
  const ArchId arch = parse_arch("sm_90a");
  std::vector<KernelSource> sources;
  // The pairwise sample of the wgmma_ws configs of fp16, head_dim 64, non-causal: with the bf16 head_dim 128 variants
  // of both causal modes (the qwen7b test above, which checks them the same way) both dtypes, both head_dims and both
  // causal modes (the CI sweep compiles one of every kernel class of the rest).
  attn::Problem p;
  p.dtype = DType::f16;
  p.head_dim = 64;
  p.causal = false;
  for (const auto& c : attn::valid_configs(p, arch))
    if (c.mainloop == attn::kWgmmaWs) sources.push_back(attn::kernel_source(p, c, arch));
  REQUIRE(sources.size() >= 40);
  sources = kt_test::pairwise_sample(sources);
  Compiler compiler(nullptr);
  const auto results = compiler.compile_all(sources);
  for (const auto& r : results) {
    INFO(r.kernel.variant_name << "\n" << r.error);
    REQUIRE(r.ok);
    check_ws_build(r);
  }
}

TEST_CASE("pairwise_sample covers every pair of template-argument values of its input", "[generator]") {
  CHECK(kt_test::template_args("ns::f<A, g<B, C>, 3>") == std::vector<std::string>{"ns::f", "A", "g<B,C>", "3"});
  CHECK(kt_test::template_args("plain") == std::vector<std::string>{"plain"});
  // Three binary arguments, all 8 combinations: 4 of them already hold every pair of values.
  std::vector<KernelSource> all;
  for (int i = 0; i < 8; ++i) {
    KernelSource k;
    k.name_expression =
        "f<" + std::to_string(i & 1) + ", " + std::to_string(i >> 1 & 1) + ", " + std::to_string(i >> 2 & 1) + ">";
    all.push_back(k);
  }
  const auto sample = kt_test::pairwise_sample(all);
  CHECK(sample.size() < all.size());
  for (int a = 0; a < 3; ++a)
    for (int b = a + 1; b < 3; ++b)
      for (int va = 0; va < 2; ++va)
        for (int vb = 0; vb < 2; ++vb)
          CHECK(std::any_of(sample.begin(), sample.end(), [&](const KernelSource& k) {
            const auto t = kt_test::template_args(k.name_expression);
            return t[1 + a] == std::to_string(va) && t[1 + b] == std::to_string(vb);
          }));
  // A second template is covered on its own: one more source with the same arguments is taken.
  KernelSource other;
  other.name_expression = "g<0, 0, 0>";
  all.push_back(other);
  CHECK(kt_test::pairwise_sample(all).size() == sample.size() + 1);
}
