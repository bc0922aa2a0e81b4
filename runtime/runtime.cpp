#include "runtime/runtime.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "cache/cubin_cache.h"
#include "cuda/driver.h"
#include "generator/arch.h"
#include "generator/compiler.h"
#include "generator/registry.h"
#include "runtime/attention.h"
#include "runtime/decode.h"
#include "runtime/loaded_kernel.h"
#include "runtime/qkv.h"

namespace kt {
namespace {

std::string fmt2(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", x);
  return buf;
}

/// A log distance on the 1e-9 grid, so that equal distances tie exactly.
long long quantized(double d) { return std::llround(d * 1e9); }

/// A usable tuned winner: its row, config, rank for the nearest step and whether it lies in the asked bucket.
struct Candidate {
  const db::Winner* w;
  nlohmann::json config;
  long long distance, tie;
  bool same_bucket;
};

/// The typed choice of a family from the generic one.
template <class Choice, class ConfigFromJson>
Choice typed_choice(const FamilyChoice& g, ConfigFromJson config_from_json) {
  Choice c;
  c.step = g.step;
  c.why = g.why;
  c.config = config_from_json(g.config);
  c.variant_name = g.variant_name;
  c.binary_hash = g.binary_hash;
  c.tuned_problem_key = g.tuned_problem_key;
  c.tuned_median_us = g.tuned_median_us;
  return c;
}

/// The rows of `medians` (ordered by family, problem key, variant) for one problem.
std::pair<const db::VariantMedian*, const db::VariantMedian*> rows_of(const std::vector<db::VariantMedian>& medians,
                                                                      const std::string& family,
                                                                      const std::string& problem_key) {
  auto key = [](const db::VariantMedian& m) { return std::tie(m.family, m.problem_key); };
  const auto target = std::tie(family, problem_key);
  auto lo = std::lower_bound(medians.begin(), medians.end(), target,
                             [&](const db::VariantMedian& m, const auto& t) { return key(m) < t; });
  auto hi = std::upper_bound(medians.begin(), medians.end(), target,
                             [&](const auto& t, const db::VariantMedian& m) { return t < key(m); });
  return {medians.data() + (lo - medians.begin()), medians.data() + (hi - medians.begin())};
}

/// A tuned problem of the bucket where both `c` and the default were measured and the default was faster, or "".
std::string slower_than_default_at(const Family& f, const Candidate& c, const nlohmann::json& default_config,
                                   const std::vector<Candidate>& bucket,
                                   const std::vector<db::VariantMedian>& medians) {
  for (const auto& t : bucket) {
    const db::VariantMedian *mine = nullptr, *dflt = nullptr;
    const auto [lo, hi] = rows_of(medians, f.name(), t.w->problem_key);
    for (auto* m = lo; m != hi; ++m) {
      if (m->variant_name == c.w->variant_name) mine = m;
      try {
        if (f.same_config(nlohmann::json::parse(m->config_json), default_config)) dflt = m;
      } catch (const std::exception&) {
        // a row this build cannot read is no evidence
      }
    }
    if (!mine || !dflt || mine->median_us <= 0 || dflt->median_us <= 0) continue;
    // A screened median lost its problem's final round: slower than an unscreened one whatever the two numbers,
    // which were timed in different rounds.
    if (std::make_pair(mine->screened, mine->median_us) > std::make_pair(dflt->screened, dflt->median_us))
      return t.w->problem_key;
  }
  return "";
}

}  // namespace

FamilyChoice resolve(const Family& f, const std::vector<db::Winner>& winners, const std::string& device_name,
                     ArchId arch, const nlohmann::json& problem, const MediansSource& medians) {
  const nlohmann::json p = f.canonical_problem(problem);
  const std::string key = f.problem_key(p);
  const std::string cls = f.class_key(p);
  const std::string bucket = bucket_key(f, p);

  // Usable winners: this family and device class, parsable, same kernel class, config usable here.
  std::vector<Candidate> cands;
  int rejected = 0;
  for (const auto& w : winners) {
    if (w.family != f.name() || w.device_name != device_name) continue;
    Candidate c{&w, {}, 0, 0, false};
    try {
      const nlohmann::json tuned = f.canonical_problem(nlohmann::json::parse(w.problem_json));
      c.config = nlohmann::json::parse(w.config_json);
      if (f.class_key(tuned) != cls) continue;
      if (f.unusable(p, c.config, arch) != nullptr) {  // throws for a config this build cannot read
        ++rejected;
        continue;
      }
      const Nearness n = f.nearness(p, tuned);
      c.distance = quantized(n.distance);
      c.tie = quantized(n.tie);
      c.same_bucket = bucket_key(f, tuned) == bucket;
    } catch (const std::exception&) {
      continue;  // a row this build cannot read is not a candidate
    }
    cands.push_back(std::move(c));
  }

  FamilyChoice ch;
  ch.family = f.name();
  auto fill = [&](const Candidate& c) {
    ch.config = c.config;  // the tuned row's own binary (e.g. an sm_90 cubin on an sm_90a runtime)
    ch.variant_name = c.w->variant_name;
    ch.binary_hash = c.w->binary_hash;
    ch.tuned_problem_key = c.w->problem_key;
    ch.tuned_median_us = c.w->median_us;
  };
  // 1. exact problem key.
  const Candidate* exact = nullptr;
  for (const auto& c : cands)
    if (c.w->problem_key == key && (!exact || c.w->measurement_id < exact->w->measurement_id)) exact = &c;
  if (exact) {
    ch.step = "exact";
    fill(*exact);
    ch.why = "tuned for exactly this problem on " + device_name + " (median " + fmt2(exact->w->median_us) + " us)";
    return ch;
  }
  // 2. nearest within the bucket: (distance, tie, key, measurement id), skipping a config the database shows slower
  // than the default on a tuned problem of the bucket.
  std::vector<Candidate> in_bucket;
  for (const auto& c : cands)
    if (c.same_bucket) in_bucket.push_back(c);
  std::sort(in_bucket.begin(), in_bucket.end(), [](const Candidate& a, const Candidate& b) {
    return std::make_tuple(a.distance, a.tie, std::cref(a.w->problem_key), a.w->measurement_id) <
           std::make_tuple(b.distance, b.tie, std::cref(b.w->problem_key), b.w->measurement_id);
  });
  const nlohmann::json dflt = f.default_config(p, arch);
  std::string skipped;
  const std::vector<db::VariantMedian>* evidence = !in_bucket.empty() && medians ? medians() : nullptr;
  for (const auto& c : in_bucket) {
    const std::string at = evidence ? slower_than_default_at(f, c, dflt, in_bucket, *evidence) : "";
    if (!at.empty()) {
      if (skipped.empty()) skipped = c.w->problem_key + "'s winner (slower than the default at " + at + ")";
      continue;
    }
    ch.step = "nearest";
    fill(c);
    ch.why = "nearest tuned problem " + c.w->problem_key + " in bucket " + bucket + " (log distance " +
             fmt2(double(c.distance) * 1e-9) + ") on " + device_name;
    if (!skipped.empty()) ch.why += "; skipped " + skipped;
    return ch;
  }
  // 3. the family's built-in default.
  ch.step = "default";
  ch.config = dflt;
  ch.variant_name = f.variant_name(p, ch.config, arch);
  if (!skipped.empty()) ch.why = "skipped " + skipped;
  else if (!cands.empty())
    ch.why = "no tuned problem in bucket " + bucket + " (" + std::to_string(cands.size()) + " tuned " + cls +
             " problem(s) in other buckets)";
  else ch.why = "no tuned " + cls + " problem for " + (device_name.empty() ? "this device" : device_name);
  if (rejected > 0)
    ch.why += " (" + std::to_string(rejected) + " tuned config(s) " + f.rejected_as() + " on " + arch_name(arch) + ")";
  ch.why += ": built-in default for " + arch_name(arch);
  return ch;
}

std::string winners_device(const std::vector<db::DeviceRecord>& devices, const std::vector<db::Winner>& winners,
                           const std::string& device_name, int cc_major, int cc_minor) {
  std::map<std::string, long long> count;  // winners per device class
  for (const auto& w : winners) ++count[w.device_name];
  if (count.count(device_name)) return device_name;
  std::string best;
  long long best_n = 0;
  for (const auto& d : devices) {  // name order: a tie keeps the smaller name
    if (d.cc_major != cc_major || d.cc_minor != cc_minor || d.name == best) continue;
    const auto it = count.find(d.name);
    if (it != count.end() && it->second > best_n) best = d.name, best_n = it->second;
  }
  return best.empty() ? device_name : best;
}

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
  return typed_choice<AttentionChoice>(
      resolve(attn::family_type(), winners, device_name, arch, attn::problem_to_json(p)), attn::config_from_json);
}

