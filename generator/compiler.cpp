#include "generator/compiler.h"

#include <sched.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <regex>
#include <stdexcept>
#include <thread>

#include "cache/hash.h"
#include "generator/arch.h"
#include "generator/embedded.h"
#include "generator/nvrtc.h"

namespace kt {

const std::string& embedded_headers_hash() {
  static const std::string h = [] {
    std::vector<std::string_view> parts;
    for (const auto& f : embedded_headers()) {
      parts.emplace_back(f.name);
      parts.emplace_back(f.data, f.size);
    }
    return content_hash(parts);
  }();
  return h;
}

CompileReport parse_ptxas_log(const std::string& log) {
  CompileReport r;
  std::smatch m;
  static const std::regex regs(R"(Used (\d+) registers)");
  static const std::regex spill(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex smem(R"((\d+) bytes smem)");
  if (std::regex_search(log, m, regs)) r.registers = std::stoi(m[1]);
  if (std::regex_search(log, m, spill)) {
    r.stack_bytes = std::stoi(m[1]);
    r.spill_store_bytes = std::stoi(m[2]);
    r.spill_load_bytes = std::stoi(m[3]);
  }
  if (std::regex_search(log, m, smem)) r.static_smem_bytes = std::stoi(m[1]);
  return r;
}

namespace {
/// The cores this process may run on: its CPU affinity mask (what taskset, Slurm's task binding and cgroup cpusets
/// leave it), else every hardware thread.
int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}
}  // namespace

Compiler::Compiler(CubinCache* cache, int jobs) : cache_(cache), jobs_(jobs) {
  if (jobs_ <= 0) jobs_ = usable_cores();
  nvrtc_version_ = nvrtc_version();
}

void Compiler::set_warning_handler(std::function<void(const std::string&)> handler) {
  std::lock_guard<std::mutex> lock(warn_mu_);
  warn_ = std::move(handler);
}

void Compiler::warn_once(const std::string& cause, const std::string& message) const {
  std::lock_guard<std::mutex> lock(warn_mu_);
  if (!warned_.insert(cause).second) return;
  if (warn_) warn_(message);
  else std::fprintf(stderr, "kerntune: warning: %s\n", message.c_str());
}

std::vector<std::string> Compiler::options(ArchId arch) const {
  return {"--gpu-architecture=" + arch_name(arch), "-std=c++17", "-Xptxas=-v"};
}

std::string Compiler::cache_key(const KernelSource& k) const {
  std::string opts;
  for (const auto& o : options(k.arch)) opts += o + '\n';
  return content_hash({k.name_expression, k.source, embedded_headers_hash(), nvrtc_version_, opts, arch_name(k.arch)});
}

namespace {

std::string program_log(nvrtcProgram prog) {
  size_t n = 0;
  nvrtc().GetProgramLogSize(prog, &n);
  std::string log(n, '\0');
  if (n) nvrtc().GetProgramLog(prog, log.data());
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

CompileResult Compiler::compile(const KernelSource& k) const {
  CompileResult res;
  res.kernel = k;
  res.cache_key = cache_key(k);
  if (cache_) {
    std::string rejected;
    if (auto hit = cache_->get(res.cache_key, k.arch.sm, &rejected)) {
      res.ok = true;
      res.cache_hit = true;
      res.cubin = std::move(hit->cubin);
      res.report = std::move(hit->report);
      return res;
    }
    // Intact (checksum) but not a cubin for this SM: damaged or forged. Compile it again; the put below
    // replaces the entry.
    if (!rejected.empty())
      warn_once("rejected: " + rejected.substr(rejected.find(" rejected: ") + 11),
                rejected + "; compiling it again (further entries rejected for this reason are not reported)");
  }
  const auto& api = nvrtc();
  const auto& headers = embedded_headers();
  std::vector<const char*> hdr_src, hdr_names;
  std::vector<std::string> hdr_storage;
  hdr_storage.reserve(headers.size());
  for (const auto& h : headers) {
    hdr_storage.emplace_back(h.data, h.size);
    hdr_src.push_back(hdr_storage.back().c_str());
    hdr_names.push_back(h.name);
  }
  auto t0 = std::chrono::steady_clock::now();
  nvrtcProgram prog = nullptr;
  nvrtcResult rc = api.CreateProgram(&prog, k.source.c_str(), (k.variant_name + ".cu").c_str(),
                                     static_cast<int>(hdr_src.size()), hdr_src.data(), hdr_names.data());
  if (rc != NVRTC_SUCCESS) {
    res.error = std::string("nvrtcCreateProgram failed: ") + api.GetErrorString(rc);
    return res;
  }
  struct Guard {
    nvrtcProgram* p;
    ~Guard() { nvrtc().DestroyProgram(p); }
  } guard{&prog};
  api.AddNameExpression(prog, k.name_expression.c_str());
  auto opts = options(k.arch);
  std::vector<const char*> copts;
  for (const auto& o : opts) copts.push_back(o.c_str());
  rc = api.CompileProgram(prog, static_cast<int>(copts.size()), copts.data());
  std::string log = program_log(prog);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (rc != NVRTC_SUCCESS) {
    res.error = std::string(api.GetErrorString(rc)) + "\n" + log;
    return res;
  }
  const char* lowered = nullptr;
  if (api.GetLoweredName(prog, k.name_expression.c_str(), &lowered) != NVRTC_SUCCESS || !lowered) {
    res.error = "nvrtcGetLoweredName failed for " + k.name_expression;
    return res;
  }
  size_t cubin_size = 0;
  if ((rc = api.GetCUBINSize(prog, &cubin_size)) != NVRTC_SUCCESS || cubin_size == 0) {
    res.error = std::string("nvrtcGetCUBINSize failed: ") + api.GetErrorString(rc);
    return res;
  }
  res.cubin.resize(cubin_size);
  api.GetCUBIN(prog, res.cubin.data());
  res.report = parse_ptxas_log(log);
  res.report.compile_ms = ms;
  res.report.lowered_name = lowered;
  res.report.log = log;
  res.ok = true;
  if (!cache_) return res;
  // A cache that cannot take the cubin (read-only, full disk, permissions, a file where a folder should
  // be) costs a later recompile, nothing more: the compile result stands.
  if (!cache_->writable()) {
    res.cache_warning = "cubin cache '" + cache_->dir() + "' is read-only";
    warn_once("read-only", res.cache_warning + ": its entries are used, newly compiled kernels are not stored");
    return res;
  }
  try {
    cache_->put(res.cache_key, CubinEntry{res.cubin, res.report});
  } catch (const std::exception& e) {
    const auto* w = dynamic_cast<const CacheWriteError*>(&e);
    res.cache_warning = e.what();
    cache_write_failures_.fetch_add(1, std::memory_order_relaxed);
    warn_once("write: " + (w ? w->cause() : res.cache_warning),
              res.cache_warning +
                  " (the compiled kernel is used, not cached; further cache write failures with "
                  "this cause are not reported)");
  }
  return res;
}

std::vector<CompileResult> Compiler::compile_all(
    const std::vector<KernelSource>& kernels,
    const std::function<void(size_t, size_t, const CompileResult&)>& progress) const {
  std::vector<CompileResult> results(kernels.size());
  std::atomic<size_t> next{0};
  size_t done = 0;
  std::mutex mu;
  auto worker = [&] {
    for (size_t i = next++; i < kernels.size(); i = next++) {
      CompileResult r;
      try {
        r = compile(kernels[i]);
      } catch (const std::exception& e) {
        r.kernel = kernels[i];
        r.error = e.what();
      }
      std::lock_guard<std::mutex> lock(mu);
      results[i] = std::move(r);
      ++done;
      if (progress) progress(done, kernels.size(), results[i]);
    }
  };
  int n = std::min<int>(jobs_, static_cast<int>(kernels.size()));
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace kt
