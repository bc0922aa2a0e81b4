// autotune: enumerate, compile (NVRTC, parallel, cached), and on a GPU verify + time every variant of
// every problem a shapes file names.
//
//   autotune --arch sm_90a --shapes shapes/qwen7b.json --compile-only
//   autotune --arch sm_90  --shapes shapes/qwen7b.json [--budget-ms 100] [--json out.json]
//
// Exit codes: 0 ok; 1 a valid variant failed to compile or no candidate passed verification;
// 2 bad input (arguments, shapes file, unsupported problem, arch mismatch).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unistd.h>

#include "cuda/driver.h"
#include "generator/arch.h"
#include "generator/attention_family.h"
#include "generator/nvrtc.h"
#include "generator/registry.h"
#include "reference/dtype_convert.h"
#include "tuner/attention_problems.h"
#include "tuner/shapes_file.h"
#include "tuner/tune_attention.h"

namespace {

struct Args {
  std::string arch;
  std::string shapes;
  std::vector<std::string> families;
  std::string cache_dir;
  std::string json_out;
  int jobs = 0;
  double budget_ms = 100;
  bool compile_only = false;
  bool no_cache = false;
};

void print_compile_table(const std::vector<kt::CompileResult>& results) {
  std::printf("%-70s %5s %7s %7s %9s %6s\n", "variant", "regs", "spill_B", "smem_KiB", "compile_ms", "cache");
  for (const auto& r : results) {
    if (!r.ok) {
      std::printf("%-70s COMPILE FAILED\n", r.kernel.variant_name.c_str());
      continue;
    }
    std::printf("%-70s %5d %7d %7.1f %9.0f %6s\n", r.kernel.variant_name.c_str(), r.report.registers,
                r.report.spill_store_bytes + r.report.spill_load_bytes,
                (r.report.static_smem_bytes + r.kernel.dynamic_smem_bytes) / 1024.0,
                r.report.compile_ms, r.cache_hit ? "hit" : "miss");
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kerntune autotune: compile, verify and time kernel variants for the problems of a shapes file"};
  Args a;
  app.add_option("--arch", a.arch, "target architecture: sm_80, sm_86, sm_89, sm_90, sm_90a")->required();
  app.add_option("--shapes", a.shapes, "shapes file (kerntune JSON) or a Hugging Face config.json")->required();
  app.add_option("--families", a.families, "families to tune (default: all the shapes file names)");
  app.add_option("--cache-dir", a.cache_dir, "cubin cache directory (default $KERNTUNE_CACHE_DIR or ~/.cache/kerntune)");
  app.add_flag("--no-cache", a.no_cache, "compile everything, do not read or write the cubin cache");
  app.add_option("--jobs", a.jobs, "parallel NVRTC compilations (default: all cores)");
  app.add_option("--budget-ms", a.budget_ms, "measured GPU time per candidate, milliseconds");
  app.add_option("--json", a.json_out, "write the per-problem results as JSON to this file");
  app.add_flag("--compile-only", a.compile_only, "enumerate and compile only (no GPU needed)");
  CLI11_PARSE(app, argc, argv);

  kt::ArchId arch;
  kt::ShapesFile shapes;
  std::vector<kt::attn::Problem> problems;
  try {
    arch = kt::parse_arch(a.arch);
    if (a.families.empty()) a.families = {kt::attn::kFamily};
    for (const auto& f : a.families) kt::find_family(f);
    shapes = kt::load_shapes(a.shapes);
    problems = kt::attention_prefill_problems(shapes);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autotune: %s\n", e.what());
    return 2;
  }

  bool use_gpu = !a.compile_only;
  if (use_gpu) {
    std::string why;
    if (!kt::cuda::gpu_available(&why)) {
      std::printf("autotune: no GPU found (%s): running the compile-only sweep\n", why.c_str());
      use_gpu = false;
    } else {
      const auto dev = kt::cuda::device_info(0);
      if (!kt::arch_runs_on(arch, dev.cc_major, dev.cc_minor)) {
        std::fprintf(stderr, "autotune: --arch %s does not run on %s (compute capability %d.%d); use --compile-only to build for another GPU\n",
                     a.arch.c_str(), dev.name.c_str(), dev.cc_major, dev.cc_minor);
        return 2;
      }
    }
  }

  // ---- enumerate ----
  std::vector<kt::KernelSource> sources;
  std::map<std::string, size_t> index;  // variant name -> sources index
  std::vector<std::vector<kt::attn::Config>> configs(problems.size());
  size_t raw = kt::attn::config_space().size();
  for (size_t i = 0; i < problems.size(); ++i) {
    configs[i] = kt::attn::valid_configs(problems[i], arch);
    for (const auto& c : configs[i]) {
      auto src = kt::attn::kernel_source(problems[i], c, arch);
      if (index.emplace(src.variant_name, sources.size()).second) sources.push_back(std::move(src));
    }
  }
  std::printf("autotune: %s, %s, %zu attention_prefill problems, %zu of %zu configs valid per problem class, %zu distinct variants, NVRTC %s\n",
              shapes.model.name.c_str(), a.arch.c_str(), problems.size(), configs.empty() ? 0 : configs[0].size(), raw,
              sources.size(), kt::nvrtc_version().c_str());

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
  auto results = compiler.compile_all(sources, [&](size_t done, size_t total, const kt::CompileResult& r) {
    if (tty)
      std::printf("\rcompiling %zu/%zu", done, total);
    else if (done % 10 == 0 || done == total || !r.ok)
      std::printf("compiled %zu/%zu%s\n", done, total, r.ok ? "" : (" FAILED: " + r.kernel.variant_name).c_str());
    std::fflush(stdout);
  });
  if (tty) std::printf("\n");
  print_compile_table(results);
  size_t failed = 0, spilling = 0;
  for (const auto& r : results) {
    if (!r.ok) {
      ++failed;
      std::fprintf(stderr, "autotune: %s failed to compile:\n%s\n", r.kernel.variant_name.c_str(), r.error.c_str());
    } else if (r.report.spill_store_bytes + r.report.spill_load_bytes > 0) {
      ++spilling;
    }
  }
  std::printf("autotune: compiled %zu variants on %d threads: %zu failed, %zu spill registers, cache %s\n",
              results.size(), compiler.jobs(), failed, spilling,
              cache ? (std::to_string(cache->hits()) + " hits / " + std::to_string(cache->misses()) + " misses").c_str()
                    : "off");
  if (!use_gpu) return failed ? 1 : 0;

  // ---- verify + time on the GPU ----
  kt::cuda::Context ctx(0);
  kt::cuda::Stream stream;
  const auto dev = kt::cuda::device_info(0);
  std::printf("autotune: timing on %s (%d SMs, L2 %d MiB, driver %d)\n", dev.name.c_str(), dev.sm_count,
              dev.l2_bytes >> 20, dev.driver_version);
  kt::attn::TuneOptions opt;
  opt.budget_ms = a.budget_ms;
  opt.l2_bytes = size_t(dev.l2_bytes);
  nlohmann::json out = nlohmann::json::array();
  int no_winner = 0;
  std::printf("\n%-62s %-44s %9s %8s %8s %8s %s\n", "problem", "winner", "median_us", "TFLOP/s", "vs_dflt", "margin",
              "compiled/verified/timed/failed");
  for (size_t i = 0; i < problems.size(); ++i) {
    const auto& p = problems[i];
    std::vector<const kt::CompileResult*> compiled;
    for (const auto& c : configs[i]) compiled.push_back(&results[index.at(kt::attn::variant_name(p, c, arch))]);
    auto tr = kt::attn::tune_problem(p, arch, configs[i], compiled, opt, stream.get());
    int n_ok = 0, n_fail = 0, n_compiled = 0;
    for (const auto& c : tr.candidates) {
      n_compiled += c.status != kt::attn::Status::compile_failed;
      (c.status == kt::attn::Status::ok ? n_ok : n_fail)++;
    }
    nlohmann::json pj = {{"problem", p.key()}, {"flops", p.flops()}, {"candidates", nlohmann::json::array()}};
    for (const auto& c : tr.candidates)
      pj["candidates"].push_back({{"variant", c.variant}, {"status", kt::attn::status_name(c.status)}, {"error", c.error},
                                  {"median_us", c.timing.median_us}, {"p20_us", c.timing.p20_us}, {"p80_us", c.timing.p80_us},
                                  {"registers", c.report.registers}, {"rel_l2", c.verdict.rel_l2}});
    if (tr.winner < 0) {
      ++no_winner;
      std::printf("%-62s NO CANDIDATE PASSED VERIFICATION\n", p.key().c_str());
      out.push_back(pj);
      continue;
    }
    const auto& w = tr.candidates[tr.winner];
    double runner_up = 0;
    for (size_t j = 0; j < tr.candidates.size(); ++j)
      if (int(j) != tr.winner && tr.candidates[j].status == kt::attn::Status::ok &&
          (runner_up == 0 || tr.candidates[j].timing.median_us < runner_up))
        runner_up = tr.candidates[j].timing.median_us;
    const double tflops = p.flops() / (w.timing.median_us * 1e-6) / 1e12;
    const double vs_default = tr.default_index >= 0 && tr.candidates[tr.default_index].status == kt::attn::Status::ok
                                  ? tr.candidates[tr.default_index].timing.median_us / w.timing.median_us
                                  : 0;
    std::printf("%-62s %-44s %9.1f %8.1f %7.2fx %7.1f%% %d/%d/%d/%d\n", p.key().c_str(),
                w.variant.substr(std::string(kt::attn::kFamily).size() + 2).c_str(), w.timing.median_us, tflops,
                vs_default, runner_up > 0 ? (runner_up / w.timing.median_us - 1) * 100 : 0.0, n_compiled,
                n_compiled - (int)std::count_if(tr.candidates.begin(), tr.candidates.end(), [](const auto& c) {
                  return c.status == kt::attn::Status::wrong_result || c.status == kt::attn::Status::launch_failed;
                }),
                n_ok, n_fail);
    pj["winner"] = w.variant;
    pj["median_us"] = w.timing.median_us;
    pj["tflops"] = tflops;
    pj["speedup_vs_default"] = vs_default;
    out.push_back(pj);
    std::fflush(stdout);
  }
  if (!a.json_out.empty()) {
    nlohmann::json doc = {{"device", dev.name}, {"arch", a.arch}, {"shapes", a.shapes}, {"problems", out}};
    std::ofstream(a.json_out) << doc.dump(1) << "\n";
  }
  return (failed || no_winner) ? 1 : 0;
}
