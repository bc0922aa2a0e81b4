// One way to spread independent host work over the machine's cores: the reference rows, input fills and output scans
// of the tuner and the tests.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace kt {

/// Calls body(i) once for every i in [0, n), on up to `threads` threads (0: std::thread::hardware_concurrency()),
/// the calling thread included; items are handed out one at a time in increasing order, so uneven items balance.
/// body must be safe to run concurrently for different i; its result must not depend on which thread runs it.
/// Runs inline when n <= 1 or one thread is asked for. An exception thrown by body ends the program
/// (std::terminate), as from any std::thread.
template <class Body>
void parallel_for(size_t n, Body body, int threads = 0) {
  const size_t cores = threads > 0 ? size_t(threads) : size_t(std::max(1u, std::thread::hardware_concurrency()));
  const size_t workers = std::min(n, cores);
  if (workers <= 1) {
    for (size_t i = 0; i < n; ++i) body(i);
    return;
  }
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) body(i);
  };
  std::vector<std::thread> pool;
  pool.reserve(workers - 1);
  for (size_t t = 1; t < workers; ++t) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
}

}  // namespace kt
