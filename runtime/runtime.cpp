#include "runtime/runtime.h"

#include <dlfcn.h>

#include <cmath>
#include <tuple>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <unordered_map>

#include "cache/cubin_cache.h"
#include "cuda/driver.h"
#include "generator/arch.h"
#include "generator/compiler.h"
#include "runtime/attention.h"
#include "runtime/loaded_kernel.h"
#include "runtime/qkv.h"

namespace kt {
namespace {

std::string fmt2(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", x);
  return buf;
}

/// "attention_prefill/bf16/d128/causal": the kernel class a tuned winner must share.
std::string class_tag(const attn::Problem& p) {
  return std::string(attn::kFamily) + (p.dtype == DType::f16 ? "/fp16" : "/bf16") + "/d" + std::to_string(p.head_dim) +
         (p.causal ? "/causal" : "/full");
}



}  // namespace

namespace {

/// Steps 1 and 2 of the lookup chain, shared by the families. cands: usable tuned winners (each has `w`,
/// the db::Winner). Exact: the candidate whose problem key is `key` (smallest measurement id among
/// duplicates). Nearest: the smallest rank(c), a tuple compared lexicographically; its first element is
/// the log distance, quantized to 1e-9 so that equal distances tie exactly. Fills `ch` and returns true,
/// or returns false when no candidate is usable (the caller then takes the family default).
template <class Choice, class Cand, class Rank, class Fill>
bool exact_or_nearest(const std::vector<Cand>& cands, const std::string& key, const std::string& device_name, Rank rank,
                      Fill fill, Choice& ch) {
  const Cand* exact = nullptr;
  for (const auto& c : cands)
    if (c.w->problem_key == key && (!exact || c.w->measurement_id < exact->w->measurement_id)) exact = &c;
  if (exact) {
    ch.step = "exact";
    fill(ch, *exact);
    ch.why = "tuned for exactly this problem on " + device_name + " (median " + fmt2(exact->w->median_us) + " us)";
    return true;
  }
  const Cand* best = nullptr;
  for (const auto& c : cands)
    if (!best || rank(c) < rank(*best)) best = &c;
  if (!best) return false;
  ch.step = "nearest";
  fill(ch, *best);
  ch.why = "nearest tuned problem " + best->w->problem_key + " (log distance " +
           fmt2(double(std::get<0>(rank(*best))) * 1e-9) + ") on " + device_name;
  return true;
}

/// A log distance on the 1e-9 grid used by rank tuples.
long long quantized(double d) { return std::llround(d * 1e9); }

}  // namespace

namespace {

/// A tuned winner parsed back into its family's problem and config.
template <class P, class C>
struct TunedRow {
  const db::Winner* w;
  P p;
  C c;
};

using Candidate = TunedRow<attn::Problem, attn::Config>;
using QkvCandidate = TunedRow<qkv::Problem, qkv::Config>;

/// The winners a family may answer from: its family and device class, rows this build can parse, the same
/// kernel class as the asked problem (same_class), and a config usable for it here (unusable() == nullptr;
/// those counted in *rejected).
template <class P, class C, class ParseP, class ParseC, class SameClass, class Unusable>
std::vector<TunedRow<P, C>> usable_rows(const std::vector<db::Winner>& winners, const char* family,
                                        const std::string& device_name, ParseP parse_p, ParseC parse_c,
                                        SameClass same_class, Unusable unusable, int* rejected) {
  std::vector<TunedRow<P, C>> out;
  for (const auto& w : winners) {
    if (w.family != family || w.device_name != device_name) continue;
    TunedRow<P, C> r{&w, {}, {}};
    try {
      r.p = parse_p(nlohmann::json::parse(w.problem_json));
      r.c = parse_c(nlohmann::json::parse(w.config_json));
    } catch (const std::exception&) {
      continue;  // a row this build cannot read is not a candidate
    }
    if (!same_class(r.p)) continue;
    if (unusable(r.c) != nullptr) {
      ++*rejected;
      continue;
    }
    out.push_back(r);
  }
  return out;
}

/// What every family's choice takes from the tuned row: its config and its own binary (e.g. an sm_90 cubin
/// on an sm_90a runtime).
template <class Choice, class Row>
void fill_from_row(Choice& ch, const Row& r) {
  ch.config = r.c;
  ch.variant_name = r.w->variant_name;
  ch.binary_hash = r.w->binary_hash;
  ch.tuned_problem_key = r.w->problem_key;
  ch.tuned_median_us = r.w->median_us;
}

}  // namespace

ArchId arch_for_compute_capability(int cc_major, int cc_minor) {
  if (cc_major < 8)
    throw UnsupportedDevice("compute capability " + std::to_string(cc_major) + "." + std::to_string(cc_minor) +
                            " is not supported: kerntune's kernels need sm_80 or newer");
  if (cc_major == 9 && cc_minor == 0) return ArchId{90, true};
  return ArchId{cc_major * 10 + cc_minor, false};
}

AttentionChoice resolve_attention(const std::vector<db::Winner>& winners, const std::string& device_name, ArchId arch,
                                  const attn::Problem& p) {
  attn::check_problem(p);
  const std::string key = p.key();

  // Usable winners: this family and device class, parsable, same kernel class, config valid here.
  int rejected_invalid = 0;
  const auto cands = usable_rows<attn::Problem, attn::Config>(
      winners, attn::kFamily, device_name, attn::problem_from_json, attn::config_from_json,
      [&](const attn::Problem& t) { return t.dtype == p.dtype && t.head_dim == p.head_dim && t.causal == p.causal; },
      [&](const attn::Config& c) { return attn::invalid_reason(p.dtype, p.head_dim, p.causal, c, arch); },
      &rejected_invalid);
  auto fill = [](AttentionChoice& ch, const Candidate& c) { fill_from_row(ch, c); };

  // 1. exact problem key; 2. nearest in log space of the sequence lengths, ties by |ln| of batch * heads, then key.
  const double bh = double(p.batch) * p.num_heads;
  auto rank = [&](const Candidate& c) {
    return std::make_tuple(quantized(std::fabs(std::log(double(p.seqlen_q) / c.p.seqlen_q)) +
                                     std::fabs(std::log(double(p.seqlen_k) / c.p.seqlen_k))),
                           quantized(std::fabs(std::log(bh / (double(c.p.batch) * c.p.num_heads)))), c.w->problem_key);
  };
  AttentionChoice found;
  if (exact_or_nearest(cands, key, device_name, rank, fill, found)) return found;

  // 3. the family's built-in default.
  AttentionChoice ch;
  ch.step = "default";
  ch.config = attn::default_config(arch, p);
  ch.variant_name = attn::variant_name(p, ch.config, arch);
  ch.why = "no tuned " + class_tag(p) + " problem for " + (device_name.empty() ? "this device" : device_name);
  if (rejected_invalid > 0)
    ch.why += " (" + std::to_string(rejected_invalid) + " tuned config(s) invalid on " + arch_name(arch) + ")";
  ch.why += ": built-in default for " + arch_name(arch);
  return ch;
}

namespace {

const char* qkv_dtype_tag(DType d) { return d == DType::f16 ? "fp16" : "bf16"; }
const char* qkv_format_tag(quant::Format f) { return qkv::format_tag(f); }

/// "qkv_proj/bf16/nf4/k3584/h28/kv4/d128/bias/rope": the class a tuned qkv winner must share (its key less m).
std::string qkv_class_tag(const qkv::Problem& p) {
  return std::string(qkv::kFamily) + "/" + qkv_dtype_tag(p.dtype) + "/" + qkv_format_tag(p.format) + "/k" +
         std::to_string(p.k) + "/h" + std::to_string(p.num_heads) + "/kv" + std::to_string(p.num_kv_heads) + "/d" +
         std::to_string(p.head_dim) + (p.has_bias ? "/bias" : "/nobias") + (p.rope ? "/rope" : "/norope");
}

bool same_qkv_class(const qkv::Problem& a, const qkv::Problem& b) {
  return a.dtype == b.dtype && a.format == b.format && a.k == b.k && a.num_heads == b.num_heads &&
         a.num_kv_heads == b.num_kv_heads && a.head_dim == b.head_dim && a.has_bias == b.has_bias && a.rope == b.rope;
}

/// Why config c cannot compute p on arch, or nullptr. Correctness only: not the by-M pruning of valid_configs.
const char* qkv_unusable(const qkv::Problem& p, const qkv::Config& c, ArchId arch) {
  if (const char* r = qkv::invalid_reason(p.dtype, p.format, p.head_dim, p.rope, c, arch)) return r;
  const int step = c.mainloop == qkv::Mainloop::gemv ? qkv::gemv_step_k(p.format) : qkv::tile_k(c);
  if (qkv::k_split_blocks(c) > 1 && qkv::k_split_blocks(c) > p.k / step) return "split_k exceeds k / tile_k";
  if (c.mainloop == qkv::Mainloop::gemv && qkv::gemv_smem_bytes(c, p.format, p.k) > qkv::gemv_smem_cap(arch.sm))
    return "gemv shared memory for this k exceeds the per-block limit";
  return nullptr;
}



}  // namespace

QkvChoice resolve_qkv(const std::vector<db::Winner>& winners, const std::string& device_name, ArchId arch,
                      const qkv::Problem& p) {
  qkv::check_problem(p);
  const std::string key = p.key();

  // Usable winners: this family and device class, parsable, same kernel class and k, config runs p here.
  int rejected_invalid = 0;
  const auto cands = usable_rows<qkv::Problem, qkv::Config>(
      winners, qkv::kFamily, device_name, qkv::problem_from_json, qkv::config_from_json,
      [&](const qkv::Problem& t) { return same_qkv_class(t, p) && t.m >= 1; },
      [&](const qkv::Config& c) { return qkv_unusable(p, c, arch); }, &rejected_invalid);
  auto fill = [](QkvChoice& ch, const QkvCandidate& c) { fill_from_row(ch, c); };

  // 1. exact problem key; 2. nearest token count in log space, ties to the larger m', then key, then id. (A config
  // tuned for more tokens runs fewer token tiles here, so its grid stays within the waves it was tuned for; one tuned
  // for fewer may need more: on the H100, fp16 weights at M = 128 took 24.0 us in CUDA graphs with the M = 64 winner
  // (two waves) and 17.7 with the M = 256 one; 15.4 tuned for 128. NOTES qkv_proj 28.)
  auto rank = [&](const QkvCandidate& c) {
    return std::make_tuple(quantized(std::fabs(std::log(double(p.m) / c.p.m))), -c.p.m, c.w->problem_key,
                           c.w->measurement_id);
  };
  QkvChoice found;
  if (exact_or_nearest(cands, key, device_name, rank, fill, found)) return found;

  // 3. the family's built-in default.
  QkvChoice ch;
  ch.step = "default";
  ch.config = qkv::default_config(arch, p);
  ch.variant_name = qkv::variant_name(p, ch.config, arch);
  ch.why = "no tuned " + qkv_class_tag(p) + " problem for " + (device_name.empty() ? "this device" : device_name);
  if (rejected_invalid > 0)
    ch.why += " (" + std::to_string(rejected_invalid) + " tuned config(s) unusable on " + arch_name(arch) + ")";
  ch.why += ": built-in default for " + arch_name(arch);
  return ch;
}

// ------------------------------------------------------------------------------------------------

namespace {

/// The problem fields as a POD hash key (no allocation to build, hash or compare).
struct ProblemKey {
  int dtype, batch, seqlen_q, seqlen_k, num_heads, num_kv_heads, head_dim, causal;
  bool operator==(const ProblemKey& o) const {
    return dtype == o.dtype && batch == o.batch && seqlen_q == o.seqlen_q && seqlen_k == o.seqlen_k &&
           num_heads == o.num_heads && num_kv_heads == o.num_kv_heads && head_dim == o.head_dim && causal == o.causal;
  }
};
ProblemKey pod_key(const attn::Problem& p) {
  return ProblemKey{static_cast<int>(p.dtype), p.batch, p.seqlen_q, p.seqlen_k, p.num_heads, p.num_kv_heads,
                    p.head_dim, p.causal ? 1 : 0};
}
struct ProblemKeyHash {
  size_t operator()(const ProblemKey& k) const {
    const int f[] = {k.dtype, k.batch, k.seqlen_q, k.seqlen_k, k.num_heads, k.num_kv_heads, k.head_dim, k.causal};
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    for (int x : f) {
      h ^= static_cast<uint32_t>(x);
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

struct Resolved {
  attn::Config config;
  const LoadedKernel* kernel;  // owned by Impl::kernels
};

/// The qkv_proj problem fields as a POD hash key.
struct QkvKey {
  int f[9];  // dtype, format, m, k, num_heads, num_kv_heads, head_dim, has_bias, rope
  bool operator==(const QkvKey& o) const {
    for (int i = 0; i < 9; ++i)
      if (f[i] != o.f[i]) return false;
    return true;
  }
};
QkvKey pod_key(const qkv::Problem& p) {
  return QkvKey{{static_cast<int>(p.dtype), static_cast<int>(p.format), p.m, p.k, p.num_heads, p.num_kv_heads,
                 p.head_dim, p.has_bias ? 1 : 0, p.rope ? 1 : 0}};
}
struct QkvKeyHash {
  size_t operator()(const QkvKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    for (int x : k.f) {
      h ^= static_cast<uint32_t>(x);
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

/// What a qkv launch needs, copied out of the map under the shared lock (no allocation).
struct QkvResolved {
  qkv::Config config;
  const LoadedKernel* kernel;  // owned by Impl::qkv_kernels
  float* workspace;            // owned by the QkvEntry (null when split_k == 1)
  unsigned* counters;
};

/// A resolved qkv problem: its launch data and the split-K buffers it owns.
struct QkvEntry {
  QkvResolved r{};
  cuda::DeviceBuffer workspace, counters;
};

/// cuCtxGetDevice is not in cuda::Api; resolve it from the already loaded driver.
CUdevice device_of_current_context() {
  using Fn = CUresult (*)(CUdevice*);
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) return 0;
  auto fn = reinterpret_cast<Fn>(dlsym(h, "cuCtxGetDevice"));
  CUdevice d = 0;
  if (!fn || fn(&d) != CUDA_SUCCESS) d = 0;
  dlclose(h);
  return d;
}

}  // namespace

struct Runtime::Impl {
  std::unique_ptr<cuda::Context> owned_ctx;  // declared first: destroyed last
  CUcontext ctx = nullptr;
  std::string db_path;
  std::string device_name;
  ArchId arch{};
  int cc_major = 0, cc_minor = 0;
  std::unique_ptr<db::TuningDb> db;
  std::vector<db::Winner> winners;

  // Resolution (database reads, compilation, module loads) is serialized by resolve_mu; the launch
  // path reads `resolved` under a shared lock.
  std::mutex resolve_mu;
  std::unique_ptr<CubinCache> disk_cache;
  std::unique_ptr<Compiler> compiler;
  std::unordered_map<std::string, std::unique_ptr<LoadedKernel>> kernels;  // by variant name
  mutable std::shared_mutex map_mu;
  std::unordered_map<ProblemKey, Resolved, ProblemKeyHash> resolved;

  // qkv_proj: winners, loaded kernels (by name expression: split_k is a launch dimension, so variants that
  // differ only in split_k share one binary) and resolved problems (each owning its split-K buffers; the
  // map's nodes never move, so the raw pointers in QkvResolved stay valid). Guarded as above.
  std::vector<db::Winner> qkv_winners;
  std::unordered_map<std::string, std::unique_ptr<LoadedKernel>> qkv_kernels;
  std::unordered_map<QkvKey, QkvEntry, QkvKeyHash> qkv_resolved;

  void ensure_current() const {
    const auto& a = cuda::api();
    CUcontext cur = nullptr;
    cuda::check(a.cuCtxGetCurrent(&cur), "cuCtxGetCurrent");
    if (cur == ctx) return;
    if (cur != nullptr)
      throw cuda::CudaError(CUDA_ERROR_INVALID_CONTEXT,
                            "kt::Runtime (the calling thread's current context is not the runtime's)");
    cuda::check(a.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  }

  /// Loads the kernel of `ch` for problem p (database binary -> disk cache -> NVRTC). Called under resolve_mu.
  const LoadedKernel* load(const attn::Problem& p, const Choice& ch) {
    auto it = kernels.find(ch.variant_name);
    if (it != kernels.end()) return it->second.get();
    const unsigned smem = static_cast<unsigned>(attn::smem_bytes(ch.config, p.head_dim));
    std::unique_ptr<LoadedKernel> k;
    std::string db_note;
    if (db && !ch.binary_hash.empty()) {
      auto b = db->get_binary(ch.binary_hash);
      if (!b) {
        db_note = "binary " + ch.binary_hash + " is missing from " + db_path;
      } else if (b->variant_name != ch.variant_name) {
        db_note = "binary " + ch.binary_hash + " is variant " + b->variant_name + ", expected " + ch.variant_name;
      } else {
        bool runs = false;
        try {
          runs = arch_runs_on(parse_arch(b->arch), cc_major, cc_minor);
        } catch (const std::invalid_argument&) {
        }
        if (runs && !b->cubin.empty() && !b->lowered_name.empty())
          k = std::make_unique<LoadedKernel>(b->cubin, b->lowered_name, smem);
        else
          db_note = "binary " + ch.binary_hash + " (" + b->arch + ") does not run on this device";
      }
    }
    if (!k) {
      const CompileResult r = compile(attn::kernel_source(p, ch.config, arch));
      if (!r.ok)
        throw std::runtime_error("kt::Runtime: NVRTC failed to compile " + ch.variant_name +
                                 (db_note.empty() ? "" : " (" + db_note + ")") + ": " + r.error);
      k = std::make_unique<LoadedKernel>(r.cubin, r.report.lowered_name, smem);
    }
    const LoadedKernel* raw = k.get();
    kernels.emplace(ch.variant_name, std::move(k));
    return raw;
  }

  /// NVRTC through the disk cubin cache (both created on first use). Called under resolve_mu.
  CompileResult compile(const KernelSource& src) {
    if (!compiler) {
      try {
        disk_cache = std::make_unique<CubinCache>(CubinCache::default_dir());
      } catch (const std::exception&) {
        disk_cache.reset();  // no usable cache directory: compile every time
      }
      compiler = std::make_unique<Compiler>(disk_cache.get(), 1);
    }
    return compiler->compile(src);
  }

  /// Loads the qkv kernel of `ch` (database binary -> disk cache -> NVRTC), one per name expression.
  /// Called under resolve_mu.
  const LoadedKernel* load_qkv(const qkv::Problem& p, const QkvChoice& ch) {
    const std::string expr = qkv::name_expression(p, ch.config);
    auto it = qkv_kernels.find(expr);
    if (it != qkv_kernels.end()) return it->second.get();
    // The kernel's dynamic shared-memory ceiling: gemv stages 1 grows with K (the launch passes the problem's bytes),
    // and one binary serves every K, so take the generator's ceiling for the variant.
    const unsigned smem = qkv::kernel_source(p, ch.config, arch).dynamic_smem_bytes;
    std::unique_ptr<LoadedKernel> k;
    std::string db_note;
    if (db && !ch.binary_hash.empty()) {
      auto b = db->get_binary(ch.binary_hash);
      if (!b) {
        db_note = "binary " + ch.binary_hash + " is missing from " + db_path;
      } else if (b->name_expression != expr) {
        // Compare name expressions, not variant names: a binary shared by split_k variants carries the
        // variant name of whichever was stored first.
        db_note = "binary " + ch.binary_hash + " is " + b->name_expression + ", expected " + expr;
      } else {
        bool runs = false;
        try {
          runs = arch_runs_on(parse_arch(b->arch), cc_major, cc_minor);
        } catch (const std::invalid_argument&) {
        }
        if (runs && !b->cubin.empty() && !b->lowered_name.empty())
          k = std::make_unique<LoadedKernel>(b->cubin, b->lowered_name, smem);
        else
          db_note = "binary " + ch.binary_hash + " (" + b->arch + ") does not run on this device";
      }
    }
    if (!k) {
      const CompileResult r = compile(qkv::kernel_source(p, ch.config, arch));
      if (!r.ok)
        throw std::runtime_error("kt::Runtime: NVRTC failed to compile " + qkv::variant_name(p, ch.config, arch) +
                                 (db_note.empty() ? "" : " (" + db_note + ")") + ": " + r.error);
      k = std::make_unique<LoadedKernel>(r.cubin, r.report.lowered_name, smem);
    }
    const LoadedKernel* raw = k.get();
    qkv_kernels.emplace(expr, std::move(k));
    return raw;
  }
};

Runtime::Runtime(const std::string& db_path) : impl_(std::make_unique<Impl>()) {
  auto& I = *impl_;
  I.db_path = db_path;
  if (I.db_path.empty()) {
    const char* env = std::getenv("KERNTUNE_DB");
    if (env && *env) I.db_path = env;
  }
  // Open the database before touching the GPU, so a bad file is reported as such on any machine.
  if (!I.db_path.empty()) {
    I.db = std::make_unique<db::TuningDb>(I.db_path, /*read_only=*/true);
  }

  const auto& a = cuda::api();
  CUcontext cur = nullptr;
  cuda::check(a.cuCtxGetCurrent(&cur), "cuCtxGetCurrent");
  int ordinal = 0;
  if (cur) {
    I.ctx = cur;
    ordinal = static_cast<int>(device_of_current_context());
  } else {
    I.owned_ctx = std::make_unique<cuda::Context>(0);
    I.ctx = I.owned_ctx->get();
  }
  const cuda::DeviceInfo info = cuda::device_info(ordinal);
  I.device_name = info.name;
  I.cc_major = info.cc_major;
  I.cc_minor = info.cc_minor;
  I.arch = arch_for_compute_capability(info.cc_major, info.cc_minor);
  if (I.db) {
    I.winners = I.db->winners(I.device_name, attn::kFamily);
    I.qkv_winners = I.db->winners(I.device_name, qkv::kFamily);
  }
}

Runtime::~Runtime() {
  if (!impl_) return;
  // Modules unload from the current context: make ours current if the thread has none.
  try {
    const auto& a = cuda::api();
    CUcontext cur = nullptr;
    const bool holds_device_state =
        !impl_->kernels.empty() || !impl_->qkv_kernels.empty() || !impl_->qkv_resolved.empty();
    if (holds_device_state && a.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == nullptr)
      a.cuCtxSetCurrent(impl_->ctx);
  } catch (...) {
  }
  impl_->resolved.clear();
  impl_->kernels.clear();
  impl_->qkv_resolved.clear();  // frees the split-K buffers
  impl_->qkv_kernels.clear();
}

Runtime::Choice Runtime::explain(const attn::Problem& p) const {
  return resolve_attention(impl_->winners, impl_->device_name, impl_->arch, p);
}

void Runtime::attention_prefill(const attn::Problem& p, const attn::FwdParams& params, CUstream stream) {
  auto& I = *impl_;
  const ProblemKey key = pod_key(p);
  Resolved r{};
  bool found = false;
  {
    std::shared_lock<std::shared_mutex> lock(I.map_mu);
    auto it = I.resolved.find(key);
    if (it != I.resolved.end()) {
      r = it->second;
      found = true;
    }
  }
  I.ensure_current();
  if (!found) {
    attn::check_params(p, params);  // reject bad arguments before compiling anything
    std::lock_guard<std::mutex> g(I.resolve_mu);
    {
      std::shared_lock<std::shared_mutex> lock(I.map_mu);
      auto it = I.resolved.find(key);
      if (it != I.resolved.end()) {
        r = it->second;
        found = true;
      }
    }
    if (!found) {
      const Choice ch = explain(p);
      r = Resolved{ch.config, I.load(p, ch)};
      std::unique_lock<std::shared_mutex> lock(I.map_mu);
      I.resolved.emplace(key, r);
    }
  }
  attn::launch(*r.kernel, p, r.config, params, stream);
}

QkvChoice Runtime::explain_qkv(const qkv::Problem& p) const {
  return resolve_qkv(impl_->qkv_winners, impl_->device_name, impl_->arch, p);
}

void Runtime::qkv_proj(const qkv::Problem& p, const qkv::QkvParams& params, CUstream stream) {
  auto& I = *impl_;
  const QkvKey key = pod_key(p);
  QkvResolved r{};
  bool found = false;
  {
    std::shared_lock<std::shared_mutex> lock(I.map_mu);
    auto it = I.qkv_resolved.find(key);
    if (it != I.qkv_resolved.end()) {
      r = it->second.r;
      found = true;
    }
  }
  I.ensure_current();
  if (!found) {
    // Reject bad arguments before compiling anything: every check but the workspace's (which is ours) does not
    // depend on the config.
    const qkv::Config unsplit{};  // mma, split_k 1: no workspace
    qkv::check_params(p, unsplit, params);
    std::lock_guard<std::mutex> g(I.resolve_mu);
    {
      std::shared_lock<std::shared_mutex> lock(I.map_mu);
      auto it = I.qkv_resolved.find(key);
      if (it != I.qkv_resolved.end()) {
        r = it->second.r;
        found = true;
      }
    }
    if (!found) {
      const QkvChoice ch = explain_qkv(p);
      QkvEntry e;
      e.r.config = ch.config;
      e.r.kernel = I.load_qkv(p, ch);
      if (qkv::uses_workspace(ch.config)) {
        e.workspace = cuda::DeviceBuffer(qkv::workspace_bytes(p, ch.config, cuda::current_sm_count()));
        e.counters = cuda::DeviceBuffer(qkv::counter_bytes(p, ch.config));
        e.counters.fill_u32(0);  // synchronizes the context: the zeros are there before any launch
        e.r.workspace = reinterpret_cast<float*>(static_cast<uintptr_t>(e.workspace.ptr()));
        e.r.counters = reinterpret_cast<unsigned*>(static_cast<uintptr_t>(e.counters.ptr()));
      }
      r = e.r;
      std::unique_lock<std::shared_mutex> lock(I.map_mu);
      I.qkv_resolved.emplace(key, std::move(e));
    }
  }
  qkv::QkvParams a = params;
  a.workspace = r.workspace;
  a.counters = r.counters;
  qkv::launch(*r.kernel, p, r.config, a, stream);
}

const std::string& Runtime::device_name() const { return impl_->device_name; }
ArchId Runtime::arch() const { return impl_->arch; }
bool Runtime::has_db() const { return impl_->db != nullptr; }
const std::string& Runtime::db_path() const { return impl_->db_path; }
CUcontext Runtime::context() const { return impl_->ctx; }
size_t Runtime::resolved_problems() const {
  std::shared_lock<std::shared_mutex> lock(impl_->map_mu);
  return impl_->resolved.size();
}
size_t Runtime::resolved_qkv_problems() const {
  std::shared_lock<std::shared_mutex> lock(impl_->map_mu);
  return impl_->qkv_resolved.size();
}

}  // namespace kt
