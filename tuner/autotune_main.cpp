// autotune: enumerate, compile (NVRTC, parallel, cached), verify against float64 and time every variant
// of every problem a shapes file names; store binaries and every measurement in a SQLite database.
//
//   autotune --shapes shapes/qwen7b.json --db qwen7b-h100.db                      tune (--arch: the GPU's; resumes)
//   autotune --arch sm_90a --shapes shapes/qwen7b.json --compile-only            CI sweep, no GPU
//   autotune show --db qwen7b-h100.db                                            list winners
//   autotune merge out.db a.db b.db                                              merge databases
//   autotune --shard 0/4 --shapes s.json --db shard0.db                          one of 4 shards of the work
//
// Exit codes: 0 ok; 1 a valid variant failed to compile, or a problem has no verified candidate;
// 2 bad input (arguments, shapes file, unsupported problem, arch mismatch, database); 130 interrupted
// (SIGINT or SIGTERM: the compilations in progress finish, what is compiled or measured is kept).
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "cache/hash.h"
#include "cache/tuning_db.h"
#include "generator/arch.h"
#include "generator/nvrtc.h"
#include "generator/registry.h"
#include "tuner/cli_checks.h"
#include "tuner/compile_queue.h"
#include "tuner/db_diff.h"
#include "tuner/item_scheduler.h"
#include "tuner/problem_rounds.h"
#include "tuner/selection.h"
#include "tuner/shapes_file.h"
#include "tuner/strategy.h"
#include "tuner/sweep_sample.h"
#include "tuner/work_items.h"
#include "tuner/worker.h"
#include "tuner/writer_lock.h"

#ifndef KT_VERSION
#define KT_VERSION "0.0.0"
#endif

namespace {

std::atomic<bool> g_interrupted{false};
// SIGINT / SIGTERM: finish the compilation or measurement in progress, keep everything done, exit 130.
// A second signal stops at once (measured rows are already committed; the cubin cache writes atomically).
void on_signal(int sig) {
  g_interrupted = true;
  static const char msg[] = "\nautotune: interrupted: stopping after the work in progress (again to stop at once)\n";
  const ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)n;
  std::signal(sig, SIG_DFL);
}
void install_signal_handlers() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

struct TuneArgs {
  std::string arch, shapes, db, cache_dir, json_out, strategy = "fast", grid = "buckets";
  std::vector<std::string> families;
  int jobs = 0, max_candidates = -1;  ///< -1: not given (fast: kFastCandidates; otherwise all)
  std::string only;      ///< ECMAScript regex: keep the candidates whose variant name it matches (the default stays)
  std::string problems;  ///< ECMAScript regex: keep the problems whose key it matches
  std::string shard;     ///< --shard i/N: this process's part of the (problem, candidate) pairs (kt::shard_work)
  std::string devices;   ///< --devices all | 0,1,...: one worker per GPU (kt::cli::parse_devices); "" = GPU 0
  double budget_ms = -1, watchdog_s = 30;  ///< budget -1: not given (kt::default_budget_ms of the strategy)
  double time_budget_s = 0;                ///< --time-budget: seconds from the start, 0 = none
  bool compile_only = false, retune = false, no_cache = false;
  bool list_candidates = false;  ///< --list-candidates: print the plan's candidates in order and exit
  int sample = -1;  ///< --sample N (compile-only): kernel classes + defaults + N more (tuner/sweep_sample.h); -1 all
  uint64_t sample_seed = 1;
};

using Item = kt::WorkItem;

long long now_s() { return static_cast<long long>(std::time(nullptr)); }

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string fmt_duration(double s) {
  char b[32];
  if (s >= 60) std::snprintf(b, sizeof b, "%dm%02ds", int(s) / 60, int(s) % 60);
  else std::snprintf(b, sizeof b, "%.0fs", s);
  return b;
}

/// Progress: a bar with ETA on a terminal, plain lines otherwise (CI logs).
class Progress {
 public:
  Progress(size_t total) : total_(total), tty_(isatty(fileno(stdout))), t0_(std::chrono::steady_clock::now()) {}
  void step(const std::string& what) {
    ++done_;
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    const double eta = done_ ? el / done_ * (total_ - done_) : 0;
    if (tty_) {
      const int w = 30, fill = total_ ? int(w * done_ / total_) : w;
      std::printf("\r[%s%s] %zu/%zu ETA %-7s %-60.60s", std::string(fill, '#').c_str(),
                  std::string(w - fill, '.').c_str(), done_, total_, fmt_duration(eta).c_str(), what.c_str());
      std::fflush(stdout);
    } else if (done_ % 20 == 0 || done_ == total_) {
      std::printf("measured %zu/%zu candidates, elapsed %s, ETA %s\n", done_, total_, fmt_duration(el).c_str(),
                  fmt_duration(eta).c_str());
      std::fflush(stdout);
    }
  }
  /// More candidates than planned (the refinement of the two-round strategies' leaders).
  void add(size_t n) { total_ += n; }
  void end_line() {
    if (tty_) std::printf("\r%-120s\r", "");
  }

 private:
  size_t total_, done_ = 0;
  bool tty_;
  std::chrono::steady_clock::time_point t0_;
};

void print_compile_table(const std::vector<kt::CompileResult>& results) {
  std::printf("%-72s %5s %7s %8s %10s %6s\n", "variant", "regs", "spill_B", "smem_KiB", "compile_ms", "cache");
  for (const auto& r : results) {
    if (!r.ok) {
      std::printf("%-72s COMPILE FAILED\n", r.kernel.variant_name.c_str());
      continue;
    }
    std::printf("%-72s %5d %7d %8.1f %10.0f %6s\n", r.kernel.variant_name.c_str(), r.report.registers,
                r.report.spill_store_bytes + r.report.spill_load_bytes,
                (r.report.static_smem_bytes + r.kernel.dynamic_smem_bytes) / 1024.0, r.report.compile_ms,
                r.cache_hit ? "hit" : "miss");
  }
}

kt::db::BinaryRecord binary_record(const kt::CompileResult& r, const kt::Compiler& c) {
  kt::db::BinaryRecord b;
  b.hash = r.cache_key;
  b.family = r.kernel.family;
  b.variant_name = r.kernel.variant_name;
  b.name_expression = r.kernel.name_expression;
  b.lowered_name = r.report.lowered_name;
  b.arch = kt::arch_name(r.kernel.arch);
  b.nvrtc_version = kt::nvrtc_version();
  for (const auto& o : c.options(r.kernel.arch)) b.options += (b.options.empty() ? "" : " ") + o;
  b.cubin = r.cubin;
  b.registers = r.report.registers;
  b.spill_store_bytes = r.report.spill_store_bytes;
  b.spill_load_bytes = r.report.spill_load_bytes;
  b.stack_bytes = r.report.stack_bytes;
  b.static_smem_bytes = r.report.static_smem_bytes;
  b.dynamic_smem_bytes = int(r.kernel.dynamic_smem_bytes);
  b.compile_ms = r.report.compile_ms;
  b.log = r.report.log;
  return b;
}

/// The measurements of a problem, latest row per variant, as selection candidates; registers and shared memory (the
/// tie-break) from this run's compiles, else from the measurement's binary in the database (a resumed or --retune
/// run compiles nothing it already has).
std::vector<kt::Candidate> latest_candidates(const std::vector<kt::db::Measurement>& ms,
                                             const std::map<std::string, std::pair<int, int>>& resources,
                                             const kt::db::TuningDb& db) {
  std::map<std::string, const kt::db::Measurement*> latest;
  for (const auto& m : ms) latest[m.variant_name] = &m;  // oldest first: the last one wins
  std::vector<kt::Candidate> out;
  for (const auto& [name, m] : latest) {
    kt::Candidate c;
    c.variant = name;
    c.status = m->status;
    c.median_us = m->median_us;
    c.screened = m->screened;
    auto it = resources.find(name);
    if (it != resources.end()) {
      c.registers = it->second.first;
      c.smem_bytes = it->second.second;
    } else if (!m->binary_hash.empty()) {
      if (const auto r = db.binary_resources(m->binary_hash)) {
        c.registers = r->first;
        c.smem_bytes = r->second;
      }
    }
    out.push_back(c);
  }
  return out;
}

