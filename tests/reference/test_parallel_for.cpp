// kt::parallel_for: every index once, whatever the thread count, and the calling thread takes part.
#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "reference/parallel_for.h"

TEST_CASE("parallel_for calls the body once per index on up to the given threads", "[reference]") {
  for (int threads : {0, 1, 3, 64}) {
    for (size_t n : {size_t(0), size_t(1), size_t(2), size_t(1000)}) {
      std::vector<std::atomic<int>> calls(n);
      std::mutex mu;
      std::set<std::thread::id> ids;
      kt::parallel_for(
          n,
          [&](size_t i) {
            calls[i]++;
            std::lock_guard<std::mutex> lock(mu);
            ids.insert(std::this_thread::get_id());
          },
          threads);
      for (size_t i = 0; i < n; ++i) CHECK(calls[i].load() == 1);
      if (threads == 1) {
        CHECK(ids.size() <= 1);  // inline on the calling thread
        if (n > 0) CHECK(ids.count(std::this_thread::get_id()) == 1);
      }
      if (threads > 1) CHECK(ids.size() <= std::min<size_t>(n, size_t(threads)));
    }
  }
}
