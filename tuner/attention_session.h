// Measuring candidates of one attention_prefill problem on the GPU: inputs, float64 reference rows and
// device buffers are built once per problem; each candidate is verified (poisoned output) before it
// may be timed. Runs inside an autotune worker process (tuner/worker.h).
#pragma once
#include <cuda.h>

#include <memory>
#include <string>

#include "cache/tuning_db.h"
#include "generator/attention_family.h"
#include "runtime/loaded_kernel.h"
#include "tuner/attention_harness.h"
#include "tuner/timing.h"

namespace kt {
struct TunerFamily;
namespace attn {

/// Result of measuring one candidate. status is ok or wrong_result (launch failures throw).
struct Outcome {
  db::Status status = db::Status::ok;
  std::string error;
  Verdict verdict;
  Timing timing;
};

class Session {
 public:
  /// Draws inputs (seed), computes up to ref_rows float64 reference rows, allocates the check buffers
  /// and `cold_l2_copies` rotating input sets (together > 3 x l2_bytes). Requires a current context.
  Session(const Problem& p, uint64_t seed, size_t ref_rows, size_t l2_bytes, float softmax_scale = 0.f);
  const Problem& problem() const { return p_; }

  /// Verifies `kernel` (variant `config`) once against the reference with NaN-poisoned outputs; if it
  /// passes, times it for budget_ms (time_launches). Throws cuda::CudaError if a launch faults.
  Outcome measure(const LoadedKernel& kernel, const Config& config, CUstream stream, double budget_ms);

 private:
  Problem p_;
  float scale_;
  HostInputs in_;
  RefRows ref_;
  DeviceProblem check_;
  std::unique_ptr<DeviceProblem> rotation_;
  size_t l2_bytes_;
};

/// attention_prefill's tuner registration (tuner/tuner_registry.cpp): the shapes file's prefill workloads
/// (attention_prefill_problems), 512 reference rows, tolerance(dtype), and a Session per problem.
TunerFamily tuner_family();

}  // namespace attn
}  // namespace kt
