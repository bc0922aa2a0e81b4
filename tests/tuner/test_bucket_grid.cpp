// autotune's default bucket grid (tuner/work_items.h bucket_grid): between the sizes a shapes file names, every
// power-of-two bucket of a kernel class holds exactly one tuned problem, and a grid problem's candidates are its
// default plus what its named neighbours measure.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "generator/arch.h"
#include "generator/registry.h"
#include "tuner/shapes_file.h"
#include "tuner/work_items.h"

using namespace kt;

namespace {

std::vector<ProblemRef> qwen_named() {
  const ShapesFile s = load_shapes(std::string(KT_SOURCE_DIR) + "/shapes/qwen7b.json");
  std::vector<std::string> families;
  return collect_problems(s, families);
}

/// The bucket of every bucket size of a problem.
std::vector<int> buckets(const ProblemRef& pr) {
  std::vector<int> b;
  for (const auto& [name, x] : pr.family->family->bucket_sizes(pr.problem)) b.push_back(size_bucket(x));
  return b;
}

}  // namespace

TEST_CASE("bucket_grid: one problem per bucket of each class between the named sizes, named ones untouched",
          "[tuner]") {
  const auto named = qwen_named();
  const auto grid = bucket_grid(named);
  REQUIRE_FALSE(grid.empty());
  CHECK(bucket_grid(named).size() == grid.size());  // deterministic
  std::map<std::string, std::string> named_class;   // named key -> family|class
  for (const auto& pr : named)
    named_class[pr.family->family->problem_key(pr.problem)] =
        pr.family->family->name() + "|" + pr.family->family->class_key(pr.problem);

  // Per class: bucket tuples of named and grid problems together, each tuple once.
  std::map<std::string, std::map<std::vector<int>, int>> held;
  std::map<std::string, int> per_family;
  for (const auto* list : {&named, &grid})
    for (const auto& pr : *list) {
      const Family& f = *pr.family->family;
      const std::string cls = f.name() + "|" + f.class_key(pr.problem);
      ++held[cls][buckets(pr)];
      if (list == &grid) {
        ++per_family[f.name()];
        // Sizes are the bucket's powers of two; the named neighbours are of the same class, and at most
        // kGridNeighbours.
        for (const auto& [name, x] : f.bucket_sizes(pr.problem)) CHECK(x == (1ll << size_bucket(x)));
        REQUIRE_FALSE(pr.transfer_from.empty());
        CHECK(pr.transfer_from.size() <= size_t(kGridNeighbours));
        for (const auto& key : pr.transfer_from) {
          REQUIRE(named_class.count(key));
          CHECK(named_class[key] == cls);
        }
      }
    }
  // A grid problem sits in a bucket no other problem holds (named problems may share one: B 1 and B 8 at S 2048).
  for (const auto& pr : grid) {
    const Family& f = *pr.family->family;
    INFO(f.problem_key(pr.problem));
    CHECK(held[f.name() + "|" + f.class_key(pr.problem)][buckets(pr)] == 1);
  }

  // qwen7b.json: qkv_proj names M 1, 16, 64 .. 16384: the grid adds M 2, 4, 8, 32, 128, 512, 2048 and 8192 to each
  // of its 24 classes (12 formats x 2 dtypes).
  CHECK(per_family["qkv_proj"] == 24 * 8);
  // Prefill, causal: S 512 .. 16384 named except 4096; seqlen_q = seqlen_k stays tied (no S_q != S_k problem).
  int prefill_4096 = 0;
  for (const auto& pr : grid)
    if (pr.family->family->name() == "attention_prefill") {
      CHECK(pr.problem["seqlen_q"] == pr.problem["seqlen_k"]);
      prefill_4096 += pr.problem["seqlen_q"] == 4096;
    }
  CHECK(per_family["attention_prefill"] == 2);  // bf16 and fp16
  CHECK(prefill_4096 == 2);
  // Decode q_len 1: batch 1 .. 64 (7 buckets) x kv_len 512 .. 32768 (7 buckets) less the 20 named, per class.
  CHECK(per_family["attention_decode"] == 2 * 2 * ((49 - 20) + (35 - 9)));

  // Every bucket of each class's range is held: the product of the per-axis ranges (tied axes as one).
  for (const auto& [cls, tuples] : held) {
    std::vector<int> lo = tuples.begin()->first, hi = lo;
    for (const auto& [b, n] : tuples)
      for (size_t i = 0; i < b.size(); ++i) lo[i] = std::min(lo[i], b[i]), hi[i] = std::max(hi[i], b[i]);
    size_t product = 1;
    bool tied = cls.rfind("attention_prefill|", 0) == 0;  // seqlen_q and seqlen_k move together
    for (size_t i = 0; i < lo.size(); ++i)
      if (!(tied && i == 1)) product *= size_t(hi[i] - lo[i] + 1);
    INFO(cls);
    CHECK(tuples.size() == product);
  }
}

