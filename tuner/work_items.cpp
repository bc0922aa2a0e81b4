#include "tuner/work_items.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

#include "generator/registry.h"

namespace kt {

std::vector<ProblemRef> collect_problems(const ShapesFile& shapes, std::vector<std::string>& families) {
  for (const auto& name : families) find_tuner_family(name);  // unknown names fail before any work
  const bool all = families.empty();
  std::vector<ProblemRef> out;
  for (const auto& tf : tuner_families()) {
    const std::string& name = tf.family->name();
    if (!all && std::find(families.begin(), families.end(), name) == families.end()) continue;
    const auto ps = tf.problems(shapes);
    if (all && !ps.empty()) families.push_back(name);
    for (const auto& p : ps) out.push_back({&tf, p});
  }
  return out;
}

std::vector<ProblemRef> bucket_grid(const std::vector<ProblemRef>& named) {
  // Named problems by (family, class), in first-seen order.
  std::vector<std::pair<std::string, std::vector<const ProblemRef*>>> classes;
  for (const auto& pr : named) {
    if (!pr.transfer_from.empty()) continue;
    const std::string id = pr.family->family->name() + "|" + pr.family->family->class_key(pr.problem);
    auto it = std::find_if(classes.begin(), classes.end(), [&](const auto& c) { return c.first == id; });
    if (it == classes.end()) classes.push_back({id, {&pr}});
    else it->second.push_back(&pr);
  }
  std::vector<ProblemRef> out;
  for (const auto& [id, members] : classes) {
    const Family& f = *members.front()->family->family;
    auto sizes_of = [&](const ProblemRef* pr) {
      std::vector<long long> s;
      for (const auto& [name, x] : f.bucket_sizes(pr->problem)) s.push_back(x);
      return s;
    };
    const size_t axes = sizes_of(members.front()).size();
    // Tie groups: an axis joins an earlier one when every named problem has equal sizes on both.
    std::vector<size_t> group(axes);
    size_t groups = 0;
    std::vector<size_t> lead;  // first axis of each group
    for (size_t a = 0; a < axes; ++a) {
      group[a] = groups;
      for (size_t g = 0; g < lead.size(); ++g)
        if (std::all_of(members.begin(), members.end(),
                        [&](const ProblemRef* pr) { return sizes_of(pr)[a] == sizes_of(pr)[lead[g]]; })) {
          group[a] = g;
          break;
        }
      if (group[a] == groups) {
        lead.push_back(a);
        ++groups;
      }
    }
    // Bucket range per group, and the bucket tuples the named problems hold.
    std::vector<int> lo(groups, 1 << 30), hi(groups, -1);
    std::set<std::vector<int>> held;
    std::vector<std::vector<int>> member_buckets;
    for (const auto* pr : members) {
      const auto s = sizes_of(pr);
      std::vector<int> b(groups);
      for (size_t g = 0; g < groups; ++g) {
        b[g] = size_bucket(s[lead[g]]);
        lo[g] = std::min(lo[g], b[g]);
        hi[g] = std::max(hi[g], b[g]);
      }
      held.insert(b);
      member_buckets.push_back(b);
    }
    // Every bucket tuple of the ranges' product, in lexicographic order.
    std::vector<int> point(lo);
    while (true) {
      if (!held.count(point)) {
        // The named problem nearest in buckets (then the earlier one) lends the other fields.
        size_t base = 0;
        int best = 1 << 30;
        for (size_t m = 0; m < members.size(); ++m) {
          int d = 0;
          for (size_t g = 0; g < groups; ++g) d += std::abs(member_buckets[m][g] - point[g]);
          if (d < best) best = d, base = m;
        }
        std::vector<long long> sizes(axes);
        for (size_t a = 0; a < axes; ++a) sizes[a] = 1ll << point[group[a]];
        try {
          ProblemRef grid{members[base]->family, f.with_bucket_sizes(members[base]->problem, sizes), {}};
          std::vector<std::pair<std::tuple<long long, long long, std::string>, std::string>> near;
          for (const auto* pr : members) {
            const Nearness n = f.nearness(grid.problem, pr->problem);
            const std::string key = f.problem_key(pr->problem);
            near.push_back({{std::llround(n.distance * 1e9), std::llround(n.tie * 1e9), key}, key});
          }
          std::sort(near.begin(), near.end());
          for (size_t k = 0; k < near.size() && k < size_t(kGridNeighbours); ++k)
            grid.transfer_from.push_back(near[k].second);
          out.push_back(std::move(grid));
        } catch (const ProblemError&) {
          // a size the family refuses here (e.g. a grid too large): no grid problem in this bucket
        }
      }
      size_t g = 0;
      while (g < groups && point[g] == hi[g]) point[g] = lo[g], ++g;
      if (g == groups) break;
      ++point[g];
    }
  }
  return out;
}

std::set<std::string> grid_candidates(const std::string& default_variant,
                                      const std::vector<std::vector<db::Measurement>>& neighbours) {
  std::set<std::string> keep = {default_variant};
  for (const auto& rows : neighbours) {
    // variant -> (screened, its smallest ok median): a screened row lost its final round, so it ranks after every
    // unscreened one (db::Measurement::screened), as in the winners view.
    std::map<std::string, std::pair<bool, double>> best;
    for (const auto& m : rows) {
      if (m.status != db::Status::ok) continue;
      const std::pair<bool, double> e{m.screened, m.median_us};
      if (const auto it = best.find(m.variant_name); it == best.end() || e < it->second) best[m.variant_name] = e;
    }
    std::vector<std::tuple<bool, double, std::string>> order;
    for (const auto& [v, e] : best) order.push_back({e.first, e.second, v});
    std::sort(order.begin(), order.end());
    for (size_t k = 0; k < order.size() && k < size_t(kGridTransfer); ++k) keep.insert(std::get<2>(order[k]));
  }
  return keep;
}

namespace {
/// depth_siblings on flattened configs (JSON pointer -> leaf).
bool flat_depth_siblings(const nlohmann::json& fa, const nlohmann::json& fb) {
  if (fa.size() != fb.size()) return false;
  int differ = 0;
  bool depth = false;
  for (auto x = fa.begin(); x != fa.end(); ++x) {
    const auto y = fb.find(x.key());
    if (y == fb.end()) return false;
    if (*x == *y) continue;
    ++differ;
    const std::string& k = x.key();  // a JSON pointer: "/wgmma_ws/stages", "/stages"
    depth = k.size() >= 7 && k.compare(k.size() - 7, 7, "/stages") == 0;
  }
  return differ == 1 && depth;
}
}  // namespace

bool depth_siblings(const nlohmann::json& a, const nlohmann::json& b) {
  return a.is_object() && b.is_object() && flat_depth_siblings(a.flatten(), b.flatten());
}

WorkPlan build_work(const std::vector<ProblemRef>& problems, ArchId arch, const DeviceModel& device,
                    const WorkOptions& options) {
  WorkPlan plan;
  std::map<std::string, size_t> index;  // family + name expression -> sources index (one binary per expression)
  std::map<std::string, std::vector<std::string>> variants_of;  // family + problem key -> its candidates' names
  auto add_source = [&](KernelSource src) {
    const std::string id = src.family + "|" + src.name_expression;
    auto it = index.find(id);
    if (it != index.end()) return it->second;
    index.emplace(id, plan.sources.size());
    plan.sources.push_back(std::move(src));
    return plan.sources.size() - 1;
  };
  for (const auto& pr : problems) {
    const Family& f = *pr.family->family;
    const auto& p = pr.problem;
    WorkItem it{f.name(), f.problem_key(p), p, f.flops(p), f.min_bytes(p), {}, {}, {}, "", pr.transfer_from};
    auto valid = f.enumerate(p, arch, device);
    const auto def = f.default_config(p, arch);
    std::stable_partition(valid.begin(), valid.end(), [&](const auto& c) { return f.same_config(c, def); });
    if (options.keep)
      valid.erase(std::remove_if(valid.begin(), valid.end(),
                                 [&](const auto& c) {
                                   return !f.same_config(c, def) && !options.keep(f.variant_name(p, c, arch));
                                 }),
                  valid.end());
    if (!pr.transfer_from.empty()) {  // a grid problem: what its neighbours measure, and its default
      std::set<std::string> theirs;
      for (const auto& key : pr.transfer_from)
        if (const auto n = variants_of.find(f.name() + "|" + key); n != variants_of.end())
          theirs.insert(n->second.begin(), n->second.end());
      valid.erase(std::remove_if(valid.begin(), valid.end(),
                                 [&](const auto& c) {
                                   return !f.same_config(c, def) && !theirs.count(f.variant_name(p, c, arch));
                                 }),
                  valid.end());
    }
    std::vector<nlohmann::json> cut, cut_flat;  // what the prefix leaves out (siblings wanted: flattened once)
    if (options.max_candidates > 0 && int(valid.size()) > options.max_candidates) {
      cut.assign(valid.begin() + options.max_candidates, valid.end());
      valid.resize(size_t(options.max_candidates));
      if (options.depth_siblings && pr.transfer_from.empty())
        for (const auto& x : cut) cut_flat.push_back(x.is_object() ? x.flatten() : nlohmann::json());
    }
    it.default_variant = f.variant_name(p, def, arch);
    for (const auto& c : valid) {
      KernelSource src = f.kernel_source(p, c, arch);
      it.variants.push_back(src.variant_name);
      it.configs.push_back(c);
      it.source.push_back(add_source(std::move(src)));
      it.siblings.emplace_back();
      if (cut_flat.empty() || !c.is_object()) continue;
      const nlohmann::json cf = c.flatten();
      for (size_t x = 0; x < cut.size(); ++x)
        if (flat_depth_siblings(cf, cut_flat[x])) {
          KernelSource xs = f.kernel_source(p, cut[x], arch);
          WorkItem::Reserve r{cut[x], xs.variant_name, 0};
          r.source = add_source(std::move(xs));
          it.siblings.back().push_back(std::move(r));
        }
    }
    variants_of[it.family + "|" + it.key] = it.variants;
    plan.items.push_back(std::move(it));
  }
  return plan;
}

std::vector<ProblemRef> select_problems(std::vector<ProblemRef> problems,
                                        const std::function<bool(const std::string& key)>& keep,
                                        const std::string& what) {
  const size_t all = problems.size();
  problems.erase(std::remove_if(problems.begin(), problems.end(),
                                [&](const ProblemRef& p) { return !keep(p.family->family->problem_key(p.problem)); }),
                 problems.end());
  if (problems.empty())
    throw std::invalid_argument(what + " matches none of the " + std::to_string(all) +
                                " problems (autotune --list-candidates prints their keys)");
  return problems;
}

int shard_of(const std::string& family, const std::string& problem_key, const std::string& variant, int count) {
  if (count < 1) throw std::invalid_argument("shard count must be >= 1, got " + std::to_string(count));
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a, 64-bit
  for (const std::string* part : {&family, &problem_key, &variant}) {
    for (unsigned char c : *part) h = (h ^ c) * 0x100000001B3ull;
    h = (h ^ '\n') * 0x100000001B3ull;
  }
  return int(h % uint64_t(count));
}

WorkPlan shard_work(const WorkPlan& plan, int index, int count) {
  if (count < 1 || index < 0 || index >= count)
    throw std::invalid_argument("--shard " + std::to_string(index) + "/" + std::to_string(count) +
                                ": the index must be in [0, count) and count >= 1 (e.g. 0/4 .. 3/4)");
  WorkPlan out;
  std::map<size_t, size_t> kept_source;  // plan.sources index -> out.sources index
  for (const auto& it : plan.items) {
    WorkItem k = it;
    k.configs.clear();
    k.variants.clear();
    k.source.clear();
    k.siblings.clear();  // a shard measures exactly its pairs: no refinement beyond them
    for (size_t c = 0; c < it.variants.size(); ++c) {
      if (shard_of(it.family, it.key, it.variants[c], count) != index) continue;
      auto [pos, added] = kept_source.emplace(it.source[c], out.sources.size());
      if (added) out.sources.push_back(plan.sources[it.source[c]]);
      k.configs.push_back(it.configs[c]);
      k.variants.push_back(it.variants[c]);
      k.source.push_back(pos->second);
      k.siblings.emplace_back();
    }
    if (!k.variants.empty()) out.items.push_back(std::move(k));
  }
  return out;
}

}  // namespace kt
