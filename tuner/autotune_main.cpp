// autotune: enumerate, compile (NVRTC, parallel, cached), verify against float64 and time every variant
// of every problem a shapes file names; store binaries and every measurement in a SQLite database.
//
//   autotune --arch sm_90 --shapes shapes/qwen7b.json --db qwen7b-h100.db        tune (resumes)
//   autotune --arch sm_90a --shapes shapes/qwen7b.json --compile-only            CI sweep, no GPU
//   autotune show --db qwen7b-h100.db                                            list winners
//   autotune merge out.db a.db b.db                                              merge databases
//
// Exit codes: 0 ok; 1 a valid variant failed to compile, or a problem has no verified candidate;
// 2 bad input (arguments, shapes file, unsupported problem, arch mismatch, database); 130 interrupted.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cache/hash.h"
#include "cache/tuning_db.h"
#include "generator/arch.h"
#include "generator/attention_family.h"
#include "generator/nvrtc.h"
#include "generator/registry.h"
#include "tuner/attention_problems.h"
#include "tuner/selection.h"
#include "tuner/shapes_file.h"
#include "tuner/worker.h"

#ifndef KT_VERSION
#define KT_VERSION "0.0.0"
#endif

namespace {

std::atomic<bool> g_interrupted{false};
void on_sigint(int) {
  g_interrupted = true;
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C stops at once; measured rows are already committed
}

struct TuneArgs {
  std::string arch, shapes, db, cache_dir, json_out, strategy = "exhaustive";
  std::vector<std::string> families;
  int jobs = 0, max_candidates = 0;
  double budget_ms = 100, watchdog_s = 30;
  bool compile_only = false, retune = false, no_cache = false;
};

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
      std::printf("\r[%s%s] %zu/%zu ETA %-7s %-60.60s", std::string(fill, '#').c_str(), std::string(w - fill, '.').c_str(),
                  done_, total_, fmt_duration(eta).c_str(), what.c_str());
      std::fflush(stdout);
    } else if (done_ % 20 == 0 || done_ == total_) {
      std::printf("measured %zu/%zu candidates, elapsed %s, ETA %s\n", done_, total_, fmt_duration(el).c_str(),
                  fmt_duration(eta).c_str());
      std::fflush(stdout);
    }
  }
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

/// The measurements of a problem, latest row per variant, as selection candidates.
std::vector<kt::Candidate> latest_candidates(const std::vector<kt::db::Measurement>& ms,
                                             const std::map<std::string, std::pair<int, int>>& resources) {
  std::map<std::string, const kt::db::Measurement*> latest;
  for (const auto& m : ms) latest[m.variant_name] = &m;  // oldest first: the last one wins
  std::vector<kt::Candidate> out;
  for (const auto& [name, m] : latest) {
    kt::Candidate c;
    c.variant = name;
    c.status = m->status;
    c.median_us = m->median_us;
    auto it = resources.find(name);
    if (it != resources.end()) {
      c.registers = it->second.first;
      c.smem_bytes = it->second.second;
    }
    out.push_back(c);
  }
  return out;
}

