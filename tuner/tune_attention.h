// Tuning one attention_prefill problem: verify every compiled candidate against the float64
// reference, time the ones that pass, pick the winner by median with a deterministic tie-break.
#pragma once
#include <cuda.h>

#include <string>
#include <vector>

#include "generator/attention_family.h"
#include "tuner/attention_harness.h"
#include "tuner/timing.h"

namespace kt {
namespace attn {

/// Outcome of a candidate, stored as data (DESIGN.md "Measuring").
enum class Status { ok, compile_failed, launch_failed, wrong_result };
const char* status_name(Status s);

struct Candidate {
  Config config{};
  std::string variant;
  Status status = Status::ok;
  std::string error;
  CompileReport report;
  Verdict verdict;
  Timing timing;
  int smem_bytes = 0;
};

struct TuneOptions {
  double budget_ms = 100;    ///< measured GPU time per candidate
  size_t ref_rows = 512;     ///< reference rows checked per problem
  uint64_t seed = 1;
  size_t l2_bytes = 50u << 20;  ///< rotating input sets together exceed 3x this (cold L2)
  float softmax_scale = 0;   ///< <= 0: 1/sqrt(head_dim)
};

struct TuneResult {
  Problem problem;
  std::vector<Candidate> candidates;
  int winner = -1;         ///< index into candidates, -1 if none passed
  int default_index = -1;  ///< the family default config's candidate, -1 if absent
};

/// Tunes `p` over `compiled` (one CompileResult per config, same order as `configs`) on the current
/// context. A candidate whose launch fails is recorded as launch_failed (a fault that poisons the
/// context is rethrown: issue 3's worker processes isolate those).
TuneResult tune_problem(const Problem& p, ArchId arch, const std::vector<Config>& configs,
                        const std::vector<const CompileResult*>& compiled, const TuneOptions& opt, CUstream stream);

/// Index of the fastest ok candidate by median; candidates within 1% of the best median are a tie,
/// broken by fewer registers, then less shared memory, then variant name. -1 if none is ok.
int pick_winner(const std::vector<Candidate>& c);

}  // namespace attn
}  // namespace kt
