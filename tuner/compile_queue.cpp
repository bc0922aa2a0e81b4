#include "tuner/compile_queue.h"

#include <algorithm>
#include <exception>

namespace kt {

CompileQueue::CompileQueue(const std::vector<KernelSource>& sources, const std::vector<char>& needed, int jobs,
                           CompileFn compile, DoneFn on_done, std::function<bool()> cancelled, bool serve_requests)
    : sources_(sources),
      compile_(std::move(compile)),
      on_done_(std::move(on_done)),
      cancelled_(std::move(cancelled)),
      results_(sources.size()),
      finished_(sources.size(), 0),
      skipped_(sources.size(), 1),
      started_(sources.size(), 0),
      t0_(std::chrono::steady_clock::now()) {
  for (size_t i = 0; i < sources.size() && i < needed.size(); ++i)
    if (needed[i]) {
      order_.push_back(i);
      skipped_[i] = 0;
    }
  serving_ = serve_requests;
  const int n = order_.empty() && !serve_requests ? 0
                : serve_requests                  ? std::max(1, jobs)
                                                  : std::max(1, std::min<int>(jobs, int(order_.size())));
  running_ = size_t(n);
  for (int t = 0; t < n; ++t) threads_.emplace_back([this] { work(); });
}

CompileQueue::~CompileQueue() {
  stop();
  close();
  join();
}

bool CompileQueue::take(size_t& i) {
  while (!urgent_.empty()) {
    i = urgent_.front();
    urgent_.pop_front();
    if (!started_[i]) {
      started_[i] = 1;
      return true;
    }
  }
  while (next_ < order_.size()) {
    i = order_[next_++];
    if (!started_[i]) {
      started_[i] = 1;
      return true;
    }
  }
  return false;
}

void CompileQueue::work() {
  for (;;) {
    size_t i = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      bool got = false;
      for (;;) {  // serving: wait for a request until close()
        if (stop_ || (cancelled_ && cancelled_())) break;
        if ((got = take(i)) || !serving_) break;
        cv_.wait_for(lock, std::chrono::milliseconds(100));  // (the cancel flag is polled)
      }
      if (!got) break;
    }
    CompileResult r;
    try {
      r = compile_(sources_[i]);
    } catch (const std::exception& e) {
      r = CompileResult{};
      r.kernel = sources_[i];
      r.ok = false;
      r.error = e.what();
    }
    if (on_done_) on_done_(i, r);
    std::lock_guard<std::mutex> lock(mu_);
    results_[i] = std::move(r);
    finished_[i] = 1;
    seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    cv_.notify_all();
  }
  std::lock_guard<std::mutex> lock(mu_);
  --running_;
  // Whatever was not started is never compiled: waiters on it are released.
  if (running_ == 0)
    for (size_t i = 0; i < skipped_.size(); ++i)
      if (!finished_[i] && !started_[i]) skipped_[i] = 1;
  cv_.notify_all();
}

const CompileResult* CompileQueue::wait(size_t i) {
  if (i >= results_.size()) return nullptr;
  std::unique_lock<std::mutex> lock(mu_);
  if (!finished_[i] && !skipped_[i] && !started_[i]) urgent_.push_back(i);
  cv_.wait(lock, [&] { return finished_[i] || skipped_[i]; });
  return finished_[i] ? &results_[i] : nullptr;
}

void CompileQueue::request(size_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  if (i >= results_.size() || !serving_ || stop_ || started_[i] || finished_[i]) return;
  skipped_[i] = 0;
  urgent_.push_back(i);
  cv_.notify_all();
}

void CompileQueue::close() {
  std::lock_guard<std::mutex> lock(mu_);
  serving_ = false;
  cv_.notify_all();
}

void CompileQueue::stop() {
  stop_ = true;
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

void CompileQueue::join() {
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

size_t CompileQueue::compiled() const { return size_t(std::count(finished_.begin(), finished_.end(), char(1))); }

}  // namespace kt
