// One problem's measuring rounds (tuner/problem_rounds.h) against a scripted host: which candidates are measured, at
// which budget, in which order, and which rows are stored, without a GPU.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "tuner/problem_rounds.h"

using namespace kt;

namespace {

/// A work item of named candidates (config {"tile": name, "stages": s}); siblings[c] lists candidate c's cut-off
/// depth siblings by name. Sources: candidates 0..n-1, siblings n.. in the order given.
WorkItem make_item(const std::vector<std::string>& names,
                   const std::map<std::string, std::vector<std::string>>& siblings = {}) {
  WorkItem it;
  it.family = "qkv_proj";
  it.key = "p";
  for (size_t c = 0; c < names.size(); ++c) {
    it.configs.push_back({{"tile", names[c]}, {"stages", 4}});
    it.variants.push_back(names[c]);
    it.source.push_back(c);
  }
  size_t next = names.size();
  for (size_t c = 0; c < names.size(); ++c) {
    it.siblings.emplace_back();
    const auto f = siblings.find(names[c]);
    if (f == siblings.end()) continue;
    for (const auto& s : f->second) it.siblings.back().push_back({{{"tile", names[c]}, {"stages", 6}}, s, next++});
  }
  return it;
}

/// The scripted host: each variant's median per measurement (the first value for the first measurement, then the
/// next; the last repeats), compile failures by name, a stop after `stop_after` measurements.
struct Script {
  std::map<std::string, std::vector<double>> times;
  std::set<std::string> compile_fails, already;
  int stop_after = 1 << 30;
  // What happened, in order.
  std::vector<std::string> measured;  // "variant@budget"
  std::vector<size_t> requested;
  struct Row {
    std::string variant;
    bool has_result;
    double median_us;
    bool screened;
  };
  std::vector<Row> rows;
  size_t planned_more = 0;
  std::map<std::string, int> calls;
  std::vector<CompileResult> binaries = std::vector<CompileResult>(64);

  RoundsHost host() {
    RoundsHost h;
    h.stop = [this] { return int(measured.size()) >= stop_after; };
    h.wait = [this](size_t source) -> const CompileResult* { return &binaries.at(source); };
    h.request = [this](size_t source) { requested.push_back(source); };
    h.measure = [this](const nlohmann::json&, const std::string& v, const CompileResult& cr, double budget) {
      CHECK(cr.ok);
      measured.push_back(v + "@" + std::to_string(int(budget)));
      const auto& ts = times.at(v);
      WorkerResult wr;
      wr.status = db::Status::ok;
      wr.median_us = wr.p20_us = wr.p80_us = ts[std::min<size_t>(calls[v]++, ts.size() - 1)];
      wr.samples_us = {wr.median_us};
      return wr;
    };
    h.record = [this](const nlohmann::json&, const std::string& v, const CompileResult&, const WorkerResult* wr,
                      bool screened) {
      rows.push_back({v, wr != nullptr, wr ? wr->median_us : 0, screened});
    };
    h.measured_already = [this] { return already; };
    h.step = [](const std::string&) {};
    h.add_planned = [this](size_t n) { planned_more += n; };
    return h;
  }
  void compile(const WorkItem& it) {
    for (size_t c = 0; c < it.variants.size(); ++c) binaries[it.source[c]].ok = !compile_fails.count(it.variants[c]);
    for (const auto& sv : it.siblings)
      for (const auto& s : sv) binaries[s.source].ok = true;
  }
  const Row* row(const std::string& v) const {
    for (const auto& r : rows)
      if (r.variant == v) return &r;
    return nullptr;
  }
};

Rounds fast_rounds() {
  Rounds r;
  r.two_rounds = true;
  r.first_budget_ms = 5;
  r.keep = 3;
  return r;
}

}  // namespace

TEST_CASE("measure_rounds: first round in order, the 3 fastest again in four balanced passes, the rest screened",
          "[tuner]") {
  const WorkItem it = make_item({"A", "B", "C", "D", "E"});
  Script s;
  // A's third pass runs in a dip of the clock (13); D's passes alternate.
  s.times = {{"A", {10, 9, 9, 13, 9}}, {"B", {8}}, {"C", {20}}, {"D", {9.5, 9, 10, 9, 10}}, {"E", {30}}};
  s.compile(it);
  measure_rounds(it, {0, 1, 2, 3, 4}, fast_rounds(), 40, s.host());
  // First round at 5 ms in the listed order; finalists B, D, A (by first-round time) at 10 ms in the orders
  // B D A, B A D, A D B, D A B.
  CHECK(s.measured == std::vector<std::string>{"A@5", "B@5", "C@5", "D@5", "E@5", "B@10", "D@10", "A@10", "B@10",
                                               "A@10", "D@10", "A@10", "D@10", "B@10", "D@10", "A@10", "B@10"});
  // The two slower ones are stored first, screened, with their first-round medians; each finalist as one row of the
  // median of its four passes.
  REQUIRE(s.rows.size() == 5);
  CHECK((s.rows[0].variant == "C" && s.rows[0].screened && s.rows[0].median_us == 20));
  CHECK((s.rows[1].variant == "E" && s.rows[1].screened && s.rows[1].median_us == 30));
  CHECK((!s.row("A")->screened && s.row("A")->median_us == Approx(9)));  // passes 9 9 13 9: the dip set aside
  CHECK(s.row("B")->median_us == Approx(8));
  CHECK(s.row("D")->median_us == Approx(9.5));  // passes 9 10 9 10
  CHECK(s.requested.empty());                   // no siblings
}

