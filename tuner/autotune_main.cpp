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

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
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
#include "tuner/sweep_sample.h"
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
  std::string only;  ///< ECMAScript regex: keep the candidates whose variant name it matches (the default stays)
  double budget_ms = 100, watchdog_s = 30;
  bool compile_only = false, retune = false, no_cache = false;
  int sample = -1;  ///< --sample N (compile-only): kernel classes + defaults + N more (tuner/sweep_sample.h); -1 all
  uint64_t sample_seed = 1;
};

/// One problem of one family, family-neutral: what the tuning loop, the database and the report need.
struct Item {
  std::string family, key;
  nlohmann::json problem;
  double flops = 0, bytes = 0;          ///< for TFLOP/s and GB/s (bytes 0 when not meaningful)
  std::vector<nlohmann::json> configs;  ///< candidates, default first
  std::vector<std::string> variants;    ///< per candidate
  std::vector<size_t> source;           ///< per candidate: index of its binary in the compile list
  std::string default_variant;
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
  std::vector<kt::attn::Problem> attn_problems;
  std::vector<kt::qkv::Problem> qkv_problems;
  try {
    arch = kt::parse_arch(a.arch);
    if (arch.sm == 90 && !arch.arch_specific) {
      // Hopper's arch-specific features (wgmma) need sm_90a cubins; they run on exactly the GPUs sm_90 names (CC 9.0).
      arch.arch_specific = true;
      std::fprintf(stderr, "autotune: --arch sm_90 tunes for sm_90a (adds the wgmma kernels; the cubins run on CC 9.0)\n");
    }
    shapes = kt::load_shapes(a.shapes);
    if (a.families.empty()) {
      if (!shapes.prefill.empty()) a.families.push_back(kt::attn::kFamily);
      if (!shapes.qkv_tokens.empty()) a.families.push_back(kt::qkv::kFamily);
    }
    for (const auto& f : a.families) {
      kt::find_family(f);
      if (f == kt::attn::kFamily) attn_problems = kt::attention_prefill_problems(shapes);
      if (f == kt::qkv::kFamily) qkv_problems = kt::qkv_proj_problems(shapes);
    }
    if (a.strategy != "exhaustive" && a.strategy != "halving")
      throw std::invalid_argument("unknown --strategy '" + a.strategy + "': use exhaustive or halving");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autotune: %s\n", e.what());
    return 2;
  }

  // GPU: probed by a worker process (this process never initializes CUDA).
  std::string self = "/proc/self/exe";
  std::unique_ptr<kt::WorkerPool> pool;
  kt::db::DeviceRecord device;
  if (a.sample >= 0 && !a.compile_only) {
    std::fprintf(stderr, "autotune: --sample chooses what --compile-only compiles; add --compile-only\n");
    return 2;
  }
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

