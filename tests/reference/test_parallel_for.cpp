// kt::parallel_for: every index once, whatever the thread count, and the calling thread takes part; kt::HostBuffer.
#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "reference/host_buffer.h"
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

TEST_CASE("HostBuffer: resize leaves elements for the writer, explicit values are kept", "[reference]") {
  kt::HostBuffer<uint16_t> b(4, uint16_t(7));  // value-constructed elements keep the value
  CHECK(std::vector<uint16_t>(b.begin(), b.end()) == std::vector<uint16_t>(4, 7));
  b.resize(1 << 20);  // default-initialized: written below by parallel_for, every element once
  kt::parallel_for(b.size() / 1024, [&](size_t j) {
    for (size_t i = j * 1024; i < (j + 1) * 1024; ++i) b[i] = uint16_t(i);
  });
  size_t wrong = 0;
  for (size_t i = 0; i < b.size(); ++i) wrong += b[i] != uint16_t(i);
  CHECK(wrong == 0);
  b.push_back(3);
  CHECK(b.back() == 3);
}
