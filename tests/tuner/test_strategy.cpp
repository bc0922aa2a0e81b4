// The tuner's strategies (rounds per problem) and its compile queue (compiling while measuring).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tuner/compile_queue.h"
#include "tuner/strategy.h"
#include "tuner/worker.h"

using namespace kt;

TEST_CASE("merge_passes: one row of a finalist's two passes", "[tuner]") {
  WorkerResult a, b;
  a.status = b.status = db::Status::ok;
  a.samples_us = {10, 10, 10, 10, 10, 11};  // the first pass, at a higher clock: more samples in its budget
  b.samples_us = {14, 15, 16, 17};          // the second
  a.median_us = 10, a.p20_us = 10, a.p80_us = 10.5;
  b.median_us = 15.5, b.p20_us = 14.6, b.p80_us = 16.4;
  a.rel_err = 1e-3;
  b.rel_err = 2e-3;
  a.sm_clock_mhz = 1980;
  b.sm_clock_mhz = 1500;
  a.load_ms = 1, a.check_ms = 2, a.time_ms = 3;
  b.load_ms = 0, b.check_ms = 2, b.time_ms = 3;
  const WorkerResult m = merge_passes({a, b});
  CHECK(m.status == db::Status::ok);
  CHECK(m.samples_us == std::vector<double>{10, 10, 10, 10, 10, 11, 14, 15, 16, 17});
  CHECK(m.median_us == Approx(12.75));  // the passes' mean (the pooled median, 10.5, would follow the faster pass)
  CHECK(m.p20_us == Approx(12.3));
  CHECK(m.p80_us == Approx(13.45));
  CHECK(m.rel_err == 2e-3);
  CHECK(m.sm_clock_mhz == Approx(1740));
  CHECK(m.load_ms == 1);
  CHECK(m.check_ms == 4);
  CHECK(m.time_ms == 6);
  // An unknown clock is left out of the mean.
  b.sm_clock_mhz = -1;
  CHECK(merge_passes({a, b}).sm_clock_mhz == 1980);
  a.sm_clock_mhz = -1;
  CHECK(merge_passes({a, b}).sm_clock_mhz == -1);
  // A failing second pass is the row as it is (its error, no samples of the other pass), with both passes' times.
  WorkerResult bad;
  bad.status = db::Status::wrong_result;
  bad.error = "rel_l2 0.5 > 0.01";
  bad.rel_err = 0.5;
  bad.check_ms = 2;
  const WorkerResult f = merge_passes({a, bad});
  CHECK(f.status == db::Status::wrong_result);
  CHECK(f.error == "rel_l2 0.5 > 0.01");
  CHECK(f.samples_us.empty());
  CHECK(f.median_us == 0);
  CHECK(f.rel_err == 0.5);
  CHECK(f.check_ms == 4);
}

TEST_CASE("merge_passes: four passes take the median of the passes, setting one slow pass aside", "[tuner]") {
  std::vector<WorkerResult> ps(4);
  const double med[4] = {9, 9, 13, 9.2}, clk[4] = {1980, 1980, -1, 1900};
  for (int i = 0; i < 4; ++i) {
    ps[i].status = db::Status::ok;
    ps[i].median_us = ps[i].p20_us = ps[i].p80_us = med[i];
    ps[i].samples_us = {med[i]};
    ps[i].sm_clock_mhz = clk[i];
    ps[i].time_ms = 1;
  }
  ps[3].p80_us = 11;
  const WorkerResult m = merge_passes(ps);
  CHECK(m.median_us == Approx(9.1));  // the middle two of 9 9 9.2 13
  CHECK(m.p80_us == Approx(10));      // the middle two of 9 9 11 13
  CHECK(m.samples_us.size() == 4);
  CHECK(m.sm_clock_mhz == Approx((1980 + 1980 + 1900) / 3.0));
  CHECK(m.time_ms == 4);
  // A failing pass (here the third) is the row, whichever pass it is.
  ps[2].status = db::Status::launch_failed;
  ps[2].error = "illegal address";
  CHECK(merge_passes(ps).status == db::Status::launch_failed);
  CHECK(merge_passes(ps).error == "illegal address");
  CHECK_THROWS_AS(merge_passes({}), std::invalid_argument);
}