int run_tune(TuneArgs a, const std::string& argv_line) {
  kt::ArchId arch;
  kt::ShapesFile shapes;
  std::vector<kt::attn::Problem> problems;
  try {
    arch = kt::parse_arch(a.arch);
    if (a.families.empty()) a.families = {kt::attn::kFamily};
    for (const auto& f : a.families) kt::find_family(f);
    if (a.strategy != "exhaustive" && a.strategy != "halving")
      throw std::invalid_argument("unknown --strategy '" + a.strategy + "': use exhaustive or halving");
    shapes = kt::load_shapes(a.shapes);
    problems = kt::attention_prefill_problems(shapes);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autotune: %s\n", e.what());
    return 2;
  }

  // GPU: probed by a worker process (this process never initializes CUDA).
  std::string self = "/proc/self/exe";
  std::unique_ptr<kt::WorkerPool> pool;
  kt::db::DeviceRecord device;
  bool use_gpu = !a.compile_only;
  if (use_gpu && a.db.empty()) {
    std::fprintf(stderr, "autotune: tuning needs --db FILE (or --compile-only)\n");
    return 2;
  }
  if (use_gpu) {
    pool = std::make_unique<kt::WorkerPool>(std::vector<std::string>{self, "__worker", "--db", a.db}, a.watchdog_s, 900);
    try {
      // The worker opens the database read-only: make sure it exists with the schema first.
      kt::db::TuningDb init(a.db);
      device = pool->device();
    } catch (const kt::db::DbError& e) {
      std::fprintf(stderr, "autotune: %s\n", e.what());
      return 2;
    } catch (const std::exception& e) {
      std::printf("autotune: %s: running the compile-only sweep\n", e.what());
      use_gpu = false;
      pool.reset();
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

  // ---- enumerate ----
  std::vector<kt::KernelSource> sources;
  std::map<std::string, size_t> index;  // variant name -> sources index
  std::vector<std::vector<kt::attn::Config>> configs(problems.size());
  for (size_t i = 0; i < problems.size(); ++i) {
    auto valid = kt::attn::valid_configs(problems[i], arch);
    // Deterministic candidate order: the family default first, then the space order.
    const auto def = kt::attn::default_config(arch, problems[i]);
    std::stable_partition(valid.begin(), valid.end(), [&](const auto& c) { return kt::attn::same_config(c, def); });
    if (a.max_candidates > 0 && int(valid.size()) > a.max_candidates) valid.resize(size_t(a.max_candidates));
    configs[i] = valid;
    for (const auto& c : configs[i]) {
      auto src = kt::attn::kernel_source(problems[i], c, arch);
      if (index.emplace(src.variant_name, sources.size()).second) sources.push_back(std::move(src));
    }
  }
  std::printf("autotune %s: %s, %s, %zu attention_prefill problems, %zu distinct variants, NVRTC %s%s\n", KT_VERSION,
              shapes.model.name.c_str(), a.arch.c_str(), problems.size(), sources.size(), kt::nvrtc_version().c_str(),
              use_gpu ? (", on " + device.name).c_str() : "");

  // ---- compile ----
  std::unique_ptr<kt::CubinCache> cache;
  try {
    if (!a.no_cache) cache = std::make_unique<kt::CubinCache>(a.cache_dir.empty() ? kt::CubinCache::default_dir() : a.cache_dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autotune: %s\n", e.what());
    return 2;
  }
  kt::Compiler compiler(cache.get(), a.jobs);
  const bool tty = isatty(fileno(stdout));
  const auto t_compile = std::chrono::steady_clock::now();
  auto results = compiler.compile_all(sources, [&](size_t done, size_t total, const kt::CompileResult& r) {
    if (tty) std::printf("\rcompiling %zu/%zu", done, total);
    else if (done % 20 == 0 || done == total || !r.ok)
      std::printf("compiled %zu/%zu%s\n", done, total, r.ok ? "" : (" FAILED: " + r.kernel.variant_name).c_str());
    std::fflush(stdout);
  });
  if (tty) std::printf("\n");
  if (!use_gpu) print_compile_table(results);
  size_t failed = 0, spilling = 0;
  for (const auto& r : results) {
    if (!r.ok) {
      ++failed;
      std::fprintf(stderr, "autotune: %s failed to compile:\n%s\n", r.kernel.variant_name.c_str(), r.error.c_str());
    } else if (r.report.spill_store_bytes + r.report.spill_load_bytes > 0) {
      ++spilling;
    }
  }
  std::printf("autotune: compiled %zu variants on %d threads in %s: %zu failed, %zu spill registers, cache %s\n",
              results.size(), compiler.jobs(),
              fmt_duration(std::chrono::duration<double>(std::chrono::steady_clock::now() - t_compile).count()).c_str(),
              failed, spilling,
              cache ? (std::to_string(cache->hits()) + " hits / " + std::to_string(cache->misses()) + " misses").c_str()
                    : "off");
  if (!use_gpu) return failed ? 1 : 0;

  // ---- database: device, run, binaries ----
  std::unique_ptr<kt::db::TuningDb> db;
  long long run_id = 0, device_id = 0;
  std::map<std::string, std::pair<int, int>> resources;  // variant -> (registers, smem)
  try {
    db = std::make_unique<kt::db::TuningDb>(a.db);
    device_id = db->upsert_device(device);
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    run_id = db->begin_run({argv_line, a.shapes, kt::content_hash({read_file(a.shapes)}), KT_VERSION, host, now_s(), 0});
    for (const auto& r : results)
      if (r.ok) {
        db->put_binary(binary_record(r, compiler));
        resources[r.kernel.variant_name] = {r.report.registers, r.report.static_smem_bytes + int(r.kernel.dynamic_smem_bytes)};
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autotune: %s\n", e.what());
    return 2;
  }

  // ---- plan: what each problem still needs ----
  struct Todo {
    size_t problem;
    std::vector<kt::attn::Config> configs;
  };
  std::vector<Todo> todo;
  size_t total = 0, skipped = 0;
  for (size_t i = 0; i < problems.size(); ++i) {
    Todo t{i, {}};
    for (const auto& c : configs[i]) {
      const auto name = kt::attn::variant_name(problems[i], c, arch);
      if (!a.retune && db->has_measurement(device_id, kt::attn::kFamily, problems[i].key(), name)) {
        ++skipped;
        continue;
      }
      t.configs.push_back(c);
    }
    total += t.configs.size();
    todo.push_back(std::move(t));
  }
  std::printf("autotune: %zu candidates to measure (%zu already in %s%s), strategy %s, budget %.0f ms each\n", total,
              skipped, a.db.c_str(), a.retune ? "" : "; --retune measures them again", a.strategy.c_str(), a.budget_ms);

  std::signal(SIGINT, on_sigint);
  std::signal(SIGTERM, on_sigint);
  Progress progress(total);
  auto record = [&](const kt::attn::Problem& p, const kt::attn::Config& c, const kt::CompileResult& cr,
                    const kt::WorkerResult* wr) {
    kt::db::Measurement m;
    m.run_id = run_id;
    m.device_id = device_id;
    m.family = kt::attn::kFamily;
    m.problem_key = p.key();
    m.problem_json = kt::attn::problem_to_json(p).dump();
    m.variant_name = cr.kernel.variant_name;
    m.config_json = kt::attn::config_to_json(c).dump();
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
      if (m.status == kt::db::Status::ok && m.median_us > 0) m.metric = p.flops() / (m.median_us * 1e-6) / 1e12;
    }
    db->add_measurements({m});
  };

  int no_winner = 0;
  double clock_min = 1e9, clock_max = -1;  // SM clock seen by this run's measurements (NVML)
  nlohmann::json report = nlohmann::json::array();
  std::vector<std::string> lines;
  for (auto& t : todo) {
    if (g_interrupted) break;
    const auto& p = problems[t.problem];
    int n_compiled = 0, n_failed = 0, n_verified = 0;
    if (!t.configs.empty()) {
      try {
        pool->set_problem({{"cmd", "problem"}, {"family", kt::attn::kFamily}, {"problem", kt::attn::problem_to_json(p)},
                           {"seed", 1}, {"ref_rows", 512}});
      } catch (const std::exception& e) {
        std::fprintf(stderr, "autotune: %s: %s\n", p.key().c_str(), e.what());
        no_winner++;
        continue;
      }
      // Round 1 (halving: a quarter of the budget for everyone), round 2 (full budget, best quarter).
      std::vector<std::pair<kt::attn::Config, kt::WorkerResult>> round;
      const bool halving = a.strategy == "halving" && t.configs.size() > 4;
      const double budget1 = halving ? std::max(5.0, a.budget_ms / 4) : a.budget_ms;
      for (const auto& c : t.configs) {
        if (g_interrupted) break;
        const auto& cr = results[index.at(kt::attn::variant_name(p, c, arch))];
        progress.step(p.key() + " " + cr.kernel.variant_name.substr(cr.kernel.variant_name.find("__", 20) + 2));
        if (!cr.ok) {
          record(p, c, cr, nullptr);
          continue;
        }
        auto wr = pool->measure({{"cmd", "measure"}, {"config", kt::attn::config_to_json(c)},
                                 {"variant", cr.kernel.variant_name}, {"binary_hash", cr.cache_key}, {"budget_ms", budget1}});
        if (halving && wr.status == kt::db::Status::ok) round.push_back({c, wr});
        else record(p, c, cr, &wr);
      }
      if (halving && !g_interrupted) {
        std::sort(round.begin(), round.end(), [](const auto& x, const auto& y) { return x.second.median_us < y.second.median_us; });
        const size_t keep = std::max<size_t>(1, (t.configs.size() + 3) / 4);
        for (size_t k = 0; k < round.size(); ++k) {
          const auto& cr = results[index.at(kt::attn::variant_name(p, round[k].first, arch))];
          if (k >= keep) {
            record(p, round[k].first, cr, &round[k].second);
            continue;
          }
          if (g_interrupted) break;
          auto wr = pool->measure({{"cmd", "measure"}, {"config", kt::attn::config_to_json(round[k].first)},
                                   {"variant", cr.kernel.variant_name}, {"binary_hash", cr.cache_key}, {"budget_ms", a.budget_ms}});
          record(p, round[k].first, cr, &wr);
        }
      }
    }
    // Report from the database (includes rows from earlier, resumed runs).
    const auto ms = db->measurements(device.name, kt::attn::kFamily, p.key());
    const auto cands = latest_candidates(ms, resources);
    for (const auto& m : ms)
      if (m.run_id == run_id && m.sm_clock_mhz > 0) {
        clock_min = std::min(clock_min, m.sm_clock_mhz);
        clock_max = std::max(clock_max, m.sm_clock_mhz);
      }
    for (const auto& c : cands) {
      n_compiled += c.status != kt::db::Status::compile_failed;
      n_verified += c.status == kt::db::Status::ok;
      n_failed += c.status != kt::db::Status::ok;
    }
    const int w = kt::pick_winner(cands);
    nlohmann::json pj = {{"problem", p.key()}, {"flops", p.flops()}, {"candidates", cands.size()}};
    if (w < 0) {
      ++no_winner;
      lines.push_back(p.key() + "  NO CANDIDATE PASSED VERIFICATION");
      report.push_back(pj);
      continue;
    }
    const auto& win = cands[w];
    double runner_up = 0, def_us = 0;
    const std::string def_name = kt::attn::variant_name(p, kt::attn::default_config(arch, p), arch);
    for (size_t j = 0; j < cands.size(); ++j) {
      if (cands[j].status != kt::db::Status::ok) continue;
      if (int(j) != w && (runner_up == 0 || cands[j].median_us < runner_up)) runner_up = cands[j].median_us;
      if (cands[j].variant == def_name) def_us = cands[j].median_us;
    }
    const double tflops = p.flops() / (win.median_us * 1e-6) / 1e12;
    char buf[512];
    std::snprintf(buf, sizeof buf, "%-62s %-28s %10.1f %8.1f %8s %8s %3d/%3d/%3d/%3d", p.key().c_str(),
                  win.variant.substr(win.variant.find("__", 20) + 2, win.variant.rfind("__") - win.variant.find("__", 20) - 2).c_str(),
                  win.median_us, tflops, def_us > 0 ? (std::to_string(def_us / win.median_us).substr(0, 4) + "x").c_str() : "n/a",
                  runner_up > 0 ? (std::to_string((runner_up / win.median_us - 1) * 100).substr(0, 4) + "%").c_str() : "n/a",
                  n_compiled, n_verified, n_verified, n_failed);
    lines.push_back(buf);
    pj["winner"] = win.variant;
    pj["median_us"] = win.median_us;
    pj["tflops"] = tflops;
    pj["speedup_vs_default"] = def_us > 0 ? def_us / win.median_us : 0;
    pj["runner_up_us"] = runner_up;
    report.push_back(pj);
  }
  progress.end_line();
  db->end_run(run_id, now_s());
  std::printf("\n%-62s %-28s %10s %8s %8s %8s %s\n", "problem", "winner", "median_us", "TFLOP/s", "vs_dflt", "margin",
              "compiled/verified/timed/failed");
  for (const auto& l : lines) std::printf("%s\n", l.c_str());
  if (clock_max > 0)
    std::printf("autotune: SM clock during measurement %.0f-%.0f MHz (NVML)\n", clock_min, clock_max);
  else
    std::printf("autotune: SM clock during measurement unknown (NVML not available or nothing measured)\n");
  std::printf("autotune: %d worker process(es) used; results in %s (autotune show --db %s)\n", pool->workers_started(),
              a.db.c_str(), a.db.c_str());
  if (!a.json_out.empty()) {
    nlohmann::json doc = {{"device", device.name}, {"arch", a.arch}, {"shapes", a.shapes}, {"problems", report}};
    std::ofstream(a.json_out) << doc.dump(1) << "\n";
  }
  if (g_interrupted) {
    std::printf("autotune: interrupted; everything measured so far is in %s, rerun the same command to resume\n",
                a.db.c_str());
    return 130;
  }
  return (failed || no_winner) ? 1 : 0;
}

int run_show(const std::string& path, const std::string& family) {
  try {
    kt::db::TuningDb db(path, true);
    const auto ws = db.winners("", family);
    std::printf("%-24s %-62s %-66s %10s %8s\n", "device", "problem", "winner", "median_us", "metric");
    for (const auto& w : ws)
      std::printf("%-24.24s %-62s %-66s %10.1f %8.1f\n", w.device_name.c_str(), w.problem_key.c_str(),
                  w.variant_name.c_str(), w.median_us, w.metric);
    std::printf("%zu winners; %lld measurements, %lld binaries, %lld runs, %lld devices\n", ws.size(),
                db.count("measurements"), db.count("binaries"), db.count("runs"), db.count("devices"));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autotune show: %s\n", e.what());
    return 2;
  }
}

int run_merge(const std::string& out, const std::vector<std::string>& in) {
  try {
    kt::db::TuningDb db(out);
    for (const auto& f : in) {
      const auto before = db.count("measurements");
      db.merge_from(f);
      std::printf("merged %s: +%lld measurements\n", f.c_str(), db.count("measurements") - before);
    }
    std::printf("%s: %lld measurements, %lld binaries, %lld runs, %lld devices, %zu winners\n", out.c_str(),
                db.count("measurements"), db.count("binaries"), db.count("runs"), db.count("devices"), db.winners().size());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autotune merge: %s\n", e.what());
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
  app.add_option("--arch", a.arch, "target architecture: sm_80, sm_86, sm_89, sm_90, sm_90a (must run on the GPU)");
  app.add_option("--shapes", a.shapes, "shapes file (kerntune JSON) or a Hugging Face config.json");
  app.add_option("--db", a.db, "tuning database (SQLite); created if missing, resumed if present");
  app.add_option("--families", a.families, "families to tune (default: all the shapes file names)");
  app.add_option("--strategy", a.strategy, "exhaustive (default) or halving (all at budget/4, best quarter at full budget)");
  app.add_option("--max-candidates", a.max_candidates, "at most N candidates per problem (default first), 0 = all");
  app.add_option("--budget-ms", a.budget_ms, "measured GPU time per candidate, milliseconds (default 100)");
  app.add_option("--watchdog-s", a.watchdog_s, "seconds before a candidate's worker is killed as timed out (default 30)");
  app.add_option("--jobs", a.jobs, "parallel NVRTC compilations (default: all cores)");
  app.add_option("--cache-dir", a.cache_dir, "cubin cache directory (default $KERNTUNE_CACHE_DIR or ~/.cache/kerntune)");
  app.add_flag("--no-cache", a.no_cache, "compile everything; do not read or write the cubin cache");
  app.add_option("--json", a.json_out, "also write the per-problem report as JSON");
  app.add_flag("--compile-only", a.compile_only, "enumerate and compile only (no GPU needed)");
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

  auto* worker = app.add_subcommand("__worker", "(internal) measuring worker process");
  worker->group("");
  std::string worker_db;
  worker->add_option("--db", worker_db)->required();

  CLI11_PARSE(app, argc, argv);
  if (*show) return run_show(show_db, show_family);
  if (*merge) return run_merge(merge_out, merge_in);
  if (*worker) return kt::worker_main(worker_db, 0, 1);
  if (a.arch.empty() || a.shapes.empty()) {
    std::fprintf(stderr, "autotune: --arch and --shapes are required (see --help)\n");
    return 2;
  }
  return run_tune(a, argv_line);
}