TEST_CASE("measure_rounds: the leaders' depth siblings join the first round, the runner-up's only within 5%",
          "[tuner]") {
  const WorkItem it = make_item({"A", "B", "C", "D"}, {{"A", {"A6"}}, {"B", {"B6", "B8"}}, {"C", {"C6"}}});
  Script s;
  s.compile(it);
  SECTION("runner-up within 5%: both leaders' siblings, the one measured already skipped") {
    s.times = {{"A", {10}}, {"B", {10.4}}, {"C", {12}}, {"D", {20}}, {"A6", {9.9}}, {"B6", {9}}, {"B8", {11}}};
    s.already = {"B8"};
    measure_rounds(it, {0, 1, 2, 3}, fast_rounds(), 40, s.host());
    CHECK(s.requested == std::vector<size_t>{4, 5});  // A6, then B6 (B8 is in the database)
    CHECK(s.planned_more == 2);
    CHECK(std::vector<std::string>(s.measured.begin(), s.measured.begin() + 6) ==
          std::vector<std::string>{"A@5", "B@5", "C@5", "D@5", "A6@5", "B6@5"});
    // B6, the fastest, wins the final round; the finalists are B6, A6, A.
    CHECK(s.measured[6] == "B6@10");
    CHECK(s.row("B6") != nullptr);
    CHECK(!s.row("B6")->screened);
    CHECK(s.row("B")->screened);
    CHECK(s.row("B8") == nullptr);
  }
  SECTION("runner-up 6% behind: the leader's siblings alone") {
    s.times = {{"A", {10}}, {"B", {10.6}}, {"C", {12}}, {"D", {20}}, {"A6", {11}}};
    measure_rounds(it, {0, 1, 2, 3}, fast_rounds(), 40, s.host());
    CHECK(s.requested == std::vector<size_t>{4});
    CHECK(s.row("B6") == nullptr);
  }
  SECTION("a bucket-grid problem is not refined") {
    WorkItem grid = it;
    grid.transfer_from = {"neighbour"};
    s.times = {{"A", {10}}, {"B", {10.4}}, {"C", {12}}, {"D", {20}}};
    measure_rounds(grid, {0, 1, 2, 3}, fast_rounds(), 40, s.host());
    CHECK(s.requested.empty());
    CHECK(s.measured.size() == 4 + 3 * 4);
  }
}

TEST_CASE("measure_rounds: one round stores every result at once; a compile failure is stored without a result",
          "[tuner]") {
  const WorkItem it = make_item({"A", "B", "C"}, {{"A", {"A6"}}});
  Script s;
  s.times = {{"A", {10}}, {"C", {5}}};
  s.compile_fails = {"B"};
  s.compile(it);
  Rounds one;
  one.first_budget_ms = 100;
  measure_rounds(it, {0, 1, 2}, one, 100, s.host());
  CHECK(s.measured == std::vector<std::string>{"A@100", "C@100"});
  REQUIRE(s.rows.size() == 3);
  CHECK((s.rows[0].variant == "A" && s.rows[0].has_result && !s.rows[0].screened));
  CHECK((s.rows[1].variant == "B" && !s.rows[1].has_result));
  CHECK((s.rows[2].variant == "C" && s.rows[2].median_us == 5));
  CHECK(s.requested.empty());  // one round: no refinement
}

TEST_CASE("measure_rounds: a stop keeps every result taken so far", "[tuner]") {
  const WorkItem it = make_item({"A", "B", "C", "D"});
  Script s;
  s.times = {{"A", {10, 7}}, {"B", {8, 6}}, {"C", {9, 5}}, {"D", {20}}};
  s.compile(it);
  SECTION("during the first round: the first-round rows, unscreened") {
    s.stop_after = 2;
    measure_rounds(it, {0, 1, 2, 3}, fast_rounds(), 40, s.host());
    CHECK(s.measured == std::vector<std::string>{"A@5", "B@5"});
    REQUIRE(s.rows.size() == 2);
    CHECK((!s.rows[0].screened && !s.rows[1].screened));
  }
  SECTION("during the final round's first pass: passes taken stored, the rest their first-round rows") {
    s.stop_after = 6;  // 4 first-round, then B and C's first passes
    measure_rounds(it, {0, 1, 2, 3}, fast_rounds(), 40, s.host());
    CHECK(s.measured == std::vector<std::string>{"A@5", "B@5", "C@5", "D@5", "B@10", "C@10"});
    REQUIRE(s.rows.size() == 4);
    CHECK((s.row("D")->screened && s.row("D")->median_us == 20));
    CHECK(s.row("B")->median_us == 6);  // its first pass
    CHECK(s.row("C")->median_us == 5);
    CHECK((s.row("A")->median_us == 10 && !s.row("A")->screened));  // its first-round row
  }
}