TEST_CASE("final_pass_orders: four permutations, every finalist's positions summing alike, no pass back to back",
          "[tuner]") {
  for (size_t k = 1; k <= 9; ++k) {
    const auto orders = final_pass_orders(k);
    REQUIRE(orders.size() == kFinalPasses);
    std::vector<size_t> seq, sum(k, 0);
    for (const auto& o : orders) {
      std::vector<size_t> sorted = o;
      std::sort(sorted.begin(), sorted.end());
      for (size_t i = 0; i < k; ++i) CHECK(sorted[i] == i);  // a permutation of the finalists
      seq.insert(seq.end(), o.begin(), o.end());
    }
    for (size_t pos = 0; pos < seq.size(); ++pos) sum[seq[pos]] += pos;
    for (size_t i = 0; i < k; ++i) CHECK(sum[i] == sum[0]);  // a linear drift adds alike to each finalist's mean
    if (k >= 3)
      for (size_t pos = 1; pos < seq.size(); ++pos) CHECK(seq[pos] != seq[pos - 1]);
  }
  CHECK(final_pass_orders(3) == std::vector<std::vector<size_t>>{{0, 1, 2}, {0, 2, 1}, {2, 1, 0}, {1, 2, 0}});
}

TEST_CASE("refines_leader: the two-round strategies refine, exhaustive does not", "[tuner]") {
  CHECK(refines_leader("fast"));
  CHECK(refines_leader("halving"));
  CHECK_FALSE(refines_leader("exhaustive"));
  CHECK_THROWS_WITH(refines_leader("greedy"), Catch::Contains("greedy"));
}

TEST_CASE("refine_leaders: the fastest, and a runner-up only within 5% of it", "[tuner]") {
  using V = std::vector<size_t>;
  CHECK(refine_leaders({}) == V{});
  CHECK(refine_leaders({7.0}) == V{0});
  // The runner-up within 5% joins, fastest first; a third within 5% does not (two leaders at most).
  CHECK(refine_leaders({10.4, 10.0, 10.2, 30.0}) == V{1, 2});
  // A runner-up 6% behind does not.
  CHECK(refine_leaders({10.6, 10.0, 12.0}) == V{1});
  // Exactly 5% behind still does (the bound is inclusive).
  CHECK(refine_leaders({10.0, 10.5}) == V{0, 1});
  // Equal medians keep the listed order.
  CHECK(refine_leaders({5.0, 5.0, 5.0}) == V{0, 1});
  // A median that is not a positive finite number never leads.
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  CHECK(refine_leaders({0.0, nan, 9.0, -1.0, inf, 9.3}) == V{2, 5});
  CHECK(refine_leaders({nan, 0.0}) == V{});
}

