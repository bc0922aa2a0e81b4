// A family-neutral measuring session: one problem's inputs, reference and buffers, measuring candidates.
#pragma once
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cache/tuning_db.h"
#include "runtime/loaded_kernel.h"
#include "tuner/timing.h"

namespace kt {

/// Result of measuring one candidate: ok (timed) or wrong_result (failed verification, not timed).
struct Outcome {
  db::Status status = db::Status::ok;
  std::string error;
  double rel_err = -1;
  Timing timing;
  double check_ms = 0;  ///< wall time of the check (poison, launch, download, verify), ms
  double time_ms = 0;   ///< wall time of the timing (input copies for the cold L2 included), ms
};

class MeasureSession {
 public:
  virtual ~MeasureSession() = default;
  /// Verifies the candidate (outputs poisoned with NaN first) and, if it passes, times it for budget_ms.
  /// Throws cuda::CudaError if a launch faults.
  virtual Outcome measure(const LoadedKernel& kernel, const nlohmann::json& config, CUstream stream,
                          double budget_ms) = 0;
};

/// The measuring rule every family's session follows: `check()` poisons the outputs, launches the candidate once,
/// synchronizes and returns its verdict (any type with `pass`, `rel_l2` and `message`). A failing candidate is
/// wrong_result and is never timed; a passing one is timed over budget_ms with `timed()`'s launch function
/// (time_launches: launch n of the timing loop, inputs rotated by the caller to defeat the L2) after a warm-up of
/// min(20 ms, budget_ms / 2): a short first round of a strategy is not spent mostly warming up.
template <class Check, class Timed>
Outcome verify_then_time(CUstream stream, double budget_ms, Check&& check, Timed&& timed) {
  const double warmup_ms = std::min(20.0, budget_ms / 2);
  Outcome out;
  const auto t0 = std::chrono::steady_clock::now();
  const auto verdict = check();
  const auto t1 = std::chrono::steady_clock::now();
  out.check_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  out.rel_err = verdict.rel_l2;
  if (!verdict.pass) {
    out.status = db::Status::wrong_result;
    out.error = verdict.message;
    return out;
  }
  out.timing = time_launches(timed(), stream, budget_ms, warmup_ms);
  out.time_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  return out;
}

/// Creates the session for a family ("attention_prefill", "qkv_proj") from the problem JSON.
/// Requires a current context. Throws ProblemError / std::invalid_argument for unknown families or problems.
std::unique_ptr<MeasureSession> make_session(const std::string& family, const nlohmann::json& problem, uint64_t seed,
                                             size_t ref_rows, size_t l2_bytes);

}  // namespace kt
