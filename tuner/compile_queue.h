// Compiling while measuring: the tuner's binaries are compiled by a pool of threads in the order they are needed,
// and the measuring loop waits for each one only when it reaches it, so compile time hides under measure time.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "generator/compiler.h"

namespace kt {

/// Compiles the sources marked `needed`, in index order (the plan's order of first use), on `jobs` threads started
/// by the constructor; a source that a caller of wait() needs and that has not started goes next (autotune --devices:
/// each GPU measures its own problems, not the plan's order). `compile` is the compile function (Compiler::compile; a test passes its own); it must not
/// throw for a compile error (a throw is turned into a failed result). `on_done(i, result)` runs on the compiling
/// thread after source i finishes, before any wait(i) returns it (autotune stores the binary in the database there,
/// where the measuring worker reads it). stop(), or `cancelled()` turning true (autotune: an interrupt), lets the
/// compilations in progress finish and starts no new one; the destructor stops and joins.
/// With `serve_requests`, the threads stay after the needed sources until close() (or stop()), to compile what
/// request() asks for: sources outside the plan (autotune's refinement of the fast strategy's leaders).
class CompileQueue {
 public:
  using CompileFn = std::function<CompileResult(const KernelSource&)>;
  using DoneFn = std::function<void(size_t, const CompileResult&)>;

  CompileQueue(const std::vector<KernelSource>& sources, const std::vector<char>& needed, int jobs, CompileFn compile,
               DoneFn on_done = nullptr, std::function<bool()> cancelled = nullptr, bool serve_requests = false);
  ~CompileQueue();
  CompileQueue(const CompileQueue&) = delete;
  CompileQueue& operator=(const CompileQueue&) = delete;

  /// Blocks until source i is compiled and returns its result; nullptr when i will not be compiled (not needed, or
  /// the queue was stopped before it started). Moves i ahead of the sources not started yet. Thread-safe.
  const CompileResult* wait(size_t i);
  /// Queues source i ahead of the ones not started, needed or not, without waiting (serve_requests: the threads
  /// stay for it); wait(i) then returns its result. No effect on a source started, finished, or after close() or stop().
  void request(size_t i);
  /// serve_requests: no more requests; the threads end once the queued sources are compiled.
  void close();
  /// Starts no new compilation (the ones in progress finish).
  void stop();
  /// Waits for the threads to end (every needed source compiled, or stop()).
  void join();

  /// After join(): the results, in source order; finished(i) says which ones were compiled.
  const std::vector<CompileResult>& results() const { return results_; }
  bool finished(size_t i) const { return finished_[i] != 0; }
  size_t compiled() const;
  /// Wall time from construction to the last compilation's end, seconds.
  double seconds() const { return seconds_; }

 private:
  void work();

  const std::vector<KernelSource>& sources_;
  /// The next source to compile (under mu_): the first waited-for one not started, else the next of order_.
  bool take(size_t& i);

  std::vector<size_t> order_;  // the needed indices, ascending
  CompileFn compile_;
  DoneFn on_done_;
  std::function<bool()> cancelled_;
  std::vector<CompileResult> results_;
  std::vector<char> finished_, skipped_, started_;
  std::deque<size_t> urgent_;  // waited-for sources, in the order of the waits (under mu_)
  size_t next_ = 0;            // into order_ (under mu_)
  std::atomic<bool> stop_{false};
  size_t running_ = 0;    // threads still working (guarded by mu_)
  bool serving_ = false;  // serve_requests and not closed (guarded by mu_)
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> threads_;
  double seconds_ = 0;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace kt