QkvChoice resolve_qkv(const std::vector<db::Winner>& winners, const std::string& device_name, ArchId arch,
                      const qkv::Problem& p) {
  qkv::check_problem(p);
  return typed_choice<QkvChoice>(resolve(qkv::family_type(), winners, device_name, arch, qkv::problem_to_json(p)),
                                 qkv::config_from_json);
}

// ------------------------------------------------------------------------------------------------

namespace {

/// A problem of any family as a POD hash key (no allocation to build, hash or compare): the family's index in
/// the registry and up to kMaxKeyFields ints of the family's RuntimeAdapter::pod_key (the rest zero).
constexpr int kMaxKeyFields = 12;
struct PodKey {
  int family;
  int f[kMaxKeyFields];
  bool operator==(const PodKey& o) const {
    if (family != o.family) return false;
    for (int i = 0; i < kMaxKeyFields; ++i)
      if (f[i] != o.f[i]) return false;
    return true;
  }
};
struct PodKeyHash {
  size_t operator()(const PodKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    auto mix = [&](int x) {
      h ^= static_cast<uint32_t>(x);
      h *= 1099511628211ull;
    };
    mix(k.family);
    for (int x : k.f) mix(x);
    return static_cast<size_t>(h);
  }
};

/// What a launch needs, copied out of the map under the shared lock (no allocation).
struct Resolved {
  const LoadedKernel* kernel;  // owned by Impl::kernels
  const void* config;          // the family's Config, owned by the Entry
  float* workspace;            // owned by the Entry (null when the config uses none)
  unsigned* counters;
};

/// A resolved problem: its launch data, its typed config and the split-K buffers it owns.
struct Entry {
  Resolved r{};
  std::shared_ptr<const void> config;
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
  /// The device class whose winners this runtime uses: device_name, or a device of the same compute capability that
  /// the database was tuned on (winners_device).
  std::string winners_from;
  ArchId arch{};
  int cc_major = 0, cc_minor = 0;
  std::unique_ptr<db::TuningDb> db;
  std::vector<db::Winner> winners;
  /// Every variant's best median on the tuned problems of winners_from: the evidence resolve() checks a nearest
  /// winner against the default with, read from the database by the first lookup that needs it (not at start-up).
  mutable std::vector<db::VariantMedian> medians;
  mutable std::once_flag medians_once;
  const std::vector<db::VariantMedian>* read_medians() const {
    std::call_once(medians_once, [&] {
      if (db) medians = db->variant_medians(winners_from);
    });
    return &medians;
  }

