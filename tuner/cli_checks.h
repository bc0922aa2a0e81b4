// Checks of the autotune command line that need no GPU: option ranges, contradicting options, which
// families a shapes file can feed, and the --arch that matches a GPU. Each check throws CliError with a
// message that names the option (or the file) and what is accepted; autotune prints it and exits 2.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "tuner/shapes_file.h"

namespace kt::cli {

/// Bad command-line input; the message names the option and its range.
struct CliError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

constexpr double kMaxBudgetMs = 60000;   ///< --budget-ms: (0, 60000] ms of GPU time per candidate
constexpr double kMaxWatchdogS = 86400;  ///< --watchdog-s: (0, 86400] s
constexpr int kMaxJobs = 256;            ///< --jobs: 0 (all hardware threads) .. 256

/// The tune options as given on the command line. `*_given`: the option appeared (its value may be the
/// default).
struct TuneOptions {
  std::string arch, db, json_out, cache_dir, strategy = "fast";
  double budget_ms = 100, watchdog_s = 30;
  double time_budget_s = 0;  ///< --time-budget: 0 = none
  int max_candidates = 0, jobs = 0;
  bool compile_only = false, retune = false, no_cache = false;
  bool strategy_given = false, cache_dir_given = false;
  std::string devices;  ///< --devices as given ("" when not)
};

/// Refuses, naming the option and its range: a --strategy other than fast, exhaustive or halving; --budget-ms not finite or outside (0, kMaxBudgetMs]; --watchdog-s
/// not finite or outside (0, kMaxWatchdogS]; a budget not below the watchdog (every candidate would time
/// out); --time-budget not finite or negative, or with --compile-only; --max-candidates < 0; --jobs outside [0, kMaxJobs]; --compile-only with --retune, --strategy or --devices
/// (nothing is measured); a --devices list that is not "all" or ordinals (checked against the machine later); --no-cache with --cache-dir; --compile-only without --arch; --db ":memory:" or a "file:" URI
/// (the worker processes and later runs could not see it); a --db or --json path that is a directory or whose
/// folder does not exist.
void check_tune_options(const TuneOptions& o);

/// Checks that the shapes file has work for the requested families (all registered ones when `families` is
/// empty). Throws CliError for an unknown family ("unknown family 'x': known are ..."), for a requested family
/// the file has no workloads of ("--families qkv_proj: shapes/x.json has no qkv_proj workloads"), and when
/// nothing in the file can be tuned (e.g. only attention_decode workloads, a family not implemented yet).
/// Returns warnings about workloads that will be skipped (their family is not implemented).
std::vector<std::string> check_families(const ShapesFile& shapes, const std::vector<std::string>& families);

/// The --arch to tune for a GPU of compute capability major.minor: "sm_90a" for 9.0 (the wgmma kernels),
/// else "sm_<major><minor>". Throws CliError when kerntune has no kernels for it (naming the supported archs).
std::string arch_for_gpu(const std::string& gpu_name, int cc_major, int cc_minor);

/// Parses --shard "i/N" (0 <= i < N, N >= 1; decimal integers) into index and count. Throws CliError naming the
/// option and the accepted form.
void parse_shard(const std::string& text, int& index, int& count);

/// Parses --devices against a machine with `count` CUDA devices: "" (the option not given) -> {0}; "all" -> {0 ..
/// count - 1}; "0,2,3" -> those ordinals, in that order. Throws CliError naming the option for a malformed list, a
/// repeated ordinal or one the machine does not have.
std::vector<int> parse_devices(const std::string& text, int count);

/// The GPU the first worker probes the machine on: the first ordinal of a --devices list, else 0 ("" or "all"; a
/// malformed list gives 0 here and is refused by parse_devices).
int first_device(const std::string& text);

/// A rough wall-time estimate for compiling `binaries` variants on `threads` threads, e.g. "about 21 min"
/// (at kCompileSecondsPerBinary per binary per thread; cached binaries take no time).
constexpr double kCompileSecondsPerBinary = 0.3;
std::string compile_estimate(size_t binaries, int threads);

}  // namespace kt::cli
