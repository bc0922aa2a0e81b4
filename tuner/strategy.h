// How the tuner spends its GPU time on one problem's candidates: the strategies of `autotune --strategy`.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace kt {

/// Candidates per problem the fast strategy measures when --max-candidates is not given: the first ones of the
/// family's candidate order (generator/<family>_family.cpp ranks them; the default config is always first).
constexpr int kFastCandidates = 16;
/// How many of the first round's fastest candidates the fast strategy measures again at the full budget.
constexpr size_t kFastKeep = 3;
/// The two-round strategies refine at most this many first-round leaders over their pipeline-depth siblings...
constexpr size_t kRefineLeaders = 2;
/// ...each after the fastest only when its first-round median is within this factor of the fastest's.
constexpr double kRefineWithin = 1.05;

/// The final round times each finalist in this many passes of budget / kFinalPasses (final_pass_orders).
constexpr size_t kFinalPasses = 4;

/// The strategies `autotune --strategy` knows: fast, exhaustive, halving. Throws std::invalid_argument naming
/// `strategy` and the known ones when it is none of these; every function below checks its argument with it.
void check_strategy(const std::string& strategy);

/// The measuring rounds of one problem: every candidate at `first_budget_ms`, then, when `two_rounds`, the `keep`
/// fastest of them again at the full budget, as kFinalPasses passes at a fraction of it in the orders of
/// final_pass_orders (stored as one row, worker.h merge_passes); the others keep their first-round row, which the
/// database ranks like any other.
struct Rounds {
  bool two_rounds = false;
  double first_budget_ms = 0;
  size_t keep = 0;
};

/// The rounds of `strategy` for `candidates` candidates at a full budget of `budget_ms` (with two rounds, autotune
/// adds the pipeline-depth siblings of the first round's leaders that --max-candidates cut off to the first round:
/// refine_leaders, WorkItem::siblings):
///   exhaustive: one round at the full budget;
///   halving:    with more than 4 candidates, all at max(5, budget / 4) ms, the best quarter (rounded up) again;
///   fast:       with more than kFastKeep candidates, all at max(2, budget / 8) ms, the best kFastKeep again.
/// Throws std::invalid_argument naming the strategy when it is none of these.
Rounds rounds_for(const std::string& strategy, size_t candidates, double budget_ms);

/// The orders of the final round's kFinalPasses passes over `finalists` finalists (indices 0..finalists-1): X, Y,
/// X reversed, Y reversed, with X the finalists in order and Y another order (X rotated by finalists / 2 from 4
/// finalists on; 0 2 1 for 3). Each finalist's four positions in the round then sum to the same number, so an SM
/// clock that drifts linearly over the round adds the same to every finalist's mean of passes; and from 3 finalists on
/// no finalist runs two passes back to back, so a dip of the clock shorter than a pass reaches at most one pass of
/// each, which the median of the passes (merge_passes) then sets aside. (2 finalists: A B, A B, B A, B A.)
std::vector<std::vector<size_t>> final_pass_orders(size_t finalists);

/// Whether `strategy` refines each problem's first-round leaders over their pipeline-depth siblings that
/// --max-candidates cut off (the two-round strategies: fast and halving). Throws std::invalid_argument for an unknown
/// strategy.
bool refines_leader(const std::string& strategy);

/// The first-round leaders a two-round strategy refines, as indices into `medians_us` (the first round's medians,
/// microseconds), fastest first: the fastest, then up to kRefineLeaders - 1 more in order of time whose median is at
/// most kRefineWithin times the fastest's. Two leaders rather than one because the depth that suits a tile differs
/// between problems more than a first round at 1/8 of the budget can rank the tiles: a runner-up tile within 5% whose
/// better depth the prefix cut off is then still found (the exhaustive qwen7b.json sweep: int8_kb64 M 1024, 1.057x
/// with the leader's siblings alone, 1.000x with both). Empty for no medians; a median that is not a positive finite
/// number never leads.
std::vector<size_t> refine_leaders(const std::vector<double>& medians_us);

/// The full budget per candidate, ms, when --budget-ms is not given: 40 for fast (its first round already ranks the
/// candidates), 100 for exhaustive and halving. Throws std::invalid_argument for an unknown strategy.
double default_budget_ms(const std::string& strategy);

/// Candidates per problem when --max-candidates is not given: kFastCandidates for fast, 0 (all) for exhaustive and
/// halving, and 0 with --compile-only whatever the strategy (it compiles what any later run may measure). Throws
/// std::invalid_argument for an unknown strategy.
int default_max_candidates(const std::string& strategy, bool compile_only);

}  // namespace kt
