// ItemScheduler: which problem each GPU's thread of autotune --devices measures next.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <set>
#include <thread>

#include "tuner/item_scheduler.h"

using kt::ItemScheduler;

namespace {

std::vector<size_t> drain(ItemScheduler& s, int thread) {
  std::vector<size_t> got;
  while (auto k = s.take(thread)) got.push_back(*k);
  return got;
}

}  // namespace

TEST_CASE("ItemScheduler: one thread takes the items in index order, whatever their keys", "[tuner]") {
  ItemScheduler s({"b", "a", "b", "", "a"}, 1);
  CHECK(drain(s, 0) == std::vector<size_t>{0, 1, 2, 3, 4});
  CHECK_FALSE(s.take(0));
  for (int threads : {1, 2}) {  // no items: nothing to take, for any thread
    ItemScheduler none({}, threads);
    for (int t = 0; t < threads; ++t) CHECK_FALSE(none.take(t));
  }
}

TEST_CASE("ItemScheduler: threads keep to a key group, claim the next unclaimed group, then take from the back",
          "[tuner]") {
  SECTION("groups in order of first appearance; an empty key is a group of its own") {
    ItemScheduler s({"a", "b", "a", "", "b", "a", ""}, 2);
    std::vector<size_t> t0, t1;
    for (int round = 0; round < 4; ++round) {
      if (auto k = s.take(0)) t0.push_back(*k);
      if (auto k = s.take(1)) t1.push_back(*k);
    }
    CHECK(t0 == std::vector<size_t>{0, 2, 5, 6});  // all of "a", then the last empty key (the first went to t1)
    CHECK(t1 == std::vector<size_t>{1, 4, 3});     // all of "b", then the first empty key
    CHECK_FALSE(s.take(0));
    CHECK_FALSE(s.take(1));
  }
  SECTION("a thread with nothing to claim takes from the back of the largest group left") {
    ItemScheduler s({"a", "a", "a", "a", "a", "a", "b"}, 2);
    CHECK(*s.take(0) == 0);
    CHECK(*s.take(1) == 6);
    CHECK(*s.take(1) == 5);  // "b" is done: from the back of "a"
    CHECK(*s.take(0) == 1);  // the holder keeps the front
    CHECK(*s.take(1) == 4);
    CHECK(*s.take(0) == 2);
    CHECK(*s.take(0) == 3);
    CHECK_FALSE(s.take(1));
    CHECK_FALSE(s.take(0));
  }
}

TEST_CASE("ItemScheduler: every item exactly once, for random keys and call orders, and from concurrent threads",
          "[tuner]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int threads = 1 + int(rng() % 4), n = int(rng() % 40);
    std::vector<std::string> keys;
    for (int i = 0; i < n; ++i) keys.push_back(rng() % 5 == 0 ? "" : std::string(1, char('a' + rng() % 6)));
    ItemScheduler s(keys, threads);
    std::vector<size_t> got;
    std::vector<char> done(size_t(threads), 0);
    while (std::count(done.begin(), done.end(), 1) < threads) {
      const int t = int(rng() % unsigned(threads));
      if (auto k = s.take(t)) {
        CHECK_FALSE(done[size_t(t)]);  // nothing after a thread was told there is nothing left
        got.push_back(*k);
      } else {
        done[size_t(t)] = 1;
      }
    }
    std::sort(got.begin(), got.end());
    std::vector<size_t> all(static_cast<size_t>(n));
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    INFO("trial " << trial << ": " << threads << " threads, " << n << " items");
    CHECK(got == all);
  }
  std::vector<std::string> keys;
  for (int i = 0; i < 5000; ++i) keys.push_back(std::to_string(i % 17));
  ItemScheduler s(keys, 4);
  std::vector<std::vector<size_t>> got(4);
  std::vector<std::thread> pool;
  for (int t = 0; t < 4; ++t) pool.emplace_back([&, t] { got[size_t(t)] = drain(s, t); });
  for (auto& th : pool) th.join();
  std::set<size_t> seen;
  size_t total = 0;
  for (const auto& g : got) {
    total += g.size();
    seen.insert(g.begin(), g.end());
  }
  CHECK(total == keys.size());
  CHECK(seen.size() == keys.size());
}

TEST_CASE("ItemScheduler: bad thread counts and ordinals are refused", "[tuner]") {
  CHECK_THROWS_WITH(ItemScheduler({"a"}, 0), Catch::Contains("threads must be >= 1"));
  ItemScheduler s({"a"}, 2);
  CHECK_THROWS_AS(s.take(2), std::out_of_range);
  CHECK_THROWS_AS(s.take(-1), std::out_of_range);
}
