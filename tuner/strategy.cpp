#include "tuner/strategy.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace kt {

void check_strategy(const std::string& strategy) {
  if (strategy != "fast" && strategy != "exhaustive" && strategy != "halving")
    throw std::invalid_argument("unknown --strategy '" + strategy + "': use fast, exhaustive or halving");
}

Rounds rounds_for(const std::string& strategy, size_t candidates, double budget_ms) {
  check_strategy(strategy);
  Rounds r;
  r.first_budget_ms = budget_ms;
  if (strategy == "halving" && candidates > 4) {
    r.two_rounds = true;
    r.first_budget_ms = std::max(5.0, budget_ms / 4);
    r.keep = std::max<size_t>(1, (candidates + 3) / 4);
  } else if (strategy == "fast" && candidates > kFastKeep) {
    r.two_rounds = true;
    r.first_budget_ms = std::max(2.0, budget_ms / 8);
    r.keep = kFastKeep;
  }
  return r;
}

bool refines_leader(const std::string& strategy) {
  check_strategy(strategy);
  return strategy != "exhaustive";
}

std::vector<size_t> refine_leaders(const std::vector<double>& medians_us) {
  std::vector<size_t> order;
  for (size_t i = 0; i < medians_us.size(); ++i)
    if (std::isfinite(medians_us[i]) && medians_us[i] > 0) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return medians_us[a] < medians_us[b]; });
  std::vector<size_t> leaders;
  for (size_t i : order) {
    if (leaders.size() == kRefineLeaders) break;
    if (!leaders.empty() && medians_us[i] > kRefineWithin * medians_us[leaders.front()]) break;
    leaders.push_back(i);
  }
  return leaders;
}

std::vector<std::vector<size_t>> final_pass_orders(size_t finalists) {
  std::vector<size_t> x(finalists), y(finalists);
  for (size_t i = 0; i < finalists; ++i) x[i] = i;
  if (finalists == 3) y = {0, 2, 1};
  else
    for (size_t i = 0; i < finalists; ++i) y[i] = finalists >= 4 ? (i + finalists / 2) % finalists : i;
  std::vector<size_t> rx(x.rbegin(), x.rend()), ry(y.rbegin(), y.rend());
  return {x, y, rx, ry};
}

double default_budget_ms(const std::string& strategy) {
  check_strategy(strategy);
  return strategy == "fast" ? 40 : 100;
}

int default_max_candidates(const std::string& strategy, bool compile_only) {
  check_strategy(strategy);
  return strategy == "fast" && !compile_only ? kFastCandidates : 0;
}

}  // namespace kt