/// The database's record of this run as it starts: its command line, the shapes file (path and content hash), the
/// kerntune version, the host name and the start time (unix seconds).
kt::db::RunRecord run_record(const TuneArgs& a, const std::string& argv_line) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return {argv_line, a.shapes, kt::content_hash({read_file(a.shapes)}), KT_VERSION, host, now_s(), 0};
}

/// The problems to tune: the shapes file's workloads of the families asked for (`shapes` gets the file; an empty
/// a.families gets every family it names), the bucket grid between the named sizes with --grid buckets, then those
/// whose key --problems matches. Throws
/// std::invalid_argument (or the shapes file's error) naming the bad option or file.
std::vector<kt::ProblemRef> load_problems(TuneArgs& a, kt::ShapesFile& shapes) {
  shapes = kt::load_shapes(a.shapes);
  if (shapes.hugging_face)
    std::fprintf(stderr,
                 "autotune: reading %s as a Hugging Face config.json (model %s; dtypes bf16 and fp16 and the "
                 "workloads of shapes/qwen7b.json)\n",
                 a.shapes.c_str(), shapes.model.name.c_str());
  for (const auto& w : kt::cli::check_families(shapes, a.families)) std::fprintf(stderr, "autotune: %s\n", w.c_str());
  std::vector<kt::ProblemRef> problems = kt::collect_problems(shapes, a.families);
  if (a.grid != "buckets" && a.grid != "listed")
    throw std::invalid_argument("unknown --grid '" + a.grid + "': use buckets or listed");
  if (a.grid == "buckets") {  // the runtime's buckets between the named sizes (tuner/work_items.h, bucket_grid)
    auto grid = kt::bucket_grid(problems);
    problems.insert(problems.end(), std::make_move_iterator(grid.begin()), std::make_move_iterator(grid.end()));
  }
  if (!a.problems.empty()) {  // --problems: the problems whose key matches (after the grid: buckets can be chosen)
    std::regex re;
    try {
      re = std::regex(a.problems, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw std::invalid_argument("--problems '" + a.problems + "' is not a valid regular expression: " + e.what());
    }
    problems = kt::select_problems(
        std::move(problems), [&](const std::string& key) { return std::regex_search(key, re); },
        "--problems '" + a.problems + "'");
  }
  return problems;
}

/// --devices: the GPUs to measure on (kt::cli::parse_devices over the first worker's device count) into `gpus`, and a
/// worker pool for each GPU after the first, started at once (each initializes CUDA and probes its GPU) rather than
/// one after another; `gpu_records` gets every GPU's record, `device` (the first's) first. Throws, naming the GPUs,
/// when one is of another device class than the first: their measurements pool into one winner.
void start_gpus(const TuneArgs& a, const kt::db::DeviceRecord& device,
                const std::function<std::vector<std::string>(int)>& worker_argv,
                std::vector<std::unique_ptr<kt::WorkerPool>>& pools, std::vector<int>& gpus,
                std::vector<kt::db::DeviceRecord>& gpu_records) {
  gpus = kt::cli::parse_devices(a.devices, pools[0]->device_count());
  gpu_records.push_back(device);
  // The other GPUs' workers start at once (each initializes CUDA and probes its GPU), not one after another.
  for (size_t g = 1; g < gpus.size(); ++g)
    pools.push_back(std::make_unique<kt::WorkerPool>(worker_argv(gpus[g]), a.watchdog_s, 900));
  gpu_records.resize(gpus.size());
  std::vector<std::exception_ptr> failed(gpus.size());
  std::vector<std::thread> starts;
  for (size_t g = 1; g < gpus.size(); ++g)
    starts.emplace_back([&, g] {
      try {
        gpu_records[g] = pools[g]->device();
      } catch (...) {
        failed[g] = std::current_exception();
      }
    });
  for (auto& th : starts) th.join();
  for (size_t g = 1; g < gpus.size(); ++g) {
    if (failed[g]) std::rethrow_exception(failed[g]);
    if (gpu_records[g].name != device.name)
      throw std::invalid_argument("--devices: GPU " + std::to_string(gpus[g]) + " is a " + gpu_records[g].name +
                                  ", GPU " + std::to_string(gpus[0]) + " a " + device.name +
                                  ": tune each device class with its own --devices");
  }
  if (gpus.size() > 1) {
    std::string list;
    for (int g : gpus) list += (list.empty() ? "" : ",") + std::to_string(g);
    std::printf("autotune: measuring on %zu GPUs (%s), one worker each: %s\n", gpus.size(), list.c_str(),
                device.name.c_str());
  }
}

/// Without a GPU (or with --compile-only) a --db is pre-filled with the compiled binaries `results`, and --json gets
/// the compile report: neither is left empty or silently skipped. Returns 0, or 2 after printing why the database or
/// the JSON file could not be written.
int store_compiled(const TuneArgs& a, const std::string& argv_line, const std::vector<Item>& items,
                   const std::vector<kt::CompileResult>& results, const kt::Compiler& compiler) {
  if (!a.db.empty()) {
    try {
      kt::db::TuningDb db(a.db);
      const long long run_id = db.begin_run(run_record(a, argv_line));
      size_t stored = 0;
      for (const auto& r : results)
        if (r.ok) {
          db.put_binary(binary_record(r, compiler));
          ++stored;
        }
      db.end_run(run_id, now_s());
      std::printf(
          "autotune: stored %zu compiled binaries in %s (no measurements, no winners: tune on a GPU "
          "with --db %s)\n",
          stored, a.db.c_str(), a.db.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "autotune: %s\n", e.what());
      return 2;
    }
  }
  if (!a.json_out.empty()) {
    nlohmann::json problems = nlohmann::json::array(), binaries = nlohmann::json::array();
    for (const auto& it : items)
      problems.push_back({{"family", it.family},
                          {"problem", it.key},
                          {"flops", it.flops},
                          {"bytes", it.bytes},
                          {"candidates", it.variants.size()},
                          {"default", it.default_variant}});
    for (const auto& r : results) {
      nlohmann::json b = {{"variant", r.kernel.variant_name}, {"ok", r.ok}};
      if (r.ok) {
        b["registers"] = r.report.registers;
        b["spill_bytes"] = r.report.spill_store_bytes + r.report.spill_load_bytes;
        b["smem_bytes"] = r.report.static_smem_bytes + int(r.kernel.dynamic_smem_bytes);
        b["compile_ms"] = r.report.compile_ms;
        b["cache_hit"] = r.cache_hit;
      } else {
        b["error"] = r.error;
      }
      binaries.push_back(b);
    }
    nlohmann::json doc = {{"device", nullptr},  {"measured", false},    {"arch", a.arch},
                          {"shapes", a.shapes}, {"problems", problems}, {"binaries", binaries}};
    std::ofstream f(a.json_out);
    f << doc.dump(1) << "\n";
    if (!f) {
      std::fprintf(stderr, "autotune: cannot write --json %s\n", a.json_out.c_str());
      return 2;
    }
    std::printf("autotune: compile report (no measurements) in %s\n", a.json_out.c_str());
  }
  return 0;
}

/// One problem of the run's report: its item, whether its inputs could not be set up, whether the run reached it (began
/// measuring one of its candidates; a stop between its set-up and its first candidate leaves it unreached), and
/// whether it had candidates to measure when the run began.
struct ReportItem {
  const Item* item;
  bool setup_failed, reached, pending;
};

/// The run's report, from the database (rows of earlier, resumed runs included), in the plan's order.
struct TuneReport {
  std::vector<std::string> lines;                     ///< one per problem, under the table's header
  nlohmann::json problems = nlohmann::json::array();  ///< one object per problem (autotune --json)
  double clock_min = 1e9, clock_max = -1;             ///< SM clock of this run's measurements, MHz (NVML)
  int no_winner = 0;                                  ///< problems set up or measured without a verified candidate
  size_t not_reached = 0;                             ///< problems a stop left unmeasured
};

/// Builds the report of run `run_id` on device class `device` (its winners from the database's winners view, the
/// same answer `autotune show` and the runtime give). `stop_reason` names why the run stopped early ("interrupted",
/// "--time-budget spent"), nullptr when it ran to the end: a problem it did not reach is then "not measured yet".
TuneReport build_report(kt::db::TuningDb& db, const std::string& device, long long run_id,
                        const std::vector<ReportItem>& items,
                        const std::map<std::string, std::pair<int, int>>& resources, const char* stop_reason) {
  TuneReport rep;
  for (const auto& ri : items) {
    const Item& it = *ri.item;
    if (ri.setup_failed) {
      rep.no_winner++;
      continue;
    }
    int n_compiled = 0, n_failed = 0, n_verified = 0;
    const auto ms = db.measurements(device, it.family, it.key);
    const auto cands = latest_candidates(ms, resources, db);
    for (const auto& m : ms)
      if (m.run_id == run_id && m.sm_clock_mhz > 0) {
        rep.clock_min = std::min(rep.clock_min, m.sm_clock_mhz);
        rep.clock_max = std::max(rep.clock_max, m.sm_clock_mhz);
      }
    for (const auto& c : cands) {
      n_compiled += c.status != kt::db::Status::compile_failed;
      n_verified += c.status == kt::db::Status::ok;
      n_failed += c.status != kt::db::Status::ok;
    }
    // The winner is the database's (winners view): the same answer `autotune show` and the runtime give.
    int w = -1;
    if (const auto dbw = db.winner(device, it.family, it.key))
      for (size_t j = 0; j < cands.size(); ++j)
        if (cands[j].variant == dbw->variant_name) w = int(j);
    // After --retune the view may answer from an older ok row of a variant whose latest row failed:
    // report from the latest rows then (same rule, tuner/selection.h).
    if (w >= 0 && cands[w].status != kt::db::Status::ok) w = kt::pick_winner(cands);
    nlohmann::json pj = {{"family", it.family},
                         {"problem", it.key},
                         {"flops", it.flops},
                         {"bytes", it.bytes},
                         {"candidates", cands.size()}};
    if (w < 0 && stop_reason && !ri.reached && ri.pending) {
      rep.lines.push_back(it.key + "  not measured yet (" + stop_reason + "; the same command continues)");
      rep.problems.push_back(pj);
      ++rep.not_reached;
      continue;
    }
    if (w < 0) {
      ++rep.no_winner;
      rep.lines.push_back(it.key + "  NO CANDIDATE PASSED VERIFICATION");
      rep.problems.push_back(pj);
      continue;
    }
    const auto& win = cands[w];
    double runner_up = 0, def_us = 0;
    for (size_t j = 0; j < cands.size(); ++j) {
      if (cands[j].status != kt::db::Status::ok) continue;
      if (int(j) != w && (runner_up == 0 || cands[j].median_us < runner_up)) runner_up = cands[j].median_us;
      if (cands[j].variant == it.default_variant) def_us = cands[j].median_us;
    }
    const double tflops = it.flops / (win.median_us * 1e-6) / 1e12;
    const double gbs = it.bytes / (win.median_us * 1e-6) / 1e9;
    const size_t a0 = win.variant.find("__", 10) + 2, a1 = win.variant.rfind("__");
    char buf[512];
    std::snprintf(
        buf, sizeof buf, "%-62s %-30s %10.1f %8.1f %8.0f %8s %8s %3d/%3d/%3d/%3d", it.key.c_str(),
        win.variant.substr(a0, a1 - a0).c_str(), win.median_us, tflops, gbs,
        def_us > 0 ? (std::to_string(def_us / win.median_us).substr(0, 4) + "x").c_str() : "n/a",
        runner_up > 0 ? (std::to_string((runner_up / win.median_us - 1) * 100).substr(0, 4) + "%").c_str() : "n/a",
        n_compiled, n_verified, n_verified, n_failed);
    rep.lines.push_back(buf);
    pj["winner"] = win.variant;
    pj["median_us"] = win.median_us;
    pj["tflops"] = tflops;
    pj["gbps"] = gbs;
    pj["default_us"] = def_us;
    pj["speedup_vs_default"] = def_us > 0 ? def_us / win.median_us : 0;
    pj["runner_up_us"] = runner_up;
    rep.problems.push_back(pj);
  }
  return rep;
}

int run_tune(TuneArgs a, const std::string& argv_line) {
  install_signal_handlers();
  // --time-budget: once it is spent no new candidate is measured (like an interrupt, but the run ends normally).
  const auto t_start = std::chrono::steady_clock::now();
  std::atomic<bool> out_of_time{false};
  auto stop_measuring = [&] {
    if (g_interrupted) return true;
    if (a.time_budget_s > 0 && !out_of_time &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count() >= a.time_budget_s)
      out_of_time = true;
    return out_of_time.load();
  };
  kt::ArchId arch;
  kt::ShapesFile shapes;
  std::vector<kt::ProblemRef> problems;
  // Hopper's arch-specific features (wgmma) need sm_90a cubins; they run on exactly the GPUs sm_90 names (CC 9.0).
  auto set_arch = [&] {
    arch = kt::parse_arch(a.arch);
    if (arch.sm == 90 && !arch.arch_specific) {
      arch.arch_specific = true;
      std::fprintf(stderr,
                   "autotune: --arch sm_90 tunes for sm_90a (adds the wgmma kernels; the cubins run on CC 9.0)\n");
    }
  };
  try {
    if (!a.arch.empty()) set_arch();  // else the GPU's, once the worker has found it
    problems = load_problems(a, shapes);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autotune: %s\n", e.what());
    return 2;
  }

  // GPU: probed by a worker process (this process never initializes CUDA).
  std::string self = "/proc/self/exe";
  // Declared first, so released last: the database is closed before another writer may open it.
  kt::WriterLock writer_lock;
  // Declared before the pool, so destroyed after it: the workers' read connections are gone when the
  // database closes, and closing can leave it in rollback-journal mode (TuningDb::~TuningDb).
  std::unique_ptr<kt::db::TuningDb> db;
  // One worker pool per GPU of --devices (the first one probes the machine); pools[i] measures on gpus[i].
  std::vector<std::unique_ptr<kt::WorkerPool>> pools;
  std::vector<int> gpus;
  std::vector<kt::db::DeviceRecord> gpu_records;
  auto worker_argv = [&](int gpu) {
    return std::vector<std::string>{self, "__worker", "--db", a.db, "--device", std::to_string(gpu)};
  };
  kt::db::DeviceRecord device;
  if (a.sample >= 0 && !a.compile_only) {
    std::fprintf(stderr, "autotune: --sample chooses what --compile-only compiles; add --compile-only\n");
    return 2;
  }
  if (a.list_candidates && a.arch.empty()) {
    std::fprintf(stderr, "autotune: --list-candidates needs --arch (no GPU is used)\n");
    return 2;
  }
  bool use_gpu = !a.compile_only && !a.list_candidates;
  if (use_gpu && a.db.empty()) {
    std::fprintf(stderr, "autotune: tuning needs --db FILE (or --compile-only)\n");
    return 2;
  }
  // One writer per database (tuner/writer_lock.h): a second run on the same file is refused before it compiles.
  if (!a.db.empty() && !a.list_candidates) {
    std::string why;
    if (!writer_lock.acquire(a.db, &why)) {
      std::fprintf(stderr, "autotune: %s\n", why.c_str());
      return 2;
    }
  }
  std::error_code fs_ec;
  const bool db_existed = !a.db.empty() && std::filesystem::exists(a.db, fs_ec);
  if (use_gpu) {
    pools.push_back(std::make_unique<kt::WorkerPool>(worker_argv(kt::cli::first_device(a.devices)), a.watchdog_s, 900));
    try {
      // The worker opens the database read-only: make sure it exists with the schema first.
      kt::db::TuningDb init(a.db);
      device = pools[0]->device();
    } catch (const kt::db::DbError& e) {
      std::fprintf(stderr, "autotune: %s\n", e.what());
      return 2;
    } catch (const std::exception& e) {
      use_gpu = false;
      pools.clear();
      if (a.arch.empty()) {
        if (!db_existed) std::filesystem::remove(a.db, fs_ec);  // leave no empty database behind
        std::string archs;
        for (const auto& s : kt::supported_archs()) archs += (archs.empty() ? "" : ", ") + s;
        std::fprintf(stderr, "autotune: %s: --arch is needed to compile without a GPU: one of %s\n", e.what(),
                     archs.c_str());
        return 2;
      }
      std::printf(
          "autotune: %s: running the compile-only sweep; the compiled binaries are stored in %s (no "
          "measurements: run the same command on a GPU to tune)\n",
          e.what(), a.db.c_str());
    }
    if (use_gpu && a.arch.empty()) {
      try {
        a.arch = kt::cli::arch_for_gpu(device.name, device.cc_major, device.cc_minor);
        std::fprintf(stderr, "autotune: no --arch given: tuning for %s, the arch of the GPU found (%s)\n",
                     a.arch.c_str(), device.name.c_str());
        set_arch();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "autotune: %s\n", e.what());
        return 2;
      }
    }
    if (use_gpu && !kt::arch_runs_on(arch, device.cc_major, device.cc_minor)) {
      std::fprintf(stderr,
                   "autotune: --arch %s does not run on %s (compute capability %d.%d); use --arch sm_%d%d or "
                   "--compile-only to build for another GPU\n",
                   a.arch.c_str(), device.name.c_str(), device.cc_major, device.cc_minor, device.cc_major,
                   device.cc_minor);
      return 2;
    }
  }

  if (use_gpu) {  // --devices: a worker per GPU, all of one device class (their measurements pool into one winner)
    try {
      start_gpus(a, device, worker_argv, pools, gpus, gpu_records);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "autotune: %s\n", e.what());
      return 2;
    }
  }

  // ---- enumerate: one work item per problem, its candidates in a deterministic order (default first) ----
  // --only: candidates whose variant name matches the regex (the default config always stays: it is the baseline).
  std::regex only_re;
  try {
    if (!a.only.empty()) only_re = std::regex(a.only, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    std::fprintf(stderr, "autotune: --only '%s' is not a valid regular expression: %s\n", a.only.c_str(), e.what());
    return 2;
  }
  kt::WorkOptions wopt;
  wopt.max_candidates = a.max_candidates;
  // The two-round strategies refine each problem's leaders over the depth siblings the prefix cut off (measuring only:
  // a compile-only run compiles the candidates it lists).
  wopt.depth_siblings = use_gpu && kt::refines_leader(a.strategy);
  if (!a.only.empty()) wopt.keep = [&](const std::string& name) { return std::regex_search(name, only_re); };
  // The device model: the GPU being tuned, else (compile-only) the arch's reference GPU.
  const kt::DeviceModel model =
      use_gpu && device.sm_count > 0 ? kt::device_model(arch, device.sm_count) : kt::device_model(arch);
  kt::WorkPlan plan = kt::build_work(problems, arch, model, wopt);
  if (!a.shard.empty()) {  // --shard i/N: this process's pairs only, and only the binaries they use
    int index = 0, count = 1;
    kt::cli::parse_shard(a.shard, index, count);  // checked in main: does not throw here
    size_t all = 0;
    for (const auto& it : plan.items) all += it.variants.size();
    plan = kt::shard_work(plan, index, count);
    size_t mine = 0;
    for (const auto& it : plan.items) mine += it.variants.size();
    std::printf("autotune: --shard %d/%d: %zu of %zu (problem, candidate) pairs, %zu binaries\n", index, count, mine,
                all, plan.sources.size());
  }
  std::vector<kt::KernelSource>& sources = plan.sources;
  const std::vector<Item>& items = plan.items;
  if (a.list_candidates) {  // family, problem key, rank in the order (0: the default), variant name
    for (const auto& it : items)
      for (size_t c = 0; c < it.variants.size(); ++c)
        std::printf("%s\t%s\t%zu\t%s\n", it.family.c_str(), it.key.c_str(), c, it.variants[c].c_str());
    return 0;
  }
  std::string per_family;
  for (const auto* f : kt::families()) {
    size_t n = 0;
    for (const auto& it : items) n += it.family == f->name();
    if (n) per_family += (per_family.empty() ? "" : " + ") + std::to_string(n) + " " + f->name();
  }
  std::printf("autotune %s: %s, %s, %s problems, %zu distinct binaries, NVRTC %s%s\n", KT_VERSION,
              shapes.model.name.c_str(), a.arch.c_str(), per_family.empty() ? "no" : per_family.c_str(), sources.size(),
              kt::nvrtc_version().c_str(), use_gpu ? (", on " + device.name).c_str() : "");

  if (a.sample >= 0) {  // --sample N: the compile-only sweep of CI (tuner/sweep_sample.h)
    std::vector<std::string> names;
    std::vector<bool> is_default(sources.size(), false);
    for (const auto& s : sources) names.push_back(s.variant_name);
    for (const auto& it : items)
      for (size_t c = 0; c < it.variants.size(); ++c)
        if (it.variants[c] == it.default_variant) is_default[it.source[c]] = true;
    kt::sweep::SampleStats st;
    std::vector<kt::KernelSource> kept;
    for (size_t i : kt::sweep::sample(names, is_default, size_t(a.sample), a.sample_seed, &st))
      kept.push_back(std::move(sources[i]));
    std::printf(
        "autotune: --sample %d: %zu of %zu binaries: %zu kernel classes, %zu more defaults, %zu sampled (seed %llu)\n",
        a.sample, kept.size(), sources.size(), st.classes, st.defaults, st.random,
        static_cast<unsigned long long>(a.sample_seed));
    sources = std::move(kept);  // the items' source indices are stale from here: compile-only returns after compiling
  }

  // ---- compile: a pool of threads in the plan's order (tuner/compile_queue.h) ----
  std::unique_ptr<kt::CubinCache> cache;
  try {
    if (!a.no_cache)
      cache = std::make_unique<kt::CubinCache>(a.cache_dir.empty() ? kt::CubinCache::default_dir() : a.cache_dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autotune: %s\n", e.what());
    return 2;
  }
  kt::Compiler compiler(cache.get(), a.jobs);
  const bool tty = isatty(fileno(stdout));
  auto compile_fn = [&](const kt::KernelSource& k) { return compiler.compile(k); };
  auto interrupted = [] { return g_interrupted != 0; };
  // The compile report: failures, spills, cache use and time (both paths).
  size_t failed = 0;
  auto compile_summary = [&](const kt::CompileQueue& q, size_t needed, const char* how) {
    size_t spilling = 0, done = 0;
    for (size_t i = 0; i < sources.size(); ++i) {
      if (!q.finished(i)) continue;
      ++done;
      const auto& r = q.results()[i];
      if (!r.ok) {
        ++failed;
        std::fprintf(stderr, "autotune: %s failed to compile:\n%s\n", r.kernel.variant_name.c_str(), r.error.c_str());
      } else if (r.report.spill_store_bytes + r.report.spill_load_bytes > 0) {
        ++spilling;
      }
    }
    if (done < needed && (g_interrupted || out_of_time))
      std::printf("autotune: %s after compiling %zu of %zu binaries%s; rerun the same command to resume\n",
                  g_interrupted ? "interrupted" : "--time-budget spent", done, needed,
                  cache ? " (they are in the cubin cache)" : "");
    else if (done < needed)  // bucket-grid candidates that no neighbour passed on: nothing waited for them
      std::printf("autotune: %zu of the %zu binaries were not needed (bucket-grid candidates no neighbour passed on)\n",
                  needed - done, needed);
    std::printf("autotune: compiled %zu variants on %d threads in %s%s: %zu failed, %zu spill registers, cache %s\n",
                done, compiler.jobs(), fmt_duration(q.seconds()).c_str(), how, failed, spilling,
                cache
                    ? (std::to_string(cache->hits()) + " hits / " + std::to_string(cache->misses()) + " misses").c_str()
                    : "off");
  };

  if (!use_gpu) {
    std::printf("autotune: compiling %zu binaries on %d threads: %s if none is cached\n", sources.size(),
                std::min<int>(compiler.jobs(), int(std::max<size_t>(1, sources.size()))),
                kt::cli::compile_estimate(sources.size(), compiler.jobs()).c_str());
    std::fflush(stdout);
    std::mutex out_mu;
    size_t done = 0;
    auto on_done = [&](size_t, const kt::CompileResult& r) {
      std::lock_guard<std::mutex> lock(out_mu);
      ++done;
      if (tty) std::printf("\rcompiling %zu/%zu", done, sources.size());
      else if (done % 20 == 0 || done == sources.size() || !r.ok)
        std::printf("compiled %zu/%zu%s\n", done, sources.size(),
                    r.ok ? "" : (" FAILED: " + r.kernel.variant_name).c_str());
      std::fflush(stdout);
    };
    kt::CompileQueue queue(sources, std::vector<char>(sources.size(), 1), compiler.jobs(), compile_fn, on_done,
                           interrupted);
    queue.join();
    if (tty) std::printf("\n");
    std::vector<kt::CompileResult> results;  // only what was compiled
    for (size_t i = 0; i < sources.size(); ++i)
      if (queue.finished(i)) results.push_back(queue.results()[i]);
    print_compile_table(results);
    compile_summary(queue, sources.size(), "");
    if (const int rc = store_compiled(a, argv_line, items, results, compiler)) return rc;
    if (g_interrupted) return 130;
    return failed ? 1 : 0;
  }
  if (g_interrupted) return 130;

  // ---- database: device, run ----
  long long run_id = 0;
  std::vector<long long> device_ids;                     // per GPU of --devices
  std::map<std::string, std::pair<int, int>> resources;  // variant -> (registers, smem), of what this run compiled
  try {
    db = std::make_unique<kt::db::TuningDb>(a.db);
    for (const auto& r : gpu_records) device_ids.push_back(db->upsert_device(r));
    run_id = db->begin_run(run_record(a, argv_line));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autotune: %s\n", e.what());
    return 2;
  }

  // ---- plan: what each problem still needs ----
  struct Todo {
    size_t item;
    std::vector<size_t> cands;  // indices into the item's configs
  };
  // A bucket-grid problem measures its default and the kGridTransfer fastest 'ok' candidates of each named
  // neighbour, as the database holds them when it is reached (the neighbours come first in the plan).
  auto transferred = [&](const Item& it) {
    std::vector<std::vector<kt::db::Measurement>> neighbours;
    for (const auto& key : it.transfer_from) neighbours.push_back(db->measurements(device.name, it.family, key));
    return kt::grid_candidates(it.default_variant, neighbours);
  };
  // Resuming skips what any GPU of this device class measured (the same GPU, or another of the same name: another
  // machine, a merged shard), as their measurements pool into one winner; --retune measures it again.
  auto measured_already = [&](const Item& it) {
    return a.retune || device.name.empty() ? std::set<std::string>{}
                                           : db->measured_variants(device.name, it.family, it.key);
  };
  auto pending = [&](const Item& it, const std::set<std::string>* only) {
    const std::set<std::string> done = measured_already(it);
    std::vector<size_t> cands;
    for (size_t c = 0; c < it.configs.size(); ++c)
      if ((!only || only->count(it.variants[c])) && !done.count(it.variants[c])) cands.push_back(c);
    return cands;
  };
  std::vector<Todo> todo;
  size_t total = 0, skipped = 0, grid_items = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    Todo t{i, {}};
    if (it.transfer_from.empty()) {
      t.cands = pending(it, nullptr);
      skipped += it.configs.size() - t.cands.size();
      total += t.cands.size();
    } else {  // counted from what the neighbours hold now; chosen again when reached
      ++grid_items;
      const auto keep = transferred(it);
      t.cands = pending(it, &keep);
      const size_t kept = std::count_if(it.variants.begin(), it.variants.end(), [&](auto& v) { return keep.count(v); });
      if (keep.size() > 1) {  // the neighbours are measured: exact
        total += t.cands.size();
        skipped += kept - t.cands.size();
      } else {  // not yet: at most the default and kGridTransfer per neighbour
        total += std::min(it.configs.size(), 1 + kt::kGridTransfer * it.transfer_from.size());
      }
    }
    todo.push_back(std::move(t));
  }
  if (grid_items)
    std::printf(
        "autotune: %zu of the %zu problems fill the runtime's power-of-two buckets between the named sizes (--grid "
        "buckets): each measures its default and the %d fastest candidates of its %d nearest named problems\n",
        grid_items, items.size(), kt::kGridTransfer, kt::kGridNeighbours);
  std::printf("autotune: %zu candidates to measure (%zu already in %s%s), strategy %s, budget %.0f ms each\n", total,
              skipped, a.db.c_str(), a.retune ? "" : "; --retune measures them again", a.strategy.c_str(), a.budget_ms);

  // Only the binaries of what is still to measure are compiled: a named problem's pending candidates, and a
  // bucket-grid problem's: the ones its neighbours pass on when none of them measures anything in this run (each has
  // nothing pending, or is not in the plan), else every unmeasured one (which its neighbours pass on is known later).
  std::map<std::string, size_t> item_index;  // family + '/' + problem key -> index into items and todo
  for (size_t i = 0; i < items.size(); ++i) item_index[items[i].family + '/' + items[i].key] = i;
  auto neighbours_settled = [&](const Item& it) {
    return std::none_of(it.transfer_from.begin(), it.transfer_from.end(), [&](const std::string& key) {
      const auto f = item_index.find(it.family + '/' + key);
      return f != item_index.end() && !todo[f->second].cands.empty();
    });
  };
  std::vector<char> needed(sources.size(), 0);
  size_t n_needed = 0;
  for (const auto& t : todo) {
    const Item& it = items[t.item];
    for (size_t c : it.transfer_from.empty() || neighbours_settled(it) ? t.cands : pending(it, nullptr))
      if (!needed[it.source[c]]) {
        needed[it.source[c]] = 1;
        ++n_needed;
      }
  }
  std::mutex db_mu;  // the database connection, the progress line and the report are shared by the threads
  // The two-round strategies' refinement compiles the leaders' pipeline-depth siblings on request (WorkItem::siblings).
  const bool refine = wopt.depth_siblings && std::any_of(items.begin(), items.end(), [](const Item& it) {
                        return std::any_of(it.siblings.begin(), it.siblings.end(), [](auto& v) { return !v.empty(); });
                      });
  std::printf(
      "autotune: compiling %zu binaries on %d threads while measuring (%zu more are measured already or kept for the "
      "refinement of each problem's leaders)\n",
      n_needed, std::min<int>(compiler.jobs(), int(std::max<size_t>(1, n_needed))), sources.size() - n_needed);
  std::fflush(stdout);
  const auto t_measure = std::chrono::steady_clock::now();
  // Each binary reaches the database (where the measuring worker reads it) as soon as it is compiled.
  kt::CompileQueue queue(
      sources, needed, compiler.jobs(), compile_fn,
      [&](size_t, const kt::CompileResult& r) {
        if (!r.ok) return;
        std::lock_guard<std::mutex> lock(db_mu);
        db->put_binary(binary_record(r, compiler));
      },
      stop_measuring, refine);

  Progress progress(total);
  // One candidate's row: config and variant name are the item's candidate's or a refinement sibling's.
  // screened: a first-round row whose candidate the final round left out (db::Measurement::screened).
  auto record = [&](const Item& it, const nlohmann::json& config, const std::string& variant,
                    const kt::CompileResult& cr, const kt::WorkerResult* wr, long long device_id,
                    bool screened = false) {
    kt::db::Measurement m;
    m.screened = screened;
    m.run_id = run_id;
    m.device_id = device_id;
    m.family = it.family;
    m.problem_key = it.key;
    m.problem_json = it.problem.dump();
    m.variant_name = variant;
    m.config_json = config.dump();
    m.measured_at = now_s();
    if (!cr.ok) {
      m.status = kt::db::Status::compile_failed;
      m.error = cr.error;
    } else {
      m.binary_hash = cr.cache_key;
      m.status = wr->status;
      m.error = wr->error;
      m.median_us = wr->median_us;
      m.p20_us = wr->p20_us;
      m.p80_us = wr->p80_us;
      m.samples_us = wr->samples_us;
      m.rel_err = wr->rel_err;
      m.sm_clock_mhz = wr->sm_clock_mhz;
      if (m.status == kt::db::Status::ok && m.median_us > 0) m.metric = it.flops / (m.median_us * 1e-6) / 1e12;
    }
    std::lock_guard<std::mutex> lock(db_mu);
    db->add_measurements({m});
    if (cr.ok)
      resources[variant] = {cr.report.registers, cr.report.static_smem_bytes + int(cr.kernel.dynamic_smem_bytes)};
  };
  auto measure_cmd = [&](const nlohmann::json& config, const std::string& variant, const kt::CompileResult& cr,
                         double budget) {
    return nlohmann::json{{"cmd", "measure"},
                          {"config", config},
                          {"variant", variant},
                          {"binary_hash", cr.cache_key},
                          {"budget_ms", budget}};
  };

  // Measuring one problem on one GPU's worker pool (called by that GPU's thread; db_mu guards the shared state).
  std::atomic<int> no_winner{0};
  std::vector<char> setup_failed(todo.size(), 0), reached(todo.size(), 0);
  struct FamilyTime {  // where one family's measuring time went, seconds
    double wall = 0, setup = 0, load = 0, check = 0, timing = 0;
    size_t problems = 0;
  };
  std::map<std::string, FamilyTime> family_time;
  auto measure_item = [&](size_t ti, kt::WorkerPool& pool, long long device_id) {
    Todo& t = todo[ti];
    const Item& it = items[t.item];
    const auto t_item = std::chrono::steady_clock::now();
    const double setup0 = pool.setup_ms();
    double load_ms = 0, check_ms = 0, time_ms = 0;
    struct Clock {  // adds the item's times to its family's when measure_item returns
      std::function<void()> f;
      ~Clock() { f(); }
    } clock{[&] {
      std::lock_guard<std::mutex> lock(db_mu);
      auto& ft = family_time[it.family];
      ft.wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_item).count();
      ft.setup += (pool.setup_ms() - setup0) / 1e3;
      ft.load += load_ms / 1e3;
      ft.check += check_ms / 1e3;
      ft.timing += time_ms / 1e3;
      ft.problems += t.cands.empty() ? 0 : 1;
    }};
    auto measure = [&](const nlohmann::json& config, const std::string& variant, const kt::CompileResult& cr,
                       double budget) {
      auto wr = pool.measure(measure_cmd(config, variant, cr, budget));
      load_ms += wr.load_ms;
      check_ms += wr.check_ms;
      time_ms += wr.time_ms;
      return wr;
    };
    if (!it.transfer_from.empty()) {  // the neighbours' fastest, as measured by now
      std::lock_guard<std::mutex> lock(db_mu);
      const auto keep = transferred(it);
      t.cands = pending(it, &keep);
    }
    if (t.cands.empty()) return;
    try {
      // float64 reference rows: as many as the family's registration asks (a row's cost differs per family).
      pool.set_problem({{"cmd", "problem"},
                        {"family", it.family},
                        {"problem", it.problem},
                        {"seed", 1},
                        {"ref_rows", kt::find_tuner_family(it.family).ref_rows}});
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(db_mu);
      std::fprintf(stderr, "autotune: %s: %s\n", it.key.c_str(), e.what());
      setup_failed[ti] = 1;
      return;
    }
    // The strategy's rounds (tuner/problem_rounds.h): everyone at the first budget, then the fastest again at the full
    // one; db_mu guards what the GPUs' threads share.
    kt::RoundsHost host;
    host.stop = stop_measuring;
    host.wait = [&](size_t source) { return queue.wait(source); };
    host.request = [&](size_t source) { queue.request(source); };
    host.measure = measure;
    host.record = [&](const nlohmann::json& config, const std::string& variant, const kt::CompileResult& cr,
                      const kt::WorkerResult* wr,
                      bool screened) { record(it, config, variant, cr, wr, device_id, screened); };
    host.measured_already = [&] {
      std::lock_guard<std::mutex> lock(db_mu);
      return measured_already(it);
    };
    host.step = [&](const std::string& variant) {  // a candidate's measurement begins: the problem is reached
      std::lock_guard<std::mutex> lock(db_mu);
      reached[ti] = 1;
      progress.step(it.key + " " + variant.substr(variant.find("__", 10) + 2));
    };
    host.add_planned = [&](size_t more) {
      std::lock_guard<std::mutex> lock(db_mu);
      progress.add(more);
    };
    kt::measure_rounds(it, t.cands, kt::rounds_for(a.strategy, t.cands.size(), a.budget_ms), a.budget_ms, host);
  };
  // The named problems first, then the bucket grid (whose candidates come from its named neighbours' results).
  // Within a phase every GPU's thread takes a problem when it is free (tuner/item_scheduler.h: problems that share
  // host inputs stay on one GPU in a row): a problem is measured on one GPU, and a worker that dies costs only its own
  // GPU's candidate in flight.
  for (const bool grid_phase : {false, true}) {
    std::vector<size_t> phase;
    std::vector<std::string> keys;
    for (size_t ti = 0; ti < todo.size(); ++ti) {
      const Item& it = items[todo[ti].item];
      if (it.transfer_from.empty() == grid_phase) continue;
      phase.push_back(ti);
      const auto& input_key = kt::find_tuner_family(it.family).input_key;
      keys.push_back(input_key ? it.family + ":" + input_key(it.problem) : std::string());
    }
    kt::ItemScheduler schedule(keys, int(pools.size()));
    auto work = [&](size_t g) {
      // The budget is looked at only when an item is left to measure, so a run that ends as it runs out is not
      // reported spent; an item taken and then not measured is not reached, like one never taken.
      while (const auto k = schedule.take(int(g))) {
        if (stop_measuring()) break;
        measure_item(phase[*k], *pools[g], device_ids[g]);
      }
    };
    if (pools.size() == 1) {
      work(0);
    } else {
      std::vector<std::thread> threads;
      for (size_t g = 0; g < pools.size(); ++g) threads.emplace_back(work, g);
      for (auto& th : threads) th.join();
    }
  }
  queue.stop();
  queue.join();
  progress.end_line();
  compile_summary(queue, n_needed, " while measuring");
  std::printf(
      "autotune: measured for %s\n",
      fmt_duration(std::chrono::duration<double>(std::chrono::steady_clock::now() - t_measure).count()).c_str());
  for (const auto& [f, ft] : family_time)
    std::printf(
        "autotune:   %-18s %zu problems in %s%s: inputs and reference rows %s, cubin loads %s, verification %s, "
        "timing %s, the rest (worker messages, database, waiting for the compiler) %s\n",
        f.c_str(), ft.problems, fmt_duration(ft.wall).c_str(), pools.size() > 1 ? " (summed over the GPUs)" : "",
        fmt_duration(ft.setup).c_str(), fmt_duration(ft.load).c_str(), fmt_duration(ft.check).c_str(),
        fmt_duration(ft.timing).c_str(),
        fmt_duration(std::max(0.0, ft.wall - ft.setup - ft.load - ft.check - ft.timing)).c_str());

  // ---- report, from the database (includes rows from earlier, resumed runs), in the plan's order ----
  std::vector<ReportItem> report_items;
  for (size_t ti = 0; ti < todo.size(); ++ti)
    report_items.push_back({&items[todo[ti].item], setup_failed[ti] != 0, reached[ti] != 0, !todo[ti].cands.empty()});
  const TuneReport rep = build_report(*db, device.name, run_id, report_items, resources,
                                      g_interrupted ? "interrupted"
                                      : out_of_time ? "--time-budget spent"
                                                    : nullptr);
  no_winner += rep.no_winner;
  progress.end_line();
  db->end_run(run_id, now_s());
  std::printf("\n%-62s %-30s %10s %8s %8s %8s %8s %s\n", "problem", "winner", "median_us", "TFLOP/s", "GB/s", "vs_dflt",
              "margin", "compiled/verified/timed/failed");
  for (const auto& l : rep.lines) std::printf("%s\n", l.c_str());
  if (rep.clock_max > 0)
    std::printf("autotune: SM clock during measurement %.0f-%.0f MHz (NVML)\n", rep.clock_min, rep.clock_max);
  else std::printf("autotune: SM clock during measurement unknown (NVML not available or nothing measured)\n");
  int workers = 0;
  for (const auto& pl : pools) workers += pl->workers_started();
  std::printf("autotune: %d worker process(es) used; results in %s (autotune show --db %s)\n", workers, a.db.c_str(),
              a.db.c_str());
  if (!a.json_out.empty()) {
    nlohmann::json doc = {{"device", device.name}, {"arch", a.arch}, {"shapes", a.shapes}, {"problems", rep.problems}};
    std::ofstream(a.json_out) << doc.dump(1) << "\n";
  }
  if (g_interrupted) {
    std::printf("autotune: interrupted; everything measured so far is in %s, rerun the same command to resume\n",
                a.db.c_str());
    return 130;
  }
  if (out_of_time)
    std::printf(
        "autotune: --time-budget %.0f s spent: %zu problems not measured yet; everything measured is in %s, the same "
        "command continues\n",
        a.time_budget_s, rep.not_reached, a.db.c_str());
  return (failed || no_winner > 0) ? 1 : 0;
}

