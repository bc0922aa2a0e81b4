// attention_prefill family: space enumeration and pruning, naming, validity, problem errors.
#include <catch2/catch.hpp>

#include <regex>
#include <set>
#include <tuple>

#include "generator/arch.h"
#include "generator/attention_family.h"
#include "generator/compiler.h"
#include "generator/embedded.h"
#include "generator/registry.h"

using namespace kt;
using namespace kt::attn;

namespace {
Problem qwen(DType dt = DType::bf16, bool causal = true) {
  Problem p;
  p.dtype = dt;
  p.batch = 1;
  p.seqlen_q = p.seqlen_k = 2048;
  p.num_heads = 28;
  p.num_kv_heads = 4;
  p.head_dim = 128;
  p.causal = causal;
  return p;
}
}  // namespace

TEST_CASE("config space is the Cartesian product of the declared axes", "[generator]") {
  const auto space = config_space();
  // mma.sync: tile_m x tile_n x warps x stages x raster; wgmma_ws: tile_n {64, 128, 176} x stages {2, 3, 4} x raster {0, 1}
  // x (warps 4: overlap {0, 1}; warps 8 and 12: overlap 0, overlap 1 with pingpong {0, 1}) x persistent {0, 1}; then
  // packed (overlap 1, persistent 0): warps 4, warps 8 and 12 with pingpong {0, 1}.
  CHECK(space.size() == 3 * 3 * 2 * 3 * 2 + 3 * 3 * 2 * (2 + 3 + 3) * 2 + 3 * 3 * 2 * (1 + 2 + 2));
  std::set<std::tuple<int, int, int, int, int, int, int, int, int, int>> seen;
  for (const auto& c : space) {
    seen.insert(
        {c.tile_m, c.tile_n, c.warps, c.stages, c.mainloop, c.raster, c.overlap, c.pingpong, c.persistent, c.pack_gqa});
    if (c.pack_gqa == 1) {
      CHECK(c.overlap == 1);
      CHECK(c.persistent == 0);
    }
  }
  CHECK(seen.size() == space.size());
}

TEST_CASE("pruning keeps exactly the configs invalid_reason accepts, and they respect the limits", "[generator]") {
  for (const char* arch_name : {"sm_80", "sm_86", "sm_90", "sm_90a"}) {
    const ArchId arch = parse_arch(arch_name);
    for (int d : {64, 128}) {
      Problem p = qwen();
      p.head_dim = d;
      const auto valid = valid_configs(p, arch);
      INFO(arch_name << " d" << d);
      CHECK(!valid.empty());
      size_t n_invalid = 0;
      for (const auto& c : config_space()) {
        const char* why = invalid_reason(p.dtype, d, p.causal, c, arch);
        if (why) {
          ++n_invalid;
          CHECK(std::string(why).size() > 10);
        }
      }
      CHECK(valid.size() + n_invalid == config_space().size());
      for (const auto& c : valid) {
        CHECK(c.tile_m % (16 * c.warps) == 0);
        CHECK(smem_bytes(c, d) <= max_smem_per_block(arch.sm));
        CHECK(accumulator_registers(c, d) <= 200);
      }
    }
  }
}

TEST_CASE("wgmma_ws: a persistent block stages O for its TMA store in a buffer of its own only where it fits",
          "[generator]") {
  const ArchId arch = parse_arch("sm_90a");
  for (int d : {64, 128}) {
    Problem p = qwen();
    p.head_dim = d;
    int staged = 0, unstaged_persistent = 0;
    for (const auto& c : valid_configs(p, arch)) {
      if (c.mainloop != kWgmmaWs) continue;
      INFO("d" << d << " tile_n " << c.tile_n << " stages " << c.stages << " warps " << c.warps << " persistent "
               << c.persistent);
      const int o = ws_o_stage_bytes(c, d);
      CHECK(smem_bytes(c, d) == qkv_smem_bytes(c, d) + 1024 + o);  // the launch requests what the kernel lays out
      CHECK(smem_bytes(c, d) <= max_smem_per_block(90));           // never makes a config invalid
      if (c.persistent == 0) {
        CHECK(o == 0);  // a one-tile block stages O in its Q tile
      } else if (o > 0) {
        CHECK(o == c.tile_m * d * 2);
        ++staged;
      } else {
        CHECK(qkv_smem_bytes(c, d) + 1024 + c.tile_m * d * 2 > max_smem_per_block(90));
        ++unstaged_persistent;
      }
    }
    CHECK(staged > 0);
    if (d == 128) CHECK(unstaged_persistent > 0);  // e.g. tile_n 176 with 2 stages: 212 KB before O
  }
  Config c{128, 128, 8, 2, kWgmmaWs, 1, 1, 1, 1};
  CHECK(ws_o_stage_bytes(c, 128) == 128 * 128 * 2);
  c.tile_n = 176;
  CHECK(ws_o_stage_bytes(c, 128) == 0);
}