TEST_CASE("rounds_for: exhaustive one round, halving the best quarter, fast the best three at budget / 8", "[tuner]") {
  const Rounds ex = rounds_for("exhaustive", 40, 100);
  CHECK_FALSE(ex.two_rounds);
  CHECK(ex.first_budget_ms == 100);

  const Rounds hv = rounds_for("halving", 40, 100);
  CHECK(hv.two_rounds);
  CHECK(hv.first_budget_ms == 25);
  CHECK(hv.keep == 10);
  CHECK(rounds_for("halving", 13, 100).keep == 4);  // rounded up
  CHECK_FALSE(rounds_for("halving", 4, 100).two_rounds);
  CHECK(rounds_for("halving", 8, 8).first_budget_ms == 5);  // never below 5 ms

  const Rounds fa = rounds_for("fast", 16, 40);
  CHECK(fa.two_rounds);
  CHECK(fa.first_budget_ms == 5);
  CHECK(fa.keep == kFastKeep);
  CHECK_FALSE(rounds_for("fast", kFastKeep, 40).two_rounds);  // as many as it keeps: one round at the full budget
  CHECK(rounds_for("fast", kFastKeep, 40).first_budget_ms == 40);
  CHECK(rounds_for("fast", 16, 8).first_budget_ms == 2);  // never below 2 ms

  CHECK(default_budget_ms("fast") == 40);
  CHECK(default_budget_ms("exhaustive") == 100);
  CHECK(default_budget_ms("halving") == 100);
  CHECK_THROWS_WITH(rounds_for("random", 4, 10), "unknown --strategy 'random': use fast, exhaustive or halving");
  CHECK_THROWS_AS(default_budget_ms("grid"), std::invalid_argument);

  CHECK(default_max_candidates("fast", false) == kFastCandidates);
  CHECK(default_max_candidates("fast", true) == 0);  // compile-only compiles every candidate
  CHECK(default_max_candidates("exhaustive", false) == 0);
  CHECK(default_max_candidates("halving", false) == 0);
  CHECK_THROWS_WITH(default_max_candidates("Fast", false),
                    "unknown --strategy 'Fast': use fast, exhaustive or halving");
  CHECK_NOTHROW(check_strategy("halving"));
  CHECK_THROWS_AS(check_strategy(""), std::invalid_argument);
}

namespace {
std::vector<KernelSource> fake_sources(size_t n) {
  std::vector<KernelSource> s(n);
  for (size_t i = 0; i < n; ++i) s[i].variant_name = "v" + std::to_string(i);
  return s;
}
CompileResult fake_compile(const KernelSource& k) {
  if (k.variant_name == "v3") throw std::runtime_error("NVRTC is gone");
  CompileResult r;
  r.kernel = k;
  r.ok = k.variant_name != "v5";
  if (!r.ok) r.error = "bad template";
  r.cache_key = "key-" + k.variant_name;
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return r;
}
}  // namespace

TEST_CASE("CompileQueue compiles only what is needed, hands each result to on_done before wait returns it", "[tuner]") {
  const auto sources = fake_sources(10);
  std::vector<char> needed(10, 1);
  needed[2] = needed[7] = 0;
  std::atomic<int> done_calls{0};
  std::vector<std::atomic<int>> seen(10);
  CompileQueue q(sources, needed, 3, fake_compile, [&](size_t i, const CompileResult&) {
    seen[i]++;
    done_calls++;
  });
  for (size_t i = 0; i < 10; ++i) {
    const CompileResult* r = q.wait(i);
    if (!needed[i]) {
      CHECK(r == nullptr);  // never compiled: wait does not block forever
      continue;
    }
    REQUIRE(r != nullptr);
    CHECK(seen[i] == 1);  // on_done ran first
    CHECK(r->kernel.variant_name == "v" + std::to_string(i));
    CHECK(r->ok == (i != 3 && i != 5));
  }
  CHECK(q.wait(3)->error == "NVRTC is gone");  // a throw becomes a failed result
  CHECK(q.wait(5)->error == "bad template");
  q.join();
  CHECK(done_calls == 8);
  CHECK(q.compiled() == 8);
  CHECK_FALSE(q.finished(2));
  CHECK(q.wait(99) == nullptr);
}