int run_show(const std::string& path, const std::string& family) {
  try {
    if (!family.empty()) kt::find_family(family);  // an unknown name fails naming the registered families
    kt::db::TuningDb db(path, true);
    const auto ws = db.winners("", family);
    std::printf("%-24s %-62s %-66s %10s %8s\n", "device", "problem", "winner", "median_us", "metric");
    for (const auto& w : ws)
      std::printf("%-24.24s %-62s %-66s %10.1f %8.1f\n", w.device_name.c_str(), w.problem_key.c_str(),
                  w.variant_name.c_str(), w.median_us, w.metric);
    std::string per_family;  // winners per registered family
    for (const auto* f : kt::families()) {
      const auto n = std::count_if(ws.begin(), ws.end(), [&](const auto& w) { return w.family == f->name(); });
      per_family += (per_family.empty() ? "" : ", ") + std::to_string(n) + " " + f->name();
    }
    std::printf("%zu winners (%s); %lld measurements, %lld binaries, %lld runs, %lld devices\n", ws.size(),
                per_family.c_str(), db.count("measurements"), db.count("binaries"), db.count("runs"),
                db.count("devices"));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autotune show: %s\n", e.what());
    return 2;
  }
}

/// autotune diff: the winners of two databases side by side; exit 1 when a problem got slower than the threshold
/// (or, with require_all, lost its winner), 2 for bad input.
int run_diff(const std::string& old_path, const std::string& new_path, const std::string& family, double threshold_pct,
             bool require_all) {
  try {
    if (!family.empty()) kt::find_family(family);  // an unknown name fails naming the registered families
    const kt::db::TuningDb old_db(old_path, true), new_db(new_path, true);
    const kt::tune::DiffReport r = kt::tune::diff_winners(old_db, new_db, family, threshold_pct / 100);
    std::printf("%-24s %-62s %10s %10s %7s  %s\n", "device", "problem", "old_us", "new_us", "new/old",
                "winner (old -> new)");
    for (const auto& d : r.rows) {
      const char* mark = !d.in_new()                           ? "  MISSING in new"
                         : !d.in_old()                         ? "  new problem"
                         : d.ratio() > 1 + threshold_pct / 100 ? "  SLOWER"
                                                               : "";
      std::printf("%-24.24s %-62s %10.2f %10.2f %7.3f  %s -> %s%s\n", d.device_name.c_str(), d.problem_key.c_str(),
                  d.old_us, d.new_us, d.ratio(), d.in_old() ? d.old_variant.c_str() : "-",
                  d.in_new() ? d.new_variant.c_str() : "-", mark);
    }
    std::printf("%zu problems: %d slower than %.1f%%, %d missing in %s, %d only in %s\n", r.rows.size(), r.slower,
                threshold_pct, r.only_old, new_path.c_str(), r.only_new, new_path.c_str());
    return r.slower > 0 || (require_all && r.only_old > 0) ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autotune diff: %s\n", e.what());
    return 2;
  }
}

