// autotune --shard i/N (tuner/work_items.h shard_work, tuner/cli_checks.h parse_shard): the shards of a plan are
// disjoint and together hold every (problem, candidate) pair exactly once, whatever the plan's order; each shard
// compiles only the binaries its pairs use; and merging the shards' databases gives the winners of one database
// holding the same measurements.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "cache/tuning_db.h"
#include "generator/arch.h"
#include "tests/support.h"
#include "tests/winner_db.h"
#include "tuner/cli_checks.h"
#include "tuner/shapes_file.h"
#include "tuner/work_items.h"

using namespace kt;

namespace {

using Pair = std::tuple<std::string, std::string, std::string>;  // family, problem key, variant

/// Every family of shapes/qwen7b.json for sm_90a on the arch's reference GPU, at most `max_candidates` per problem.
WorkPlan qwen_plan(int max_candidates, bool depth_siblings = false) {
  const ShapesFile s = load_shapes(std::string(KT_SOURCE_DIR) + "/shapes/qwen7b.json");
  std::vector<std::string> families;
  const ArchId arch = parse_arch("sm_90a");
  WorkOptions o;
  o.max_candidates = max_candidates;
  o.depth_siblings = depth_siblings;
  return build_work(collect_problems(s, families), arch, device_model(arch), o);
}

std::set<Pair> pairs_of(const WorkPlan& plan) {
  std::set<Pair> out;
  for (const auto& it : plan.items)
    for (const auto& v : it.variants) out.insert({it.family, it.key, v});
  return out;
}

/// (family, problem key, variant) -> the name expression of the binary the plan compiles for it.
std::map<Pair, std::string> binaries_of(const WorkPlan& plan) {
  std::map<Pair, std::string> out;
  for (const auto& it : plan.items)
    for (size_t c = 0; c < it.variants.size(); ++c)
      out[{it.family, it.key, it.variants[c]}] = plan.sources.at(it.source[c]).name_expression;
  return out;
}

}  // namespace

TEST_CASE("shards of a plan are disjoint, cover it exactly once and compile only their binaries", "[tuner][shard]") {
  const WorkPlan plan = qwen_plan(0);
  const std::set<Pair> all = pairs_of(plan);
  const auto all_bins = binaries_of(plan);
  REQUIRE(all.size() > 5000);  // every family of the file, every valid config
  for (int n : {1, 2, 7}) {
    INFO(n << " shards");
    std::set<Pair> seen;
    size_t total = 0;
    for (int i = 0; i < n; ++i) {
      const WorkPlan sh = shard_work(plan, i, n);
      const std::set<Pair> mine = pairs_of(sh);
      for (const auto& p : mine) {
        CHECK(shard_of(std::get<0>(p), std::get<1>(p), std::get<2>(p), n) == i);
        CHECK(seen.insert(p).second);  // in no earlier shard
      }
      total += mine.size();
      // Roughly even (a hash of the pair): every shard within 15% of its share.
      CHECK(double(mine.size()) == Approx(double(all.size()) / n).epsilon(0.15));
      // Each kept pair compiles the binary it compiles in the whole plan, and no binary is unused.
      std::vector<bool> used(sh.sources.size(), false);
      for (const auto& it : sh.items) {
        REQUIRE(it.variants.size() == it.configs.size());
        REQUIRE(it.variants.size() == it.source.size());
        CHECK(!it.variants.empty());
        for (size_t c = 0; c < it.variants.size(); ++c) {
          used.at(it.source[c]) = true;
          CHECK(sh.sources.at(it.source[c]).name_expression == all_bins.at({it.family, it.key, it.variants[c]}));
        }
      }
      CHECK(std::count(used.begin(), used.end(), false) == 0);
    }
    CHECK(total == all.size());
    CHECK(seen == all);
  }
  // The assignment depends on the pair, not on the plan's order: a reversed plan gives the same shards.
  WorkPlan reversed = plan;
  std::reverse(reversed.items.begin(), reversed.items.end());
  for (int i = 0; i < 3; ++i) CHECK(pairs_of(shard_work(reversed, i, 3)) == pairs_of(shard_work(plan, i, 3)));
  CHECK_THROWS_AS(shard_work(plan, 3, 3), std::invalid_argument);
  CHECK_THROWS_AS(shard_work(plan, -1, 3), std::invalid_argument);
  CHECK_THROWS_AS(shard_work(plan, 0, 0), std::invalid_argument);
}