TEST_CASE("CompileQueue stops on request: compilations in progress finish, waiters on the rest are released",
          "[tuner]") {
  const auto sources = fake_sources(200);
  std::atomic<bool> cancel{false};
  std::atomic<int> done_calls{0};
  CompileQueue q(
      sources, std::vector<char>(200, 1), 2,
      [&](const KernelSource& k) {
        if (k.variant_name == "v10") cancel = true;
        return fake_compile(k);
      },
      [&](size_t, const CompileResult&) { done_calls++; }, [&] { return cancel.load(); });
  while (!cancel) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // no wait yet: index order until v10
  CHECK(q.wait(199) == nullptr);  // released, not compiled (nothing starts after the cancel, waited-for or not)
  q.join();
  CHECK(q.compiled() == size_t(done_calls.load()));
  CHECK(q.compiled() >= 11);  // everything up to the cancelling one (started before it) finished
  CHECK(q.compiled() < 200);
  CHECK(q.finished(10));
  CHECK(q.wait(10) != nullptr);
}

TEST_CASE("CompileQueue compiles a waited-for source next, ahead of the ones not started", "[tuner]") {
  const auto sources = fake_sources(100);
  std::vector<char> needed(100, 1);
  needed[3] = needed[5] = 0;  // fake_compile's failures stay out of this test
  std::mutex mu;
  std::vector<size_t> order;
  CompileQueue q(sources, needed, 1, [&](const KernelSource& k) {
    {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(std::stoul(k.variant_name.substr(1)));
    }
    return fake_compile(k);
  });
  REQUIRE(q.wait(90) != nullptr);
  REQUIRE(q.wait(60) != nullptr);
  CHECK(q.wait(3) == nullptr);  // not needed: waiting does not make it compile
  q.join();
  REQUIRE(order.size() == 98);
  const auto pos = [&](size_t i) { return size_t(std::find(order.begin(), order.end(), i) - order.begin()); };
  // One thread: at most the compilation in progress when a wait arrives comes first.
  CHECK(pos(90) <= 1);
  CHECK(pos(60) <= pos(90) + 2);
  CHECK(std::count(order.begin(), order.end(), size_t(90)) == 1);  // each source once
  std::vector<size_t> rest;
  for (size_t i : order)
    if (i != 90 && i != 60) rest.push_back(i);
  CHECK(std::is_sorted(rest.begin(), rest.end()));  // the others in index order
}

TEST_CASE("CompileQueue with nothing needed starts no thread and waits return at once", "[tuner]") {
  const auto sources = fake_sources(3);
  CompileQueue q(sources, std::vector<char>(3, 0), 4, fake_compile);
  CHECK(q.wait(0) == nullptr);
  q.join();
  CHECK(q.compiled() == 0);
}

TEST_CASE("CompileQueue serving requests compiles sources outside the plan on request, until close", "[tuner]") {
  const auto sources = fake_sources(8);
  std::vector<char> needed(8, 0);
  needed[0] = needed[1] = 1;
  std::atomic<int> done_calls{0};
  CompileQueue q(
      sources, needed, 2, fake_compile, [&](size_t, const CompileResult&) { done_calls++; }, nullptr, true);
  REQUIRE(q.wait(0) != nullptr);
  REQUIRE(q.wait(1) != nullptr);
  CHECK(q.wait(6) == nullptr);                                 // not needed, not requested: waiting does not compile it
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the plan is done; the threads stay for requests
  q.request(6);
  q.request(7);
  q.request(6);  // once
  const CompileResult* r6 = q.wait(6);
  REQUIRE(r6 != nullptr);
  CHECK(r6->kernel.variant_name == "v6");
  REQUIRE(q.wait(7) != nullptr);
  CHECK(q.wait(7)->cache_key == "key-v7");
  q.request(0);  // finished already: nothing more
  q.close();
  q.request(4);  // after close: ignored
  q.join();      // the threads end once closed
  CHECK(q.wait(4) == nullptr);
  CHECK(done_calls == 4);
  CHECK(q.compiled() == 4);
  CHECK_FALSE(q.finished(2));

  // Without serve_requests a request is a no-op: the threads end with the plan.
  CompileQueue plain(sources, needed, 2, fake_compile);
  plain.request(5);
  plain.join();
  CHECK(plain.wait(5) == nullptr);
  CHECK(plain.compiled() == 2);
}