TEST_CASE("a smaller shared-memory budget prunes a subset", "[generator]") {
  const Problem p = qwen();
  const auto on86 = valid_configs(p, parse_arch("sm_86"));
  const auto on90 = valid_configs(p, parse_arch("sm_90"));
  CHECK(on86.size() < on90.size());
  for (const auto& c : on86) CHECK(invalid_reason(p.dtype, p.head_dim, p.causal, c, parse_arch("sm_90")) == nullptr);
  // A config needing more than 99 KiB is invalid on sm_86 and names the rule.
  const Config big{128, 128, 8, 2, kMmaSync, 0};
  REQUIRE(smem_bytes(big, 128) > 99 * 1024);
  CHECK(std::string(invalid_reason(p.dtype, 128, true, big, parse_arch("sm_86"))).find("shared memory") !=
        std::string::npos);
}

TEST_CASE("problems no variant supports are refused naming the rule", "[generator]") {
  Problem p = qwen();
  p.head_dim = 96;
  CHECK_THROWS_WITH(check_problem(p), Catch::Contains("head_dim 96") && Catch::Contains("64 or 128"));
  CHECK(valid_configs(p, parse_arch("sm_90a")).empty());
  p = qwen();
  p.num_kv_heads = 5;
  CHECK_THROWS_WITH(check_problem(p), Catch::Contains("multiple of num_kv_heads"));
  p = qwen();
  p.seqlen_k = 0;
  CHECK_THROWS_WITH(check_problem(p), Catch::Contains("seqlen_k"));
  p = qwen();
  p.dtype = static_cast<DType>(7);
  CHECK_THROWS_WITH(check_problem(p), Catch::Contains("dtype"));
  CHECK_NOTHROW(check_problem(qwen()));
}

