#include "tuner/problem_rounds.h"

#include <algorithm>
#include <utility>

namespace kt {

namespace {

/// A first-round result kept for the final round.
struct Measured {
  const nlohmann::json* config;
  const std::string* variant;
  const CompileResult* cr;
  WorkerResult wr;
  size_t c;  // the item's candidate (refinement siblings: their leader's)
};

bool by_time(const Measured& x, const Measured& y) { return x.wr.median_us < y.wr.median_us; }

/// The final round: the finalists at the full budget as kFinalPasses passes of a fraction of it, in the orders of
/// final_pass_orders (an SM clock that drifts over the round reaches each finalist alike, a short dip at most one
/// pass of each), each stored as one row of its passes (merge_passes). The other candidates' first-round rows are
/// stored first, screened: they ran slower than the finalists alongside them, and a clock that fell between the rounds
/// must not let such a row overrule the final round (the winners view sets them aside). A finalist whose pass fails
/// runs no more passes; what a stop leaves unmeasured keeps the row it has (the passes taken, else the first round's).
void final_round(std::vector<Measured>& round, size_t keep, double budget_ms, const RoundsHost& host) {
  std::stable_sort(round.begin(), round.end(), by_time);
  const size_t finalists = std::min(keep, round.size());
  for (size_t k = finalists; k < round.size(); ++k)
    host.record(*round[k].config, *round[k].variant, *round[k].cr, &round[k].wr, true);
  std::vector<std::vector<WorkerResult>> passes(finalists);
  std::vector<char> failed(finalists, 0);
  for (const auto& order : final_pass_orders(finalists))
    for (size_t k : order) {
      if (host.stop()) break;
      if (failed[k]) continue;
      passes[k].push_back(host.measure(*round[k].config, *round[k].variant, *round[k].cr, budget_ms / kFinalPasses));
      failed[k] = passes[k].back().status != db::Status::ok;
    }
  for (size_t k = 0; k < finalists; ++k) {
    if (passes[k].empty()) {
      host.record(*round[k].config, *round[k].variant, *round[k].cr, &round[k].wr, false);
      continue;
    }
    const WorkerResult merged = merge_passes(passes[k]);
    host.record(*round[k].config, *round[k].variant, *round[k].cr, &merged, false);
  }
}

}  // namespace

void measure_rounds(const WorkItem& it, const std::vector<size_t>& cands, const Rounds& rounds, double budget_ms,
                    const RoundsHost& host) {
  std::vector<Measured> round;
  // One first-round measurement (a failure is stored at once; false: the compiler or the run was stopped).
  auto first = [&](const nlohmann::json& config, const std::string& variant, size_t source, size_t c) {
    if (host.stop()) return false;
    const CompileResult* cr = host.wait(source);
    if (host.stop() || !cr) return false;
    host.step(variant);
    if (!cr->ok) {
      host.record(config, variant, *cr, nullptr, false);
      return true;
    }
    auto wr = host.measure(config, variant, *cr, rounds.first_budget_ms);
    if (rounds.two_rounds && wr.status == db::Status::ok) round.push_back({&config, &variant, cr, wr, c});
    else host.record(config, variant, *cr, &wr, false);
    return true;
  };
  for (size_t c : cands)
    if (!first(it.configs[c], it.variants[c], it.source[c], c)) break;
  // Refinement (two-round strategies, named problems): the pipeline-depth siblings that the --max-candidates prefix
  // cut off (WorkItem::siblings) of the first round's leaders (refine_leaders: the fastest and a runner-up within
  // 5%), unless measured already, at the first budget too. The depth that suits a tile differs between GPUs and sizes
  // more than the candidate order can know.
  if (rounds.two_rounds && !host.stop() && !round.empty() && it.transfer_from.empty()) {
    std::vector<double> medians;
    for (const auto& r : round) medians.push_back(r.wr.median_us);
    std::vector<size_t> leads;  // the leaders' listed candidates, fastest first
    for (size_t k : refine_leaders(medians)) leads.push_back(round[k].c);
    std::set<std::string> done = host.measured_already();
    std::vector<std::pair<const WorkItem::Reserve*, size_t>> sibs;  // (sibling, its leader's candidate)
    for (size_t c : leads)
      if (c < it.siblings.size())
        for (const auto& r : it.siblings[c])
          if (done.insert(r.variant).second) {
            host.request(r.source);  // compiled together, on the queue's threads
            sibs.emplace_back(&r, c);
          }
    if (!sibs.empty()) host.add_planned(sibs.size());
    for (const auto& [r, c] : sibs)
      if (!first(r->config, r->variant, r->source, c)) break;
  }
  if (!rounds.two_rounds || host.stop()) {
    for (const auto& r : round) host.record(*r.config, *r.variant, *r.cr, &r.wr, false);  // never lost
    return;
  }
  final_round(round, rounds.keep, budget_ms, host);
}

}  // namespace kt