  /// resolve() over this runtime's winners; when they come from another device of the same architecture, `why` says
  /// so.
  FamilyChoice choose(const Family& f, const nlohmann::json& problem) const {
    FamilyChoice ch = resolve(f, winners, winners_from, arch, problem, [this] { return read_medians(); });
    if (winners_from != device_name && ch.step != "default")
      ch.why += " (this GPU is " + device_name + "; the database has no winners for it, so those of the same " +
                arch_name(arch) + " device " + winners_from + " are used)";
    return ch;
  }

  // Resolution (database reads, compilation, module loads) is serialized by resolve_mu; the launch
  // path reads `resolved` under a shared lock.
  std::mutex resolve_mu;
  std::unique_ptr<CubinCache> disk_cache;
  std::unique_ptr<Compiler> compiler;
  // Loaded kernels of every family, by family + name expression: variants that differ only in launch dimensions
  // (qkv_proj's split_k) share one binary.
  std::unordered_map<std::string, std::unique_ptr<LoadedKernel>> kernels;
  // Resolved problems of every family (each owning its config and split-K buffers; the map's nodes never move,
  // so the raw pointers in Resolved stay valid). The launch path reads it under map_mu's shared lock.
  mutable std::shared_mutex map_mu;
  std::unordered_map<PodKey, Entry, PodKeyHash> resolved;

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