TEST_CASE("variant names are canonical, unique and spell every axis", "[generator]") {
  const ArchId arch = parse_arch("sm_90a");
  std::set<std::string> names;
  const std::regex form(
      R"(attention_prefill__(fp16|bf16)_d(64|128)_(causal|full)__(mmasync_m\d+_n\d+_w\d_s\d_r[01]|wgmmaws_m\d+_n\d+_w\d+_s\d_r[01]_o[01]_p[01]_pers[01](_gqa)?)__sm_90a)");
  for (DType dt : {DType::f16, DType::bf16})
    for (bool causal : {false, true})
      for (const auto& c : valid_configs(qwen(dt, causal), arch)) {
        const auto n = variant_name(qwen(dt, causal), c, arch);
        CHECK(std::regex_match(n, form));
        const std::string tail =
            "_r" + std::to_string(c.raster) +
            (c.mainloop == kWgmmaWs ? "_o" + std::to_string(c.overlap) + "_p" + std::to_string(c.pingpong) + "_pers" +
                                          std::to_string(c.persistent) + (c.pack_gqa == 1 ? "_gqa__" : "__")
                                    : "__");
        CHECK(n.find("_m" + std::to_string(c.tile_m) + "_n" + std::to_string(c.tile_n) + "_w" +
                     std::to_string(c.warps) + "_s" + std::to_string(c.stages) + tail) != std::string::npos);
        CHECK(names.insert(n).second);
      }
  CHECK(variant_name(qwen(), Config{128, 64, 4, 2, kMmaSync, 0}, arch) ==
        "attention_prefill__bf16_d128_causal__mmasync_m128_n64_w4_s2_r0__sm_90a");
  CHECK(name_expression(qwen(DType::f16, false), Config{64, 32, 4, 3, kMmaSync, 1}) ==
        "kt::attn::flash_fwd<kt::DType::f16, 128, false, 64, 32, 4, 3, 0, 1>");
  CHECK(variant_name(qwen(), Config{128, 128, 8, 2, kWgmmaWs, 1, 1, 1, 1}, arch) ==
        "attention_prefill__bf16_d128_causal__wgmmaws_m128_n128_w8_s2_r1_o1_p1_pers1__sm_90a");
  CHECK(name_expression(qwen(), Config{128, 128, 8, 2, kWgmmaWs, 0, 1, 0, 0}) ==
        "kt::attn::flash_fwd_ws<kt::DType::bf16, 128, true, 128, 2, 2, 0, true, false, false, false>");
  CHECK(variant_name(qwen(), Config{192, 64, 12, 2, kWgmmaWs, 0, 1, 1, 0, 1}, arch) ==
        "attention_prefill__bf16_d128_causal__wgmmaws_m192_n64_w12_s2_r0_o1_p1_pers0_gqa__sm_90a");
  CHECK(name_expression(qwen(), Config{192, 64, 12, 2, kWgmmaWs, 0, 1, 1, 0, 1}) ==
        "kt::attn::flash_fwd_ws<kt::DType::bf16, 128, true, 64, 3, 2, 0, true, true, false, true>");
  // A config stored before overlap and pingpong existed reads back with both 0.
  CHECK(same_config(config_from_json(nlohmann::json::parse(
                        R"({"tile_m":128,"tile_n":64,"warps":4,"stages":2,"mainloop":0,"raster":1})")),
                    Config{128, 64, 4, 2, kMmaSync, 1}));
  const Config ws{128, 128, 8, 3, kWgmmaWs, 0, 1, 1, 1};
  CHECK(same_config(config_from_json(config_to_json(ws)), ws));
  const Config packed{128, 128, 8, 3, kWgmmaWs, 0, 1, 1, 0, 1};
  CHECK(same_config(config_from_json(config_to_json(packed)), packed));
  CHECK_FALSE(same_config(packed, Config{128, 128, 8, 3, kWgmmaWs, 0, 1, 1, 0, 0}));
  // A wgmma_ws config stored before GQA packing existed reads back unpacked.
  CHECK(config_from_json(nlohmann::json::parse(
                             R"({"tile_m":128,"tile_n":128,"warps":8,"stages":2,"mainloop":1,"raster":1,"overlap":1,)"
                             R"("pingpong":1,"persistent":0})"))
            .pack_gqa == 0);
  // The GQA ratio and sequence lengths are run-time arguments: they do not change the variant.
  Problem other = qwen();
  other.num_heads = 32;
  other.num_kv_heads = 8;
  other.seqlen_q = 37;
  CHECK(variant_name(other, Config{128, 64, 4, 2, kMmaSync, 0}, arch) ==
        variant_name(qwen(), Config{128, 64, 4, 2, kMmaSync, 0}, arch));
  CHECK(qwen().key() == "attention_prefill/bf16/b1/sq2048/sk2048/h28/kv4/d128/causal");
}