TEST_CASE("--shard accepts i/N with 0 <= i < N and refuses the rest, naming the option", "[tuner][shard][cli]") {
  int i = -1, n = -1;
  cli::parse_shard("0/1", i, n);
  CHECK((i == 0 && n == 1));
  cli::parse_shard("3/4", i, n);
  CHECK((i == 3 && n == 4));
  for (const char* bad : {"4/4", "-1/4", "1", "a/b", "1/0", "/4", "1/", "1/2/3", " 1/2", "1/9999999"}) {
    INFO(bad);
    try {
      cli::parse_shard(bad, i, n);
      FAIL("accepted");
    } catch (const cli::CliError& e) {
      CHECK_THAT(e.what(), Catch::Contains("--shard '" + std::string(bad) + "'"));
    }
  }
  // The CLI refuses before any work and says how many pairs a shard holds.
  kt_test::TempDir t;
  auto [rc, out] = kt_test::run_autotune("--arch sm_90a --compile-only --shard 4/4 --shapes " +
                                         std::string(KT_SOURCE_DIR) + "/shapes/qwen7b.json");
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains("--shard '4/4'"));
  std::tie(rc, out) = kt_test::run_autotune(
      "--arch sm_90a --compile-only --families attention_prefill --max-candidates 3 --shard 1/2 --no-cache --shapes " +
      std::string(KT_SOURCE_DIR) + "/shapes/qwen7b.json --db " + (t.path / "s.db").string());
  INFO(out);
  CHECK(rc == 0);
  // 14 named prefill problems and 2 of the bucket grid (S 4096, bf16 and fp16), 3 candidates each.
  CHECK_THAT(out, Catch::Contains("--shard 1/2: ") && Catch::Contains("of 48 (problem, candidate) pairs"));
}

TEST_CASE("merging the shards' databases gives the winners of one database with the same measurements",
          "[tuner][shard]") {
  const WorkPlan plan = qwen_plan(6);
  db::DeviceRecord d;
  d.name = "GPU X";
  d.uuid = "GPU-x";
  d.cc_major = 9;
  d.sm_count = 132;
  // A made-up median per pair (a hash of it), the same in the whole and in the sharded databases.
  auto median = [](const std::string& key, const std::string& variant) {
    return 10.0 + double(shard_of("t", key, variant, 1000003)) / 1e4;
  };
  auto fill = [&](kt_test::WinnerDb& wdb, const WorkPlan& p) {
    for (const auto& it : p.items)
      for (size_t c = 0; c < it.variants.size(); ++c) {
        db::BinaryRecord b;
        b.hash = "hash-" + it.variants[c];
        b.family = it.family;
        b.variant_name = it.variants[c];
        b.name_expression = p.sources.at(it.source[c]).name_expression;
        b.lowered_name = "lowered";
        b.arch = "sm_90a";
        b.cubin = "not a cubin";
        wdb.put_binary(b);
        wdb.add(it.family, it.key, it.problem.dump(), it.variants[c], it.configs[c].dump(), b.hash,
                median(it.key, it.variants[c]));
      }
  };
  kt_test::TempDir t;
  const std::string whole = (t.path / "whole.db").string(), merged = (t.path / "merged.db").string();
  {
    kt_test::WinnerDb wdb(whole, d, "whole");
    fill(wdb, plan);
    wdb.finish("GPU X", "attention_prefill");
  }
  std::vector<std::string> shards;
  for (int i = 0; i < 3; ++i) {
    shards.push_back((t.path / ("shard" + std::to_string(i) + ".db")).string());
    kt_test::WinnerDb wdb(shards.back(), d, "shard " + std::to_string(i) + "/3");
    fill(wdb, shard_work(plan, i, 3));
    wdb.finish("GPU X", "attention_prefill");
  }
  const auto [rc, out] = kt_test::run_autotune("merge " + merged + " " + shards[0] + " " + shards[1] + " " + shards[2]);
  INFO(out);
  REQUIRE(rc == 0);
  std::map<std::string, std::pair<std::string, double>> a, b;
  for (const auto& w : db::TuningDb(whole, true).winners()) a[w.problem_key] = {w.variant_name, w.median_us};
  for (const auto& w : db::TuningDb(merged, true).winners()) b[w.problem_key] = {w.variant_name, w.median_us};
  CHECK(a.size() == plan.items.size());
  CHECK(a == b);
  // Merging again changes nothing (idempotent).
  const auto again = kt_test::run_autotune("merge " + merged + " " + shards[0] + " " + shards[1] + " " + shards[2]);
  CHECK(again.first == 0);
  CHECK(db::TuningDb(merged, true).count("measurements") == db::TuningDb(whole, true).count("measurements"));
}

