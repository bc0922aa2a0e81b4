// NVRTC compile checks of the attention_decode family (CPU only): a handful of variants across the axes compile for
// sm_80 and sm_90a (no spill beyond a stack word or two); the template rejects a config invalid_reason refuses.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <set>

#include "generator/arch.h"
#include "generator/compiler.h"
#include "generator/decode_family.h"

using namespace kt;
using namespace kt::decode;

namespace {
Problem decode_problem(DType dt, int d, KvLayout layout, int page_size = 64) {
  Problem p;
  p.dtype = dt;
  p.batch = 16;
  p.q_len = 1;
  p.num_heads = 28;
  p.num_kv_heads = 4;
  p.head_dim = d;
  p.kv_len = 4096;
  p.kv_layout = layout;
  p.page_size = layout == KvLayout::paged ? page_size : 0;
  return p;
}

/// Variants spanning every axis value (tile_m, tile_n, warps, stages, cluster) and both layouts, dtypes and head dims;
/// paged ones over pages of 16, 64 and 256 tokens in turn (the compiled page size picks the tile's load path).
std::vector<KernelSource> sample_sources(ArchId arch) {
  std::vector<KernelSource> out;
  std::set<std::string> seen;
  // The last two: a cluster merge (sm_90 only), alone and in clusters of chunks that merge through the workspace.
  const Config configs[] = {{16, 64, 4, 3, 0},   {16, 32, 2, 2, 256},  {32, 128, 8, 4, 512}, {16, 256, 4, 6, 0},
                            {64, 64, 4, 2, 128}, {32, 64, 2, 3, 1024}, {16, 64, 4, 3, 0, 4}, {16, 128, 8, 2, 512, 8}};
  for (DType dt : {DType::bf16, DType::f16})
    for (int d : {64, 128})
      for (KvLayout l : {KvLayout::contiguous, KvLayout::paged})
        for (size_t i = 0; i < std::size(configs); ++i) {
          const Config& c = configs[i];
          const Problem p = decode_problem(dt, d, l, 16 << (2 * (i % 3)));
          if (invalid_reason(p.dtype, d, l, c, arch) != nullptr) continue;
          auto s = kernel_source(p, c, arch);
          if (seen.insert(s.name_expression).second) out.push_back(s);
        }
  return out;
}
}  // namespace

TEST_CASE("attention_decode: sample variants compile for sm_80 and sm_90a without real spills", "[nvrtc]") {
  for (const char* arch_name : {"sm_80", "sm_90a"}) {
    const ArchId arch = parse_arch(arch_name);
    const auto sources = sample_sources(arch);
    REQUIRE(sources.size() >= 30);
    Compiler compiler(nullptr);
    const auto results = compiler.compile_all(sources);
    for (const auto& r : results) {
      INFO(r.kernel.variant_name << "\n" << r.error);
      REQUIRE(r.ok);
      CHECK(r.cubin.compare(0, 4,
                            "\x7f"
                            "ELF") == 0);
      CHECK(r.report.registers > 0);
      CHECK(r.report.registers <= 255);
      // ptxas keeps a word or two on the stack in a few variants far below the register cap; more is a spill.
      CHECK(r.report.spill_store_bytes <= 16);
      CHECK(r.report.lowered_name.find("attention_decode") != std::string::npos);
    }
    std::cout << "nvrtc: " << results.size() << " attention_decode variants compiled for " << arch_name << std::endl;
  }
}

TEST_CASE("attention_decode: the template rejects a config that invalid_reason refuses", "[nvrtc]") {
  const Problem p = decode_problem(DType::bf16, 128, KvLayout::paged);
  const Config bad{16, 32, 4, 3, 0};  // tile_n 32 < 16 * 4 warps
  REQUIRE(invalid_reason(p.dtype, p.head_dim, p.kv_layout, bad, parse_arch("sm_90a")) != nullptr);
  Compiler compiler(nullptr);
  const auto r = compiler.compile(kernel_source(p, bad, parse_arch("sm_90a")));
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.error, Catch::Contains("invalid attention_decode variant"));
  // A ring over the sm_86 limit (99 KB): valid on sm_90a, rejected when compiled for sm_86.
  const Config big{16, 128, 4, 3, 0};
  REQUIRE(smem_bytes(big, 128) > max_smem_per_block(86));
  CHECK(compiler.compile(kernel_source(p, big, parse_arch("sm_90a"))).ok);
  CHECK_FALSE(compiler.compile(kernel_source(p, big, parse_arch("sm_86"))).ok);
}

// Hidden ([.sass], outside the nvrtc ctest entry): scripts/check_sass.sh runs it with KT_SASS_DIR set and checks the
// cubins' SASS with scripts/sass_check.py. ptxas 13.0 miscompiled some tiles that span several pages (docs/perf-log.md,
// attention_decode; KvLoader::load_pieces keeps them out): every tile_m 16 shape of a tile larger than its page, at
// pages of 16, 32 and 64 tokens, for bf16 head_dim 128 and fp16 head_dim 64, the 128-row tiles of 32 and 64 rows
// that keep the L2 policy on their V copies (clusters of 2 at page 64), and every wgmma shape at every page size and
// over the contiguous cache.
TEST_CASE("attention_decode: tiles over several pages compile; cubins to $KT_SASS_DIR for scripts/check_sass.sh",
          "[.sass]") {
  const ArchId arch = parse_arch("sm_90a");
  std::vector<KernelSource> sources;
  for (auto [dt, d] : {std::pair{DType::bf16, 128}, std::pair{DType::f16, 64}})
    for (int page : {0, 16, 32, 64, 128, 256}) {  // 0: the contiguous cache
      const Problem p = decode_problem(dt, d, page ? KvLayout::paged : KvLayout::contiguous, page ? page : 64);
      for (const auto& c : config_space()) {
        const bool plain = c.kv_chunk == 0 && c.cluster == 1;
        const bool multi_page = page && c.tile_m == 16 && c.tile_n > page && page <= 64 && plain && !c.wgmma;
        const bool tall = page == 64 && c.tile_m > 16 && c.tile_n == 128 && c.warps == 8 && c.kv_chunk == 0 &&
                          c.cluster == 2 && c.stages <= 3 && !c.wgmma;
        if ((multi_page || tall || (c.wgmma && plain)) && invalid_reason(p.dtype, d, p.kv_layout, c, arch) == nullptr)
          sources.push_back(kernel_source(p, c, arch));
      }
    }
  REQUIRE(sources.size() >= 200);
  const char* dir = std::getenv("KT_SASS_DIR");
  Compiler compiler(nullptr);
  for (const auto& r : compiler.compile_all(sources)) {
    INFO(r.kernel.variant_name << "\n" << r.error);
    REQUIRE(r.ok);
    if (dir && *dir) {
      std::ofstream f(std::string(dir) + "/" + r.kernel.variant_name + ".cubin", std::ios::binary);
      f.write(r.cubin.data(), static_cast<std::streamsize>(r.cubin.size()));
      REQUIRE(f.good());
    }
  }
  std::cout << "sass guard: " << sources.size() << " attention_decode variants compiled"
            << (dir && *dir ? std::string(" into ") + dir : std::string()) << std::endl;
}