  // ---- enumerate: one work item per problem, its candidates in a deterministic order (default first) ----
  std::vector<kt::KernelSource> sources;
  std::map<std::string, size_t> index;  // family + name expression -> sources index (one binary per expression)
  std::vector<Item> items;
  // --only: candidates whose variant name matches the regex (the default config always stays: it is the baseline).
  std::regex only_re;
  try {
    if (!a.only.empty()) only_re = std::regex(a.only, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    std::fprintf(stderr, "autotune: --only '%s' is not a valid regular expression: %s\n", a.only.c_str(), e.what());
    return 2;
  }
  auto only_match = [&](const std::string& name) { return a.only.empty() || std::regex_search(name, only_re); };
  auto keep_only = [](auto& v, auto pred) { v.erase(std::remove_if(v.begin(), v.end(), [&](const auto& c) { return !pred(c); }), v.end()); };
  auto add_source = [&](kt::KernelSource src) {
    const std::string id = src.family + "|" + src.name_expression;
    auto it = index.find(id);
    if (it != index.end()) return it->second;
    index.emplace(id, sources.size());
    sources.push_back(std::move(src));
    return sources.size() - 1;
  };
  for (const auto& p : attn_problems) {
    Item it{kt::attn::kFamily, p.key(), kt::attn::problem_to_json(p), p.flops(), 0, {}, {}, {}, ""};
    auto valid = kt::attn::valid_configs(p, arch);
    const auto def = kt::attn::default_config(arch, p);
    std::stable_partition(valid.begin(), valid.end(), [&](const auto& c) { return kt::attn::same_config(c, def); });
    keep_only(valid, [&](const auto& c) { return kt::attn::same_config(c, def) || only_match(kt::attn::variant_name(p, c, arch)); });
    if (a.max_candidates > 0 && int(valid.size()) > a.max_candidates) valid.resize(size_t(a.max_candidates));
    it.default_variant = kt::attn::variant_name(p, def, arch);
    for (const auto& c : valid) {
      it.configs.push_back(kt::attn::config_to_json(c));
      it.variants.push_back(kt::attn::variant_name(p, c, arch));
      it.source.push_back(add_source(kt::attn::kernel_source(p, c, arch)));
    }
    items.push_back(std::move(it));
  }
  for (const auto& p : qkv_problems) {
    Item it{kt::qkv::kFamily, p.key(), kt::qkv::problem_to_json(p), p.flops(), p.min_bytes(), {}, {}, {}, ""};
    auto valid = kt::qkv::valid_configs(p, arch);
    const auto def = kt::qkv::default_config(arch, p);
    std::stable_partition(valid.begin(), valid.end(), [&](const auto& c) { return kt::qkv::same_config(c, def); });
    keep_only(valid, [&](const auto& c) { return kt::qkv::same_config(c, def) || only_match(kt::qkv::variant_name(p, c, arch)); });
    if (a.max_candidates > 0 && int(valid.size()) > a.max_candidates) valid.resize(size_t(a.max_candidates));
    it.default_variant = kt::qkv::variant_name(p, def, arch);
    for (const auto& c : valid) {
      it.configs.push_back(kt::qkv::config_to_json(c));
      it.variants.push_back(kt::qkv::variant_name(p, c, arch));
      it.source.push_back(add_source(kt::qkv::kernel_source(p, c, arch)));
    }
    items.push_back(std::move(it));
  }
  std::printf("autotune %s: %s, %s, %zu attention_prefill + %zu qkv_proj problems, %zu distinct binaries, NVRTC %s%s\n",
              KT_VERSION, shapes.model.name.c_str(), a.arch.c_str(), attn_problems.size(), qkv_problems.size(),
              sources.size(), kt::nvrtc_version().c_str(), use_gpu ? (", on " + device.name).c_str() : "");

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
    std::printf("autotune: --sample %d: %zu of %zu binaries: %zu kernel classes, %zu more defaults, %zu sampled (seed %llu)\n",
                a.sample, kept.size(), sources.size(), st.classes, st.defaults, st.random,
                static_cast<unsigned long long>(a.sample_seed));
    sources = std::move(kept);  // the items' source indices are stale from here: compile-only returns after compiling
  }

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
      if (r.ok) db->put_binary(binary_record(r, compiler));
    for (const auto& it : items)
      for (size_t c = 0; c < it.variants.size(); ++c) {
        const auto& r = results[it.source[c]];
        resources[it.variants[c]] = {r.report.registers, r.report.static_smem_bytes + int(r.kernel.dynamic_smem_bytes)};
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autotune: %s\n", e.what());
    return 2;
  }