TEST_CASE("bucket_grid: a grid problem's candidates are its default and its neighbours' candidates", "[tuner]") {
  auto named = qwen_named();
  std::vector<ProblemRef> problems;
  for (const auto& pr : named)  // one qkv class and one decode class keep the plan small
    if (pr.family->family->problem_key(pr.problem).find("/bf16/int4_kb128/") != std::string::npos ||
        pr.family->family->problem_key(pr.problem).rfind("attention_decode/bf16/", 0) == 0)
      problems.push_back(pr);
  const auto grid = bucket_grid(problems);
  problems.insert(problems.end(), grid.begin(), grid.end());
  const ArchId arch = parse_arch("sm_90a");
  const WorkPlan plan = build_work(problems, arch, device_model(arch), {});
  std::map<std::string, std::set<std::string>> variants;
  size_t grid_items = 0;
  for (const auto& it : plan.items) {
    variants[it.key] = {it.variants.begin(), it.variants.end()};
    if (it.transfer_from.empty()) continue;
    ++grid_items;
    REQUIRE_FALSE(it.variants.empty());
    CHECK(it.variants.front() == it.default_variant);
    for (size_t c = 1; c < it.variants.size(); ++c) {
      bool from_neighbour = false;
      for (const auto& key : it.transfer_from) from_neighbour |= variants.at(key).count(it.variants[c]) > 0;
      INFO(it.key << ": " << it.variants[c]);
      CHECK(from_neighbour);
    }
  }
  CHECK(grid_items == grid.size());
}

TEST_CASE("grid_candidates: the default and each neighbour's fastest ok variants", "[tuner]") {
  auto row = [](const std::string& v, double us, db::Status st = db::Status::ok) {
    db::Measurement m;
    m.variant_name = v;
    m.median_us = us;
    m.status = st;
    return m;
  };
  const std::vector<db::Measurement> a = {row("a1", 5), row("a2", 3),
                                          row("a3", 9), row("a4", 1, db::Status::wrong_result),
                                          row("a5", 4), row("a3", 2)};  // a3 again, faster: its best counts
  const std::vector<db::Measurement> b = {row("a2", 7), row("b1", 1)};
  CHECK(grid_candidates("dflt", {a}) == std::set<std::string>{"dflt", "a3", "a2", "a5"});
  CHECK(grid_candidates("dflt", {a, b}) == std::set<std::string>{"dflt", "a3", "a2", "a5", "b1"});
  CHECK(grid_candidates("dflt", {{}, {row("x", 1, db::Status::timeout)}}) == std::set<std::string>{"dflt"});
  // Screened rows (non-finalists' first-round rows) rank after every unscreened one, however fast; a variant with
  // both kinds ranks by its unscreened row.
  auto screened = [&](const std::string& v, double us) {
    auto m = row(v, us);
    m.screened = true;
    return m;
  };
  const std::vector<db::Measurement> c = {screened("s1", 1), row("f1", 10), row("f2", 11),
                                          screened("s2", 2), row("f3", 12), row("s2", 20)};
  CHECK(grid_candidates("dflt", {c}) == std::set<std::string>{"dflt", "f1", "f2", "f3"});
  const std::vector<db::Measurement> d = {screened("s1", 1), screened("s2", 2), row("f1", 10)};
  CHECK(grid_candidates("dflt", {d}) == std::set<std::string>{"dflt", "f1", "s1", "s2"});
  static_assert(kGridTransfer == 3, "the expectations above take the 3 fastest");
}

TEST_CASE(
    "select_problems (autotune --problems): the matching keys in their order, transfer_from kept, none is an error",
    "[tuner]") {
  auto all = qwen_named();
  const auto grid = bucket_grid(all);
  all.insert(all.end(), grid.begin(), grid.end());
  auto key = [](const ProblemRef& p) { return p.family->family->problem_key(p.problem); };
  // The bf16 int4 qkv_proj problems at M 16 and the grid's M 32 between them and M 64.
  auto keep = [](const std::string& k) {
    return k.rfind("qkv_proj/bf16/int4/m16/", 0) == 0 || k.rfind("qkv_proj/bf16/int4/m32/", 0) == 0;
  };
  const auto kept = select_problems(all, keep, "--problems 'x'");
  std::vector<std::string> expected;
  for (const auto& p : all)
    if (keep(key(p))) expected.push_back(key(p));
  REQUIRE(expected.size() == 2);  // one named (M 16), one bucket-grid (M 32) problem
  REQUIRE(kept.size() == expected.size());
  for (size_t i = 0; i < kept.size(); ++i) CHECK(key(kept[i]) == expected[i]);
  CHECK(kept[0].transfer_from.empty());
  CHECK_FALSE(kept[1].transfer_from.empty());  // the grid problem still names its neighbours

  try {
    select_problems(
        all, [](const std::string&) { return false; }, "--problems 'nothing'");
    FAIL("no problem kept must throw");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(e.what(), Catch::Contains("--problems 'nothing' matches none of the " + std::to_string(all.size())));
  }
}