int run_merge(const std::string& out, const std::vector<std::string>& in) {
  // Every input is checked before the output is touched: a missing or bad input creates and changes nothing.
  // An input that is the output itself is checked by the read-write open below (which also migrates it:
  // `autotune merge FILE FILE` upgrades an older database in place).
  std::error_code ec;
  const bool existed = std::filesystem::exists(out, ec);
  const char* const untouched = existed ? "not changed" : "not created";
  try {
    for (const auto& f : in) {
      if (std::filesystem::equivalent(f, out, ec)) continue;
      kt::db::TuningDb check(f, /*read_only=*/true);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autotune merge: %s; %s %s\n", e.what(), out.c_str(), untouched);
    return 2;
  }
  std::unique_ptr<kt::db::TuningDb> db;
  try {
    db = std::make_unique<kt::db::TuningDb>(out);
    const kt::db::MergeCounts c = db->merge_from(in);  // one transaction for all inputs
    std::printf("merged %zu file(s) into %s: +%lld measurements, +%lld binaries, +%lld runs, +%lld devices\n",
                in.size(), out.c_str(), c.measurements, c.binaries, c.runs, c.devices);
    std::printf("%s: %lld measurements, %lld binaries, %lld runs, %lld devices, %zu winners\n", out.c_str(),
                db->count("measurements"), db->count("binaries"), db->count("runs"), db->count("devices"),
                db->winners().size());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autotune merge: %s; %s %s\n", e.what(), out.c_str(), untouched);
    // A file this command created and that holds nothing but the schema goes again.
    bool remove = !existed && db;
    try {
      remove = remove && db->count("runs") == 0 && db->count("measurements") == 0;
    } catch (...) {
      remove = false;
    }
    db.reset();
    if (remove)
      for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(out + suffix, ec);
    return 2;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string argv_line;
  for (int i = 0; i < argc; ++i) argv_line += (i ? " " : "") + std::string(argv[i]);

  CLI::App app{"kerntune autotune: compile, verify and time kernel variants; store the winners in a tuning database"};
  app.require_subcommand(0, 1);
  TuneArgs a;
  app.add_option("--arch", a.arch,
                 "target architecture: sm_80, sm_86, sm_89, sm_90 (tuned as sm_90a), sm_90a (must run on the GPU); "
                 "default: the GPU's; required with --compile-only or without a GPU");
  app.add_option("--shapes", a.shapes, "shapes file (kerntune JSON) or a Hugging Face config.json (required to tune)");
  app.add_option("--db", a.db, "tuning database (SQLite); created if missing, resumed if present");
  app.add_option("--families", a.families, "families to tune (default: all the shapes file names)");
  app.add_option("--strategy", a.strategy,
                 "fast (default: the first --max-candidates of each problem's candidate order at budget/8, the 3 "
                 "fastest again at the full budget), exhaustive (every candidate at the full budget) or halving (all "
                 "at budget/4, the best quarter at the full budget); fast and halving also measure the pipeline-depth "
                 "siblings that --max-candidates cut off of the first round's fastest and of a runner-up within 5%");
  app.add_option("--max-candidates", a.max_candidates,
                 "at most N candidates per problem, in the family's candidate order (default config first); 0 = all "
                 "(default: 16 with --strategy fast, else all; all with --compile-only)");
  app.add_option("--grid", a.grid,
                 "buckets (default): also tune one problem per power-of-two bucket of the sizes between those the "
                 "shapes file names, from the named problems' fastest candidates (the runtime's nearest step stays "
                 "inside a bucket); listed: only the named problems");
  app.add_option("--only", a.only,
                 "keep only the candidates whose variant name matches this regular expression (ECMAScript, searched "
                 "anywhere in the name; the default config is always kept); applied before --max-candidates");
  app.add_option("--problems", a.problems,
                 "keep only the problems whose key matches this regular expression (ECMAScript, searched anywhere in "
                 "the key, e.g. 'qkv_proj/bf16/int4/m(1|16)/'; keys as --list-candidates and `show` print them); "
                 "applied after --grid");
  app.add_option("--shard", a.shard,
                 "i/N: tune only shard i (0 <= i < N) of the (problem, candidate) pairs; N processes with 0/N .. "
                 "(N-1)/N cover every pair exactly once, each into its own --db, then `autotune merge` "
                 "(examples/distributed/)");
  app.add_option("--devices", a.devices,
                 "all, or GPU ordinals such as 0,1: one worker process per GPU, problems spread across them, every "
                 "row tagged with its GPU; GPUs of one device class pool their measurements into one winner "
                 "(default: GPU 0)");
  app.add_option(
      "--budget-ms", a.budget_ms,
      "measured GPU time per candidate in the final round, milliseconds (default: 40 with --strategy fast, else 100)");
  app.add_option("--time-budget", a.time_budget_s,
                 "seconds from the start after which no new candidate is measured (the one in flight finishes, "
                 "everything measured is kept, the named problems come before the bucket grid; the same command "
                 "continues); default 0: none");
  app.add_option("--watchdog-s", a.watchdog_s,
                 "seconds before a candidate's worker is killed as timed out (default 30)");
  app.add_option("--jobs", a.jobs,
                 "parallel NVRTC compilations, 0..256 (default 0: every core of its CPU affinity mask)");
  app.add_option("--cache-dir", a.cache_dir,
                 "cubin cache directory (default $KERNTUNE_CACHE_DIR or ~/.cache/kerntune)");
  app.add_flag("--no-cache", a.no_cache, "compile everything; do not read or write the cubin cache");
  app.add_option("--json", a.json_out, "also write the per-problem report as JSON (compile report without a GPU)");
  app.add_flag("--compile-only", a.compile_only,
               "enumerate and compile only (no GPU needed); with --db, store the binaries there");
  app.add_flag("--list-candidates", a.list_candidates,
               "print every problem's candidates in the family's order (what --max-candidates keeps first), one per "
               "line: family, problem key, rank (0: the default config), variant name, tab-separated; then exit "
               "(no GPU, compiling or database; needs --arch). bench/order_quality.py ranks them against an "
               "exhaustive database");
  app.add_option("--sample", a.sample,
                 "with --compile-only: compile one variant of every kernel class, every default and N more chosen by "
                 "--sample-seed (CI's sweep); without it every variant is compiled")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--sample-seed", a.sample_seed, "seed of --sample's choice (default 1)");
  app.add_flag("--retune", a.retune, "measure again what the database already has");

  auto* show = app.add_subcommand("show", "list the winners of a tuning database");
  std::string show_db, show_family;
  show->add_option("--db", show_db, "tuning database")->required();
  show->add_option("--family", show_family, "only this family");

  auto* merge = app.add_subcommand("merge", "merge tuning databases (sweeps split over GPUs or hosts)");
  std::string merge_out;
  std::vector<std::string> merge_in;
  merge->add_option("out", merge_out, "output database (created if missing)")->required();
  merge->add_option("in", merge_in, "input databases")->required();

  auto* diff = app.add_subcommand(
      "diff", "compare two tuning databases problem by problem; exit 1 when a winner got slower (a CI gate)");
  std::string diff_old, diff_new, diff_family;
  double diff_threshold = 5;
  bool diff_require_all = false;
  diff->add_option("old", diff_old, "baseline database")->required();
  diff->add_option("new", diff_new, "database to check against it")->required();
  diff->add_option("--threshold", diff_threshold,
                   "allowed slowdown of a problem's winner, percent of its old median time (default 5)")
      ->check(CLI::NonNegativeNumber);
  diff->add_option("--family", diff_family, "only this family");
  diff->add_flag("--require-all", diff_require_all,
                 "also exit 1 when the new database has no winner for a problem the old one tuned");

  auto* worker = app.add_subcommand("__worker", "(internal) measuring worker process");
  worker->group("");
  std::string worker_db;
  int worker_device = 0;
  worker->add_option("--db", worker_db)->required();
  worker->add_option("--device", worker_device);

  // Every argument error exits 2 (bad input), as documented; --help exits 0.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  // Tuning options do not apply to show / merge: refuse them rather than ignore them.
  if (*show || *merge || *diff) {
    const char* sub = *show ? "show" : *merge ? "merge" : "diff";
    for (const CLI::Option* opt : app.get_options())
      if (opt->count() > 0) {
        std::fprintf(stderr, "autotune %s: %s is a tuning option; it does not apply here (see %s --help)\n", sub,
                     opt->get_name().c_str(), sub);
        return 2;
      }
  }
  if (*show) {
    if (!show_family.empty()) {
      try {
        kt::find_family(show_family);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "autotune show: --family: %s\n", e.what());
        return 2;
      }
    }
    return run_show(show_db, show_family);
  }
  if (*merge) return run_merge(merge_out, merge_in);
  if (*diff) return run_diff(diff_old, diff_new, diff_family, diff_threshold, diff_require_all);
  if (*worker) return kt::worker_main(worker_db, worker_device, 0, 1);
  if (a.shapes.empty()) {
    std::fprintf(stderr, "autotune: --shapes FILE is required to tune (see --help)\n");
    return 2;
  }
  try {
    // What was not given follows the strategy (tuner/strategy.h); a compile-only run compiles every candidate.
    if (!app.count("--budget-ms")) a.budget_ms = kt::default_budget_ms(a.strategy);
    if (!app.count("--max-candidates"))
      a.max_candidates = kt::default_max_candidates(a.strategy, a.compile_only || a.list_candidates);
    kt::cli::TuneOptions o;
    o.arch = a.arch;
    o.db = a.db;
    o.json_out = a.json_out;
    o.cache_dir = a.cache_dir;
    o.budget_ms = a.budget_ms;
    o.watchdog_s = a.watchdog_s;
    o.time_budget_s = a.time_budget_s;
    o.max_candidates = a.max_candidates;
    o.jobs = a.jobs;
    o.compile_only = a.compile_only;
    o.retune = a.retune;
    o.no_cache = a.no_cache;
    o.strategy = a.strategy;
    o.strategy_given = app.count("--strategy") > 0;
    o.cache_dir_given = app.count("--cache-dir") > 0;
    o.devices = a.devices;
    kt::cli::check_tune_options(o);
    int shard_index = 0, shard_count = 1;
    if (!a.shard.empty()) kt::cli::parse_shard(a.shard, shard_index, shard_count);  // refused before any work
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autotune: %s\n", e.what());
    return 2;
  }
  return run_tune(a, argv_line);
}
