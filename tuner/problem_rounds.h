// One problem's measuring rounds under a strategy (tuner/strategy.h): the first round over the listed candidates, the
// refinement of its leaders over their pipeline-depth siblings, and the final round of the fastest. autotune runs it
// once per problem on the GPU that took the problem; everything it touches outside (the compile queue, the worker,
// the database, the progress line) comes in through RoundsHost, so the order of measurements and rows is testable
// without a GPU.
#pragma once
#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "generator/compiler.h"
#include "tuner/strategy.h"
#include "tuner/work_items.h"
#include "tuner/worker.h"

namespace kt {

/// What measure_rounds needs from the run. Every member must be set.
struct RoundsHost {
  /// True once nothing more may be measured (an interrupt, --time-budget spent).
  std::function<bool()> stop;
  /// The compiled binary of source `source` (waiting for it), or nullptr when the compiler was stopped.
  std::function<const CompileResult*(size_t source)> wait;
  /// Ask the compile queue for a source outside the plan (a refinement sibling's binary).
  std::function<void(size_t source)> request;
  /// One measurement of a compiled candidate at `budget_ms` on this problem's worker.
  std::function<WorkerResult(const nlohmann::json& config, const std::string& variant, const CompileResult& cr,
                             double budget_ms)>
      measure;
  /// Store one candidate's row: `wr` is null for a compile failure; `screened` marks a first-round row that the
  /// final round left out (db::Measurement::screened).
  std::function<void(const nlohmann::json& config, const std::string& variant, const CompileResult& cr,
                     const WorkerResult* wr, bool screened)>
      record;
  /// The variants of this problem the database already holds for this device class (skipped by the refinement).
  std::function<std::set<std::string>()> measured_already;
  /// Progress: one candidate is about to be measured; `more` candidates were added to the plan.
  std::function<void(const std::string& variant)> step;
  std::function<void(size_t more)> add_planned;
};

/// Measures candidates `cands` (indices into it.configs, in order) of work item `it` under `rounds`, with a full budget
/// of `budget_ms` per candidate:
///   - first round: each candidate at rounds.first_budget_ms, in order; a compile failure or a failed measurement is
///     stored at once, and so is every result when the strategy has one round;
///   - refinement (two rounds, a named problem: it.transfer_from empty): the depth siblings (it.siblings) of the first
///     round's leaders (refine_leaders), not measured already, requested from the compiler and measured at the first
///     budget as well;
///   - final round: the rounds.keep fastest at the full budget as kFinalPasses passes of a fraction of it, in the
///     orders of final_pass_orders, each stored as one row (merge_passes); the other first-round results are stored
///     first, screened. A stop keeps every result taken so far: a finalist stores the passes it has, one without a
///     pass its first-round row.
/// Stops early, storing what it has, once host.stop() is true or host.wait() returns nullptr.
void measure_rounds(const WorkItem& it, const std::vector<size_t>& cands, const Rounds& rounds, double budget_ms,
                    const RoundsHost& host);

}  // namespace kt