TEST_CASE("launch dims, FLOPs and kernel arguments derive from the problem", "[generator]") {
  Problem p = qwen();
  p.seqlen_q = 1000;
  p.batch = 3;
  const auto d = launch_dims(p, Config{128, 64, 8, 2, kMmaSync, 0});
  CHECK(d.grid_x == 8);
  CHECK(d.grid_y == 28);
  CHECK(d.grid_z == 3);
  CHECK(d.block_x == 256);
  CHECK(d.smem_bytes == (128 * 128 + 2 * 2 * 64 * 128) * 2);
  const auto d1 = launch_dims(p, Config{128, 64, 8, 2, kMmaSync, 1});  // m-blocks slowest
  CHECK(d1.grid_x == 28);
  CHECK(d1.grid_y == 3);
  CHECK(d1.grid_z == 8);
  // Persistent: one block per SM at most (8 x 28 x 3 = 672 tiles), a producer warpgroup on top of the consumers.
  const Config pers{128, 128, 8, 2, kWgmmaWs, 1, 1, 1, 1};
  const auto dp = launch_dims(p, pers, 132);
  CHECK(dp.grid_x == 132);
  CHECK(dp.grid_y == 1);
  CHECK(dp.grid_z == 1);
  CHECK(dp.block_x == 384);
  CHECK(launch_dims(p, pers, 1000).grid_x == 672);
  CHECK_THROWS_AS(launch_dims(p, pers), ProblemError);
  // Three consumer warpgroups: 192 query rows, 512 threads with the producer.
  CHECK(launch_dims(p, Config{192, 64, 12, 2, kWgmmaWs, 0, 1, 1, 0}).grid_x == 6);  // ceil(1000 / 192)
  CHECK(launch_dims(p, Config{192, 64, 12, 2, kWgmmaWs, 0, 1, 1, 0}).block_x == 512);
  // GQA packing (group 7): 64 / 7 = 9 positions per 64-row box, 18 per 128-row tile: ceil(1000 / 18) = 56 m-blocks
  // of the 4 KV heads.
  const Config packed{128, 128, 8, 2, kWgmmaWs, 0, 1, 1, 0, 1};
  CHECK(tile_positions(packed, 7) == 18);
  Config packed_r1 = packed;
  packed_r1.raster = 1;
  auto grid = [&](const Config& c) {
    const auto g = launch_dims(p, c);
    return std::make_tuple(g.grid_x, g.grid_y, g.grid_z);
  };
  CHECK(grid(packed) == std::make_tuple(56u, 4u, 3u));
  CHECK(grid(packed_r1) == std::make_tuple(4u, 3u, 56u));
  Problem mha = p;
  mha.num_kv_heads = 28;
  CHECK_THROWS_WITH(launch_dims(mha, packed), Catch::Contains("pack_gqa needs 2 to 64 query heads per KV head"));
  p.batch = 1;
  // causal, Sq == Sk: S (S + 1) / 2 visible pairs; non-causal: S^2.
  Problem s = qwen();
  s.seqlen_q = s.seqlen_k = 100;
  CHECK(s.flops() == Approx(4.0 * 28 * 128 * 100 * 101 / 2));
  s.causal = false;
  CHECK(s.flops() == Approx(4.0 * 28 * 128 * 100 * 100));
  // causal with Sq > Sk: the first Sq - Sk rows see nothing.
  s.causal = true;
  s.seqlen_q = 10;
  s.seqlen_k = 4;
  CHECK(s.flops() == Approx(4.0 * 28 * 128 * (1 + 2 + 3 + 4)));
  const auto a = contiguous_params(p, reinterpret_cast<void*>(256), reinterpret_cast<void*>(512),
                                   reinterpret_cast<void*>(768), reinterpret_cast<void*>(1024), nullptr);
  CHECK(a.q_row_stride == 28 * 128);
  CHECK(a.k_row_stride == 4 * 128);
  CHECK(a.q_batch_stride == 28 * 128 * 1000);
  CHECK(a.batch == 1);
  CHECK(a.softmax_scale == Approx(1.0 / std::sqrt(128.0)));
  CHECK(a.scale_log2 == Approx(a.softmax_scale * 1.4426950408889634));
  CHECK_NOTHROW(check_params(p, a));
  auto bad = a;
  bad.q = reinterpret_cast<void*>(258);
  CHECK_THROWS_WITH(check_params(p, bad), Catch::Contains("16-byte aligned"));
  bad = a;
  bad.k_row_stride = 4 * 128 + 4;
  CHECK_THROWS_WITH(check_params(p, bad), Catch::Contains("multiple of 8 elements"));
  bad = a;
  bad.seqlen_k = 7;
  CHECK_THROWS_WITH(check_params(p, bad), Catch::Contains("do not match"));
}

TEST_CASE("arch names parse, print and decide where a cubin runs", "[generator]") {
  CHECK(parse_arch("sm_90a").sm == 90);
  CHECK(parse_arch("sm_90a").arch_specific);
  CHECK_FALSE(parse_arch("sm_90").arch_specific);
  CHECK(arch_name(parse_arch("sm_86")) == "sm_86");
  CHECK_THROWS_WITH(parse_arch("sm_91"), Catch::Contains("unknown --arch 'sm_91'") && Catch::Contains("sm_90a"));
  CHECK(arch_runs_on(parse_arch("sm_90a"), 9, 0));
  CHECK_FALSE(arch_runs_on(parse_arch("sm_90a"), 10, 0));
  CHECK(arch_runs_on(parse_arch("sm_80"), 8, 6));
  CHECK_FALSE(arch_runs_on(parse_arch("sm_86"), 8, 0));
  CHECK_FALSE(arch_runs_on(parse_arch("sm_80"), 9, 0));
}