TEST_CASE("depth_siblings: the same config but for one leaf named stages", "[tuner]") {
  using J = nlohmann::json;
  CHECK(depth_siblings(J{{"tile_n", 64}, {"stages", 2}}, J{{"tile_n", 64}, {"stages", 3}}));
  CHECK(depth_siblings(J{{"mainloop", 3}, {"wgmma_ws", {{"stages", 4}, {"split_k", 3}}}},
                       J{{"mainloop", 3}, {"wgmma_ws", {{"stages", 8}, {"split_k", 3}}}}));
  CHECK_FALSE(depth_siblings(J{{"tile_n", 64}, {"stages", 2}}, J{{"tile_n", 64}, {"stages", 2}}));   // the same
  CHECK_FALSE(depth_siblings(J{{"tile_n", 64}, {"stages", 2}}, J{{"tile_n", 128}, {"stages", 2}}));  // not depth
  CHECK_FALSE(depth_siblings(J{{"tile_n", 64}, {"stages", 2}}, J{{"tile_n", 128}, {"stages", 3}}));  // two leaves
  CHECK_FALSE(depth_siblings(J{{"tile_n", 64}, {"stages", 2}}, J{{"tile_n", 64}, {"stages", 3}, {"x", 1}}));
  CHECK_FALSE(depth_siblings(J{{"wgmma_ws", {{"stages", 4}}}}, J{{"wgmma_pairs", {{"stages", 8}}}}));
  CHECK_FALSE(depth_siblings(J(3), J(4)));
}

TEST_CASE("a --max-candidates prefix keeps each candidate's cut-off pipeline-depth siblings for the refinement",
          "[tuner]") {
  const WorkPlan fast = qwen_plan(16, true), all = qwen_plan(0, true);
  const auto all_bins = binaries_of(all);
  // Without the option (a compile-only run): no siblings, and only the listed candidates' binaries.
  const WorkPlan plain = qwen_plan(16);
  for (const auto& it : plain.items)
    for (const auto& sib : it.siblings) CHECK(sib.empty());
  CHECK(plain.sources.size() < fast.sources.size());
  std::map<std::string, const WorkItem*> full;
  for (const auto& it : all.items) full[it.family + "|" + it.key] = &it;
  size_t with_siblings = 0, total = 0;
  for (const auto& it : fast.items) {
    REQUIRE(it.siblings.size() == it.variants.size());
    const WorkItem& f = *full.at(it.family + "|" + it.key);
    const std::set<std::string> listed(it.variants.begin(), it.variants.end());
    for (size_t c = 0; c < it.variants.size(); ++c) {
      // Exactly the configs past the prefix that differ from candidate c in their depth alone, in the family's order.
      std::vector<std::string> want;
      if (it.transfer_from.empty())
        for (size_t x = it.variants.size(); x < f.variants.size(); ++x)
          if (depth_siblings(it.configs[c], f.configs[x])) want.push_back(f.variants[x]);
      std::vector<std::string> got;
      for (const auto& r : it.siblings[c]) {
        got.push_back(r.variant);
        CHECK_FALSE(listed.count(r.variant));
        CHECK(fast.sources.at(r.source).name_expression == all_bins.at({it.family, it.key, r.variant}));
        CHECK(depth_siblings(it.configs[c], r.config));
      }
      CHECK(got == want);
      with_siblings += got.empty() ? 0 : 1;
      total += got.size();
    }
  }
  CHECK(with_siblings > 100);  // qwen7b.json's tiled candidates have rings of several depths
  // Nothing cut: nothing kept; a shard measures exactly its pairs.
  for (const auto& it : all.items)
    for (const auto& s : it.siblings) CHECK(s.empty());
  for (const auto& it : shard_work(fast, 0, 2).items) {
    CHECK(it.siblings.size() == it.variants.size());
    for (const auto& s : it.siblings) CHECK(s.empty());
  }
  INFO(total);
}
