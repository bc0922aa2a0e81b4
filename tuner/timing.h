// Timing harness: CUDA events around batches of launches, for a time budget, keeping every sample.
#pragma once
#include <cuda.h>

#include <functional>
#include <vector>

namespace kt {

/// Per-launch times in microseconds: one sample per batch (batch time / launches in the batch).
struct Timing {
  double median_us = 0, p20_us = 0, p80_us = 0, min_us = 0;
  int launches_per_sample = 0;
  std::vector<double> samples_us;
};

/// Times `launch(i)` (i = 0, 1, 2, ...; the callee rotates its input copies with i) on `stream`.
/// Warm-up: launches for at least warmup_ms. Then batches sized to last about 0.5 ms each, recorded
/// between CUDA events, until budget_ms of measured GPU time or max_samples batches (at least
/// min_samples). Selection statistics are over batches: median and the 20th/80th percentiles.
/// Throws cuda::CudaError if a launch fails.
Timing time_launches(const std::function<void(int)>& launch, CUstream stream, double budget_ms, double warmup_ms = 20,
                     int min_samples = 10, int max_samples = 2000);

/// p-th percentile (0..100) of values by linear interpolation; 0 for an empty vector.
double percentile(std::vector<double> values, double p);

}  // namespace kt