TEST_CASE("ptxas resource report is parsed", "[generator]") {
  const std::string log =
      "ptxas info    : Compiling entry function '_Z1k' for 'sm_90a'\n"
      "ptxas         .     56 bytes stack frame, 76 bytes spill stores, 72 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 1024 bytes smem, 56 bytes cumulative stack size\n";
  const auto r = parse_ptxas_log(log);
  CHECK(r.registers == 255);
  CHECK(r.stack_bytes == 56);
  CHECK(r.spill_store_bytes == 76);
  CHECK(r.spill_load_bytes == 72);
  CHECK(r.static_smem_bytes == 1024);
  CHECK(parse_ptxas_log("no report").registers == -1);
}

TEST_CASE("device headers are embedded and the registry names the family", "[generator]") {
  std::set<std::string> names;
  for (const auto& f : embedded_headers()) {
    names.insert(f.name);
    CHECK(f.size > 0);
  }
  for (const char* want :
       {"attention/flash_fwd.cuh", "attention/attention_config.h", "common/ptx.cuh", "common/kt_types.h"})
    CHECK(names.count(want) == 1);
  CHECK(embedded_headers_hash().size() == 32);
  CHECK(find_family("attention_prefill").name() == "attention_prefill");
  CHECK_THROWS_WITH(find_family("gemm"),
                    Catch::Contains("unknown family 'gemm'") && Catch::Contains("attention_prefill"));
}

TEST_CASE("the candidate order leads with FlashAttention-3's tiles on sm_90a and FlashAttention-2's elsewhere",
          "[generator]") {
  for (DType dt : {DType::f16, DType::bf16})
    for (bool causal : {false, true}) {
      const auto on90a = valid_configs(qwen(dt, causal), parse_arch("sm_90a"));
      REQUIRE(on90a.size() > 16);
      // (tile_n, stages, raster, pingpong, persistent) of the first 16
      std::set<std::tuple<int, int, int, int, int>> lead;
      for (size_t i = 0; i < 16; ++i) {
        const Config& c = on90a[i];
        CHECK(c.mainloop == kWgmmaWs);
        CHECK(c.tile_m == 128);
        CHECK(c.warps == 8);
        CHECK(c.overlap == 1);
        if (causal) {  // 128 keys, ring depth 2 and 3
          CHECK(c.tile_n == 128);
          CHECK((c.stages == 2 || c.stages == 3));
        } else {  // 176 keys (only a 2-slot ring fits at head_dim 128), then 128 keys
          CHECK(c.tile_n == (i < 8 ? 176 : 128));
          CHECK(c.stages == 2);
        }
        lead.insert({c.tile_n, c.stages, c.raster, c.pingpong, c.persistent});
      }
      CHECK(lead.size() == 16);  // every block order x pingpong x persistence of two (tile_n, ring depth) pairs, once
      // Every wgmma_ws config comes before every mma.sync one.
      bool seen_mma = false;
      for (const auto& c : on90a) {
        if (c.mainloop == kMmaSync) seen_mma = true;
        else CHECK_FALSE(seen_mma);
      }
      const auto on80 = valid_configs(qwen(dt, causal), parse_arch("sm_80"));
      REQUIRE_FALSE(on80.empty());
      CHECK(same_config(on80[0], Config{128, 64, 4, 2, kMmaSync, 0}));
    }
}