  /// Loads the kernel of `ch` for problem p of family f (database binary -> disk cache -> NVRTC), one per name
  /// expression. Called under resolve_mu.
  const LoadedKernel* load(const Family& f, const nlohmann::json& p, const FamilyChoice& ch) {
    const KernelSource src = f.kernel_source(p, ch.config, arch);
    const std::string id = f.name() + "|" + src.name_expression;
    auto it = kernels.find(id);
    if (it != kernels.end()) return it->second.get();
    // The kernel's dynamic shared-memory ceiling: the generator's for the variant (qkv gemv stages 1 grows with K
    // and one binary serves every K).
    const unsigned smem = src.dynamic_smem_bytes;
    std::unique_ptr<LoadedKernel> k;
    std::string db_note;
    if (db && !ch.binary_hash.empty()) {
      auto b = db->get_binary(ch.binary_hash);
      if (!b) {
        db_note = "binary " + ch.binary_hash + " is missing from " + db_path;
      } else if (b->name_expression != src.name_expression) {
        // Compare name expressions, not variant names: a binary shared by split_k variants carries the
        // variant name of whichever was stored first.
        db_note = "binary " + ch.binary_hash + " is " + b->name_expression + ", expected " + src.name_expression;
      } else {
        bool runs = false;
        try {
          runs = arch_runs_on(parse_arch(b->arch), cc_major, cc_minor);
        } catch (const std::invalid_argument&) {
        }
        if (runs && !b->cubin.empty() && !b->lowered_name.empty())
          k = std::make_unique<LoadedKernel>(b->cubin, b->lowered_name, smem);
        else db_note = "binary " + ch.binary_hash + " (" + b->arch + ") does not run on this device";
      }
    }
    if (!k) {
      const CompileResult r = compile(src);
      if (!r.ok)
        throw std::runtime_error("kt::Runtime: NVRTC failed to compile " + ch.variant_name +
                                 (db_note.empty() ? "" : " (" + db_note + ")") + ": " + r.error);
      k = std::make_unique<LoadedKernel>(r.cubin, r.report.lowered_name, smem);
    }
    const LoadedKernel* raw = k.get();
    kernels.emplace(id, std::move(k));
    return raw;
  }

  /// The launch path of every family, through its typed RuntimeAdapter A. The first call for a problem checks
  /// the arguments, resolves it (resolve() over the winners), loads its kernel and allocates the workspace its
  /// config needs; later calls do one hash lookup under the shared lock and launch, with no allocation.
  template <class A>
  void run(const typename A::Problem& p, const typename A::Params& params, CUstream stream) {
    static const int family = family_index(A::family().name());
    static_assert(A::kKeyFields <= kMaxKeyFields, "raise kMaxKeyFields");
    PodKey key{family, {}};
    A::pod_key(p, key.f);
    Resolved r{};
    bool found = false;
    auto lookup = [&] {
      std::shared_lock<std::shared_mutex> lock(map_mu);
      auto it = resolved.find(key);
      if (it != resolved.end()) {
        r = it->second.r;
        found = true;
      }
    };
    lookup();
    ensure_current();
    if (!found) {
      A::check_args(p, params);  // reject bad arguments before compiling anything
      std::lock_guard<std::mutex> g(resolve_mu);
      lookup();
      if (!found) {
        const Family& f = A::family();
        const nlohmann::json pj = A::problem_to_json(p);
        const FamilyChoice ch = choose(f, pj);
        auto config = std::make_shared<const typename A::Config>(A::config_from_json(ch.config));
        Entry e;
        e.config = config;
        e.r.config = config.get();
        e.r.kernel = load(f, pj, ch);
        if (A::uses_workspace(*config)) {
          e.workspace = cuda::DeviceBuffer(A::workspace_bytes(p, *config, cuda::current_sm_count()));
          e.counters = cuda::DeviceBuffer(A::counter_bytes(p, *config));
          e.counters.fill_u32(0);  // synchronizes the context: the zeros are there before any launch
          e.r.workspace = reinterpret_cast<float*>(static_cast<uintptr_t>(e.workspace.ptr()));
          e.r.counters = reinterpret_cast<unsigned*>(static_cast<uintptr_t>(e.counters.ptr()));
        }
        r = e.r;
        std::unique_lock<std::shared_mutex> lock(map_mu);
        resolved.emplace(key, std::move(e));
      }
    }
    A::launch(*r.kernel, p, *static_cast<const typename A::Config*>(r.config), params, r.workspace, r.counters, stream);
  }

