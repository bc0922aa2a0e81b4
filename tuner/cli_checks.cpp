#include "tuner/cli_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "generator/arch.h"
#include "generator/registry.h"
#include "tuner/strategy.h"
#include "tuner/tuner_registry.h"

namespace kt::cli {
namespace {

std::string num(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

// A file the run will write: not a directory, and its folder exists.
void check_output_path(const std::string& option, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw CliError(option + " '" + path + "' is a directory; give a file name");
  const fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) return;
  if (!fs::exists(parent, ec))
    throw CliError(option + " '" + path + "': folder '" + parent.string() + "' does not exist");
  if (!fs::is_directory(parent, ec))
    throw CliError(option + " '" + path + "': '" + parent.string() + "' is not a folder");
}

std::string supported_list() {
  std::string s;
  for (const auto& a : supported_archs()) s += (s.empty() ? "" : ", ") + a;
  return s;
}

}  // namespace

void check_tune_options(const TuneOptions& o) {
  try {
    check_strategy(o.strategy);
  } catch (const std::invalid_argument& e) {
    throw CliError(e.what());
  }
  if (!std::isfinite(o.budget_ms) || o.budget_ms <= 0 || o.budget_ms > kMaxBudgetMs)
    throw CliError("--budget-ms must be a number of milliseconds in (0, " + num(kMaxBudgetMs) + "], got " +
                   num(o.budget_ms));
  if (!std::isfinite(o.watchdog_s) || o.watchdog_s <= 0 || o.watchdog_s > kMaxWatchdogS)
    throw CliError("--watchdog-s must be a number of seconds in (0, " + num(kMaxWatchdogS) + "], got " +
                   num(o.watchdog_s));
  if (!o.compile_only && o.budget_ms / 1000 >= o.watchdog_s)
    throw CliError("--budget-ms " + num(o.budget_ms) + " is not below --watchdog-s " + num(o.watchdog_s) + " (" +
                   num(o.budget_ms / 1000) + " s): every candidate would be killed as timed out");
  if (!std::isfinite(o.time_budget_s) || o.time_budget_s < 0)
    throw CliError("--time-budget must be a number of seconds >= 0 (0 = none), got " + num(o.time_budget_s));
  if (o.compile_only && o.time_budget_s > 0)
    throw CliError("--time-budget has no effect with --compile-only (nothing is measured)");
  if (o.max_candidates < 0)
    throw CliError("--max-candidates must be >= 0 (0 = all candidates), got " + std::to_string(o.max_candidates));
  if (o.jobs < 0 || o.jobs > kMaxJobs)
    throw CliError("--jobs must be in [0, " + std::to_string(kMaxJobs) + "] (0 = all hardware threads), got " +
                   std::to_string(o.jobs));
  if (o.compile_only && o.retune) throw CliError("--retune has no effect with --compile-only (nothing is measured)");
  if (o.compile_only && o.strategy_given)
    throw CliError("--strategy has no effect with --compile-only (nothing is measured)");
  if (o.compile_only && !o.devices.empty())
    throw CliError("--devices has no effect with --compile-only (nothing is measured)");
  if (!o.devices.empty()) parse_devices(o.devices, 1 << 12);  // the form now; the ordinals against the machine later
  if (o.no_cache && o.cache_dir_given)
    throw CliError("--no-cache and --cache-dir contradict each other: give one of them");
  if (o.compile_only && o.arch.empty())
    throw CliError("--compile-only needs --arch (there is no GPU to take it from): one of " + supported_list());
  if (o.db == ":memory:" || o.db.rfind("file:", 0) == 0)
    throw CliError("--db '" + o.db +
                   "' is not a file: the worker processes and later runs could not see it; give a file name");
  if (!o.db.empty()) check_output_path("--db", o.db);
  if (!o.json_out.empty()) check_output_path("--json", o.json_out);
}

std::vector<std::string> check_families(const ShapesFile& shapes, const std::vector<std::string>& families) {
  // Workload counts per family come from the tuner registry (each family reads its own problems from the file);
  // workloads the file names for a family that is not registered yet are listed by the shapes file itself.
  struct Kind {
    std::string family;
    size_t count;
    bool registered;
  };
  std::vector<Kind> kinds;
  for (const auto& tf : tuner_families()) kinds.push_back({tf.family->name(), tf.problems(shapes).size(), true});
  for (const auto& [name, count] : shapes.workload_counts()) {
    const bool known = std::any_of(kinds.begin(), kinds.end(), [&](const Kind& k) { return k.family == name; });
    if (!known) kinds.push_back({name, count, false});
  }
  std::vector<std::string> warnings;
  if (!families.empty()) {
    for (const auto& f : families) {
      try {
        find_tuner_family(f);
      } catch (const std::invalid_argument& e) {
        throw CliError(e.what());
      }
      for (const auto& k : kinds)
        if (f == k.family && k.count == 0)
          throw CliError("--families " + f + ": " + shapes.source + " has no " + f + " workloads");
    }
    return warnings;
  }
  size_t tunable = 0;
  std::string present;
  for (const auto& k : kinds) {
    if (k.count == 0) continue;
    present += (present.empty() ? "" : ", ") + k.family;
    if (k.registered) {
      tunable += k.count;
    } else {
      warnings.push_back(shapes.source + ": its " + std::to_string(k.count) + " " + k.family +
                         " workload(s) are skipped: the " + k.family + " family is not implemented yet");
    }
  }
  if (tunable == 0)
    throw CliError(shapes.source + " has only " + present +
                   " workloads, and no family that can tune them is implemented yet: nothing to tune");
  return warnings;
}

std::string arch_for_gpu(const std::string& gpu_name, int cc_major, int cc_minor) {
  std::string arch = "sm_" + std::to_string(cc_major) + std::to_string(cc_minor);
  if (arch == "sm_90") arch = "sm_90a";
  const auto& s = supported_archs();
  if (std::find(s.begin(), s.end(), arch) == s.end())
    throw CliError("the GPU found, " + gpu_name + " (compute capability " + std::to_string(cc_major) + "." +
                   std::to_string(cc_minor) + "), has no kerntune kernels: supported are " + supported_list() +
                   " (--compile-only --arch ... builds for one of them without running)");
  return arch;
}

std::string compile_estimate(size_t binaries, int threads) {
  const double s = double(binaries) * kCompileSecondsPerBinary / std::max(1, threads);
  char b[64];
  if (s < 90) std::snprintf(b, sizeof b, "about %.0f s", std::max(1.0, s));
  else if (s < 5400) std::snprintf(b, sizeof b, "about %.0f min", s / 60);
  else std::snprintf(b, sizeof b, "about %.1f h", s / 3600);
  return b;
}

void parse_shard(const std::string& text, int& index, int& count) {
  const auto bad = [&] {
    return CliError("--shard '" + text +
                    "': expected i/N with 0 <= i < N, e.g. 0/4 .. 3/4 (Slurm's $SLURM_ARRAY_TASK_ID, Kubernetes' "
                    "$JOB_COMPLETION_INDEX)");
  };
  const size_t slash = text.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == text.size()) throw bad();
  const std::string a = text.substr(0, slash), b = text.substr(slash + 1);
  for (const std::string* part : {&a, &b})
    if (part->size() > 6 || part->find_first_not_of("0123456789") != std::string::npos) throw bad();
  index = std::stoi(a);
  count = std::stoi(b);
  if (count < 1 || index >= count) throw bad();
}

std::vector<int> parse_devices(const std::string& text, int count) {
  if (text.empty()) return {0};
  std::vector<int> out;
  if (text == "all") {
    for (int i = 0; i < count; ++i) out.push_back(i);
    return out;
  }
  const auto bad = [&](const std::string& why) {
    return CliError("--devices '" + text + "': " + why + " (expected all, or GPU ordinals such as 0,1)");
  };
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string part = text.substr(pos, comma - pos);
    if (part.empty() || part.size() > 4 || part.find_first_not_of("0123456789") != std::string::npos)
      throw bad("'" + part + "' is not a GPU ordinal");
    const int d = std::stoi(part);
    if (d >= count)
      throw bad("GPU " + part + " does not exist: this machine has " + std::to_string(count) + " (0.." +
                std::to_string(count - 1) + ")");
    if (std::find(out.begin(), out.end(), d) != out.end()) throw bad("GPU " + part + " is named twice");
    out.push_back(d);
    pos = comma + 1;
  }
  return out;
}

int first_device(const std::string& text) {
  if (text.empty() || text == "all") return 0;
  const size_t end = text.find(',');
  const std::string part = text.substr(0, end);
  if (part.empty() || part.size() > 4 || part.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::stoi(part);
}

}  // namespace kt::cli
