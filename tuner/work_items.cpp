#include "tuner/work_items.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <stdexcept>

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

WorkPlan build_work(const std::vector<ProblemRef>& problems, ArchId arch, const DeviceModel& device,
                    const WorkOptions& options) {
  WorkPlan plan;
  std::map<std::string, size_t> index;  // family + name expression -> sources index (one binary per expression)
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
    WorkItem it{f.name(), f.problem_key(p), p, f.flops(p), f.min_bytes(p), {}, {}, {}, ""};
    auto valid = f.enumerate(p, arch, device);
    const auto def = f.default_config(p, arch);
    std::stable_partition(valid.begin(), valid.end(), [&](const auto& c) { return f.same_config(c, def); });
    if (options.keep)
      valid.erase(std::remove_if(valid.begin(), valid.end(),
                                 [&](const auto& c) {
                                   return !f.same_config(c, def) && !options.keep(f.variant_name(p, c, arch));
                                 }),
                  valid.end());
    if (options.max_candidates > 0 && int(valid.size()) > options.max_candidates)
      valid.resize(size_t(options.max_candidates));
    it.default_variant = f.variant_name(p, def, arch);
    for (const auto& c : valid) {
      KernelSource src = f.kernel_source(p, c, arch);
      it.variants.push_back(src.variant_name);
      it.configs.push_back(c);
      it.source.push_back(add_source(std::move(src)));
    }
    plan.items.push_back(std::move(it));
  }
  return plan;
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
    for (size_t c = 0; c < it.variants.size(); ++c) {
      if (shard_of(it.family, it.key, it.variants[c], count) != index) continue;
      auto [pos, added] = kept_source.emplace(it.source[c], out.sources.size());
      if (added) out.sources.push_back(plan.sources[it.source[c]]);
      k.configs.push_back(it.configs[c]);
      k.variants.push_back(it.variants[c]);
      k.source.push_back(pos->second);
    }
    if (!k.variants.empty()) out.items.push_back(std::move(k));
  }
  return out;
}

}  // namespace kt