  size_t count_resolved(int family) const {
    std::shared_lock<std::shared_mutex> lock(map_mu);
    size_t n = 0;
    for (const auto& kv : resolved) n += kv.first.family == family;
    return n;
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
  I.winners_from = I.device_name;
  if (I.db) {
    I.winners_from = winners_device(I.db->devices(), I.db->winners(), I.device_name, I.cc_major, I.cc_minor);
    I.winners = I.db->winners(I.winners_from);  // every family's: resolve() keeps its own
  }
}

Runtime::~Runtime() {
  if (!impl_) return;
  // Modules unload from the current context: make ours current if the thread has none.
  try {
    const auto& a = cuda::api();
    CUcontext cur = nullptr;
    const bool holds_device_state = !impl_->kernels.empty() || !impl_->resolved.empty();
    if (holds_device_state && a.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == nullptr) a.cuCtxSetCurrent(impl_->ctx);
  } catch (...) {
  }
  impl_->resolved.clear();  // frees the split-K buffers
  impl_->kernels.clear();
}

Runtime::Choice Runtime::explain(const attn::Problem& p) const {
  return typed_choice<AttentionChoice>(impl_->choose(attn::family_type(), attn::problem_to_json(p)),
                                       attn::config_from_json);
}

FamilyChoice Runtime::explain(const std::string& family, const nlohmann::json& problem) const {
  return impl_->choose(find_family(family), problem);
}

void Runtime::attention_prefill(const attn::Problem& p, const attn::FwdParams& params, CUstream stream) {
  impl_->run<attn::RuntimeAdapter>(p, params, stream);
}

QkvChoice Runtime::explain_qkv(const qkv::Problem& p) const {
  return typed_choice<QkvChoice>(impl_->choose(qkv::family_type(), qkv::problem_to_json(p)), qkv::config_from_json);
}

void Runtime::qkv_proj(const qkv::Problem& p, const qkv::QkvParams& params, CUstream stream) {
  impl_->run<qkv::RuntimeAdapter>(p, params, stream);
}

void Runtime::attention_decode(const decode::Problem& p, const decode::DecodeParams& params, CUstream stream) {
  impl_->run<decode::RuntimeAdapter>(p, params, stream);
}

const std::string& Runtime::device_name() const { return impl_->device_name; }
ArchId Runtime::arch() const { return impl_->arch; }
bool Runtime::has_db() const { return impl_->db != nullptr; }
const std::string& Runtime::db_path() const { return impl_->db_path; }
CUcontext Runtime::context() const { return impl_->ctx; }
size_t Runtime::resolved_problems() const { return impl_->count_resolved(family_index(attn::kFamily)); }
size_t Runtime::resolved_qkv_problems() const { return impl_->count_resolved(family_index(qkv::kFamily)); }
size_t Runtime::resolved_problems(const std::string& family) const {
  const auto& fs = families();
  for (size_t i = 0; i < fs.size(); ++i)
    if (fs[i]->name() == family) return impl_->count_resolved(int(i));
  return 0;
}

}  // namespace kt
