#include "tuner/timing.h"

#include <algorithm>
#include <cmath>

#include "cuda/driver.h"

namespace kt {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double pos = p / 100.0 * (v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}

Timing time_launches(const std::function<void(int)>& launch, CUstream stream, double budget_ms, double warmup_ms,
                     int min_samples, int max_samples) {
  cuda::Event a, b;
  int counter = 0;
  // Warm-up, and a first estimate of one launch.
  double spent = 0;
  int n = 1;
  double per_launch_ms = 0;
  while (spent < warmup_ms) {
    a.record(stream);
    for (int i = 0; i < n; ++i) launch(counter++);
    b.record(stream);
    b.synchronize();
    const double ms = cuda::Event::elapsed_ms(a, b);
    spent += ms;
    per_launch_ms = ms / n;
    if (ms < 0.5) n = std::min(n * 2, 1024);
  }
  Timing t;
  t.launches_per_sample = std::max(1, std::min(1000, static_cast<int>(std::ceil(0.5 / std::max(per_launch_ms, 1e-4)))));
  double measured = 0;
  while ((measured < budget_ms || static_cast<int>(t.samples_us.size()) < min_samples) &&
         static_cast<int>(t.samples_us.size()) < max_samples) {
    a.record(stream);
    for (int i = 0; i < t.launches_per_sample; ++i) launch(counter++);
    b.record(stream);
    b.synchronize();
    const double ms = cuda::Event::elapsed_ms(a, b);
    measured += ms;
    t.samples_us.push_back(ms * 1000.0 / t.launches_per_sample);
  }
  t.median_us = percentile(t.samples_us, 50);
  t.p20_us = percentile(t.samples_us, 20);
  t.p80_us = percentile(t.samples_us, 80);
  t.min_us = *std::min_element(t.samples_us.begin(), t.samples_us.end());
  return t;
}

}  // namespace kt