TEST_CASE("wgmma_ws: three consumer warpgroups and GQA packing follow their rules", "[generator]") {
  const ArchId arch = parse_arch("sm_90a");
  // Three consumers: 160 registers each, so head_dim 128 takes tile_n 64 only, head_dim 64 up to 128.
  for (int d : {64, 128})
    for (int tile_n : {64, 128, 176}) {
      const Config c{192, tile_n, 12, 2, kWgmmaWs, 0, 1, 1, 0};
      const char* why = invalid_reason(DType::bf16, d, true, c, arch);
      INFO("d" << d << " tile_n " << tile_n);
      CHECK((why == nullptr) == (d / 2 + 3 * tile_n / 4 <= 128));
      if (why) CHECK_THAT(why, Catch::Contains("three consumer warpgroups"));
    }
  CHECK_THAT(invalid_reason(DType::bf16, 128, true, Config{64, 64, 4, 2, kWgmmaWs, 0, 1, 1, 0}, arch),
             Catch::Contains("pingpong needs two or three consumer warpgroups"));
  CHECK_THAT(invalid_reason(DType::bf16, 128, true, Config{128, 64, 8, 2, kWgmmaWs, 0, 1, 1, 1, 1}, arch),
             Catch::Contains("pack_gqa needs persistent 0"));
  CHECK_THAT(invalid_reason(DType::bf16, 128, true, Config{128, 64, 4, 2, kMmaSync, 0, 0, 0, 0, 1}, arch),
             Catch::Contains("pack_gqa must be 0 for the mma.sync mainloop"));
  // Packing needs 2 to 64 query heads per KV head: none for MHA or a group of 80, packed variants otherwise; the
  // family's unusable() (the runtime's check of a stored winner) says the same.
  const Config packed{128, 128, 8, 2, kWgmmaWs, 0, 1, 1, 0, 1};
  CHECK(pack_gqa_reason(28, 4, packed) == nullptr);
  CHECK(pack_gqa_reason(64, 1, packed) == nullptr);
  CHECK_THAT(pack_gqa_reason(28, 28, packed), Catch::Contains("2 to 64 query heads per KV head"));
  CHECK_THAT(pack_gqa_reason(80, 1, packed), Catch::Contains("2 to 64 query heads per KV head"));
  CHECK(pack_gqa_reason(28, 28, Config{128, 128, 8, 2, kWgmmaWs, 0, 1, 1, 0, 0}) == nullptr);
  const Family& fam = family_type();
  Problem mha = qwen();
  mha.num_kv_heads = 28;
  CHECK_THAT(fam.unusable(problem_to_json(mha), config_to_json(packed), arch), Catch::Contains("pack_gqa"));
  CHECK(fam.unusable(problem_to_json(qwen()), config_to_json(packed), arch) == nullptr);
  auto count_packed = [&](const Problem& p) {
    int n = 0;
    for (const auto& c : valid_configs(p, arch)) n += c.pack_gqa;
    return n;
  };
  CHECK(count_packed(mha) == 0);
  // One position per packed box (group 64, tile_m 64): 70000 m-blocks, over raster 1's 65535 grid z; raster 0 runs.
  Problem wide = qwen();
  wide.num_heads = 64;
  wide.num_kv_heads = 1;
  wide.seqlen_q = wide.seqlen_k = 70000;
  const Config one_pos{64, 64, 4, 2, kWgmmaWs, 1, 1, 0, 0, 1};
  CHECK_THAT(problem_reason(wide, one_pos), Catch::Contains("raster 1 takes at most 65535 m-blocks"));
  CHECK_THROWS_WITH(launch_dims(wide, one_pos), Catch::Contains("65535 m-blocks"));
  Config one_pos_r0 = one_pos;
  one_pos_r0.raster = 0;
  CHECK(problem_reason(wide, one_pos_r0) == nullptr);
  CHECK(launch_dims(wide, one_pos_r0).grid_x == 70000u);
  for (const auto& c : valid_configs(wide, arch)) CHECK(problem_reason(wide, c) == nullptr);
  CHECK(count_packed(qwen()) > 20);
  // Candidate order: packed variants after the unpacked ones at S 2048, first for a short problem.
  const auto long_order = valid_configs(qwen(), arch);
  CHECK(long_order.front().pack_gqa == 0);
  Problem shortp = qwen();
  shortp.seqlen_q = 16;
  const auto short_order = valid_configs(shortp, arch);
  REQUIRE(short_order.size() == long_order.size());
  for (size_t i = 0; i < short_order.size(); ++i) {
    INFO(i);
    CHECK(short_order[i].pack_gqa == (i < size_t(count_packed(shortp)) ? 1 : 0));
  }
  CHECK(short_order.front().warps == 4);  // one consumer first for a short problem
  // The default for a short problem: one consumer, packed where the group allows.
  const Config short_default = default_config(arch, shortp);
  CHECK(same_config(short_default, Config{64, 128, 4, 2, kWgmmaWs, 0, 1, 0, 0, 1}));
  Problem short_mha = shortp;
  short_mha.num_kv_heads = 28;
  CHECK(same_config(default_config(arch, short_mha), Config{64, 128, 4, 2, kWgmmaWs, 0, 1, 0, 0, 0}));
  CHECK(same_config(default_config(arch, qwen()), Config{128, 128, 8, 2, kWgmmaWs, 1, 1, 1, 0, 0}));
  // Three consumers rank after two and one.
  bool seen_three = false;
  for (const auto& c : long_order) {
    if (c.pack_gqa == 1 || c.mainloop != kWgmmaWs) break;
    if (c.warps == 12) seen_three = true;
    else CHECK_FALSE(seen_three);
  }
  CHECK(seen_three);
}