  // ---- plan: what each problem still needs ----
  struct Todo {
    size_t item;
    std::vector<size_t> cands;  // indices into the item's configs
  };
  std::vector<Todo> todo;
  size_t total = 0, skipped = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    Todo t{i, {}};
    for (size_t c = 0; c < items[i].configs.size(); ++c) {
      if (!a.retune && db->has_measurement(device_id, items[i].family, items[i].key, items[i].variants[c])) {
        ++skipped;
        continue;
      }
      t.cands.push_back(c);
    }
    total += t.cands.size();
    todo.push_back(std::move(t));
  }
  std::printf("autotune: %zu candidates to measure (%zu already in %s%s), strategy %s, budget %.0f ms each\n", total,
              skipped, a.db.c_str(), a.retune ? "" : "; --retune measures them again", a.strategy.c_str(), a.budget_ms);

  std::signal(SIGINT, on_sigint);
  std::signal(SIGTERM, on_sigint);
  Progress progress(total);
  auto record = [&](const Item& it, size_t c, const kt::WorkerResult* wr) {
    const auto& cr = results[it.source[c]];
    kt::db::Measurement m;
    m.run_id = run_id;
    m.device_id = device_id;
    m.family = it.family;
    m.problem_key = it.key;
    m.problem_json = it.problem.dump();
    m.variant_name = it.variants[c];
    m.config_json = it.configs[c].dump();
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
    db->add_measurements({m});
  };
  auto measure_cmd = [&](const Item& it, size_t c, double budget) {
    return nlohmann::json{{"cmd", "measure"}, {"config", it.configs[c]}, {"variant", it.variants[c]},
                          {"binary_hash", results[it.source[c]].cache_key}, {"budget_ms", budget}};
  };

  int no_winner = 0;
  double clock_min = 1e9, clock_max = -1;  // SM clock seen by this run's measurements (NVML)
  nlohmann::json report = nlohmann::json::array();
  std::vector<std::string> lines;
  for (auto& t : todo) {
    if (g_interrupted) break;
    const Item& it = items[t.item];
    int n_compiled = 0, n_failed = 0, n_verified = 0;
    if (!t.cands.empty()) {
      try {
        // float64 reference rows: attention rows are cheap (S_k x D); a qkv row costs N x K.
        pool->set_problem({{"cmd", "problem"}, {"family", it.family}, {"problem", it.problem}, {"seed", 1},
                           {"ref_rows", it.family == kt::qkv::kFamily ? 48 : 512}});
      } catch (const std::exception& e) {
        std::fprintf(stderr, "autotune: %s: %s\n", it.key.c_str(), e.what());
        no_winner++;
        continue;
      }
      // Round 1 (halving: a quarter of the budget for everyone), round 2 (full budget, best quarter).
      std::vector<std::pair<size_t, kt::WorkerResult>> round;
      const bool halving = a.strategy == "halving" && t.cands.size() > 4;
      const double budget1 = halving ? std::max(5.0, a.budget_ms / 4) : a.budget_ms;
      for (size_t c : t.cands) {
        if (g_interrupted) break;
        progress.step(it.key + " " + it.variants[c].substr(it.variants[c].find("__", 10) + 2));
        if (!results[it.source[c]].ok) {
          record(it, c, nullptr);
          continue;
        }
        auto wr = pool->measure(measure_cmd(it, c, budget1));
        if (halving && wr.status == kt::db::Status::ok) round.push_back({c, wr});
        else record(it, c, &wr);
      }
      if (halving && !g_interrupted) {
        std::sort(round.begin(), round.end(), [](const auto& x, const auto& y) { return x.second.median_us < y.second.median_us; });
        const size_t keep = std::max<size_t>(1, (t.cands.size() + 3) / 4);
        for (size_t k = 0; k < round.size(); ++k) {
          if (k >= keep) {
            record(it, round[k].first, &round[k].second);
            continue;
          }
          if (g_interrupted) break;
          auto wr = pool->measure(measure_cmd(it, round[k].first, a.budget_ms));
          record(it, round[k].first, &wr);
        }
      }
    }
    // Report from the database (includes rows from earlier, resumed runs).
    const auto ms = db->measurements(device.name, it.family, it.key);
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
    // The winner is the database's (winners view): the same answer `autotune show` and the runtime give.
    int w = -1;
    if (const auto dbw = db->winner(device.name, it.family, it.key))
      for (size_t j = 0; j < cands.size(); ++j)
        if (cands[j].variant == dbw->variant_name) w = int(j);
    // After --retune the view may answer from an older ok row of a variant whose latest row failed:
    // report from the latest rows then (same rule, tuner/selection.h).
    if (w >= 0 && cands[w].status != kt::db::Status::ok) w = kt::pick_winner(cands);
    nlohmann::json pj = {{"family", it.family}, {"problem", it.key}, {"flops", it.flops}, {"bytes", it.bytes},
                         {"candidates", cands.size()}};
    if (w < 0) {
      ++no_winner;
      lines.push_back(it.key + "  NO CANDIDATE PASSED VERIFICATION");
      report.push_back(pj);
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
    std::snprintf(buf, sizeof buf, "%-62s %-30s %10.1f %8.1f %8.0f %8s %8s %3d/%3d/%3d/%3d", it.key.c_str(),
                  win.variant.substr(a0, a1 - a0).c_str(), win.median_us, tflops, gbs,
                  def_us > 0 ? (std::to_string(def_us / win.median_us).substr(0, 4) + "x").c_str() : "n/a",
                  runner_up > 0 ? (std::to_string((runner_up / win.median_us - 1) * 100).substr(0, 4) + "%").c_str() : "n/a",
                  n_compiled, n_verified, n_verified, n_failed);
    lines.push_back(buf);
    pj["winner"] = win.variant;
    pj["median_us"] = win.median_us;
    pj["tflops"] = tflops;
    pj["gbps"] = gbs;
    pj["default_us"] = def_us;
    pj["speedup_vs_default"] = def_us > 0 ? def_us / win.median_us : 0;
    pj["runner_up_us"] = runner_up;
    report.push_back(pj);
  }
  progress.end_line();
  db->end_run(run_id, now_s());
  std::printf("\n%-62s %-30s %10s %8s %8s %8s %8s %s\n", "problem", "winner", "median_us", "TFLOP/s", "GB/s", "vs_dflt",
              "margin", "compiled/verified/timed/failed");
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
  app.add_option("--arch", a.arch, "target architecture: sm_80, sm_86, sm_89, sm_90 (tuned as sm_90a), sm_90a (must run on the GPU)");
  app.add_option("--shapes", a.shapes, "shapes file (kerntune JSON) or a Hugging Face config.json");
  app.add_option("--db", a.db, "tuning database (SQLite); created if missing, resumed if present");
  app.add_option("--families", a.families, "families to tune (default: all the shapes file names)");
  app.add_option("--strategy", a.strategy, "exhaustive (default) or halving (all at budget/4, best quarter at full budget)");
  app.add_option("--max-candidates", a.max_candidates, "at most N candidates per problem (default first), 0 = all");
  app.add_option("--only", a.only,
                 "keep only the candidates whose variant name matches this regular expression (ECMAScript, searched "
                 "anywhere in the name; the default config is always kept); applied before --max-candidates");
  app.add_option("--budget-ms", a.budget_ms, "measured GPU time per candidate, milliseconds (default 100)");
  app.add_option("--watchdog-s", a.watchdog_s, "seconds before a candidate's worker is killed as timed out (default 30)");
  app.add_option("--jobs", a.jobs, "parallel NVRTC compilations (default: all cores)");
  app.add_option("--cache-dir", a.cache_dir, "cubin cache directory (default $KERNTUNE_CACHE_DIR or ~/.cache/kerntune)");
  app.add_flag("--no-cache", a.no_cache, "compile everything; do not read or write the cubin cache");
  app.add_option("--json", a.json_out, "also write the per-problem report as JSON");
  app.add_flag("--compile-only", a.compile_only, "enumerate and compile only (no GPU needed)");
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
