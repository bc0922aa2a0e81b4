// kt::Runtime: the dispatcher. problem -> lookup chain (tuning database winners -> nearest tuned
// problem -> built-in default) -> cubin (database binary -> disk cubin cache -> NVRTC) -> launch.
// ARCHITECTURE.md, "Runtime". Never links the tuner.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cache/tuning_db.h"
#include "generator/attention_family.h"
#include "generator/decode_family.h"
#include "generator/family.h"
#include "generator/qkv_family.h"

namespace kt {

/// The device cannot run any kerntune kernel (compute capability below 8.0).
struct UnsupportedDevice : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Which step of the lookup chain answered for a problem of any family, and what it chose.
struct FamilyChoice {
  std::string family;        ///< the family's registry name
  std::string step;          ///< "exact" | "nearest" | "default"
  std::string why;           ///< one human sentence naming the tuned problem / the reason
  nlohmann::json config;     ///< the variant's config JSON (usable for the problem and the arch)
  std::string variant_name;  ///< the winner's own variant name (exact/nearest); Family::variant_name for the default
  std::string binary_hash;   ///< database binary to load; "" for the default step
  std::string tuned_problem_key;  ///< the winner's problem key (exact/nearest); "" for default
  double tuned_median_us = 0;     ///< the winner's median time on its own problem, microseconds (0 for default)
};

/// Whose winners a runtime on device `device_name` (compute capability cc_major.cc_minor) uses from a database with
/// these device rows and winners: its own device class when the database has any winner for it; otherwise the device
/// class of the same compute capability with the most winners (equal counts: the smaller name), whose tuning the GPU of
/// one architecture shares (same instructions and shared memory; SM count and clocks may differ); otherwise its own
/// name, which has no winners (every lookup ends at the default). Pure: no CUDA, no database I/O.
std::string winners_device(const std::vector<db::DeviceRecord>& devices, const std::vector<db::Winner>& winners,
                           const std::string& device_name, int cc_major, int cc_minor);

/// The lookup chain of any family as a pure function (no CUDA, no database I/O), parameterised by the family's
/// class key, bucket sizes, nearness and unusable() (generator/family.h):
/// 1. family.canonical_problem(problem): throws ProblemError naming the rule when no variant supports it.
/// 2. exact: a winner of the family on `device_name` whose problem_key is the problem's key (the smallest
///    measurement id among duplicates).
/// 3. nearest, inside the problem's bucket: among winners of the family and device class whose problem has the
///    same bucket_key (the class_key and every bucket size in the same power-of-two bucket: generator/family.h,
///    size_bucket), the one with the smallest family.nearness() (distance, then tie, each quantized to 1e-9), then
///    the smaller problem key, then the smaller measurement id. A winner is passed over when `medians` shows it
///    slower than the default config: on some tuned problem of the bucket both were measured and the default's
///    median is the smaller, or only the winner's is screened (it lost that problem's final round; VariantMedian).
///    A tuned problem in another bucket never answers: the default is the rule there, since
///    a winner tuned at another size is not known to beat it (a config tuned at M 1 can be 40% slower than the
///    default at M 16).
/// In steps 2 and 3 a winner is skipped when its problem/config JSON does not parse (or its problem is one no
/// variant supports), when its family or device class differs, or when family.unusable() rejects its config for
/// the problem on `arch` (counted in the default's `why`).
/// 4. default: family.default_config(problem, arch).
/// `medians`: called only when the bucket holds a tuned winner, it returns TuningDb::variant_medians(device_name)
/// (ordered by family, problem key, variant), or nullptr for no evidence; empty: no evidence. (The runtime reads the
/// medians from the database on the first such call, not at construction.)
/// evidence. Deterministic: the result depends only on the arguments, not on the order of `winners`.
/// Where resolve() gets the database's variant medians: see resolve().
using MediansSource = std::function<const std::vector<db::VariantMedian>*()>;

FamilyChoice resolve(const Family& family, const std::vector<db::Winner>& winners, const std::string& device_name,
                     ArchId arch, const nlohmann::json& problem, const MediansSource& medians = {});

/// Which step of the lookup chain answered for a problem, and what it chose.
struct AttentionChoice {
  std::string step;               ///< "exact" | "nearest" | "default"
  std::string why;                ///< one human sentence naming the tuned problem / the reason
  attn::Config config{};          ///< the variant's config (valid for the problem's class and the arch)
  std::string variant_name;       ///< attn::variant_name(problem, config, arch)
  std::string binary_hash;        ///< database binary to load; "" for the default step
  std::string tuned_problem_key;  ///< the winner's problem key (exact/nearest); "" for default
  double tuned_median_us = 0;     ///< the winner's median time on its own problem, microseconds (0 for default)
};

/// The lookup chain as a pure function (no CUDA, no database I/O), used by Runtime::explain: resolve() for
/// attention_prefill, typed.
///
/// 1. check_problem(p): throws ProblemError naming the rule when no variant supports p
///    (head_dim not 64/128, num_heads % num_kv_heads != 0, sizes < 1, ...).
/// 2. exact: a winner of family attention_prefill on `device_name` whose problem_key == p.key().
/// 3. nearest: among winners of the same family and device class with the same dtype, head_dim and
///    causal flag whose seqlen_q and seqlen_k lie in the asked problem's power-of-two buckets, the one minimising
///    |ln(sq/sq')| + |ln(sk/sk')| (sequence lengths; ties, within 1e-9, broken by
///    |ln(batch*heads / batch'*heads')|, then by problem key).
/// In steps 2 and 3 a winner is skipped when its problem/config JSON does not parse, when its family
/// or device class differs, or when invalid_reason() rejects its config for p's class on `arch`
/// (e.g. more shared memory than the arch allows).
/// 4. default: attn::default_config(arch, p).
/// Deterministic: the result depends only on the arguments, not on the order of `winners`.
AttentionChoice resolve_attention(const std::vector<db::Winner>& winners, const std::string& device_name, ArchId arch,
                                  const attn::Problem& p);

/// Which step of the lookup chain answered for a qkv_proj problem, and what it chose.
struct QkvChoice {
  std::string step;               ///< "exact" | "nearest" | "default"
  std::string why;                ///< one human sentence naming the tuned problem / the reason
  qkv::Config config{};           ///< the variant's config (valid for the problem's class and the arch)
  std::string variant_name;       ///< the winner's own variant name (exact/nearest); qkv::variant_name(p, config,
                                  ///< arch) for the default
  std::string binary_hash;        ///< database binary to load; "" for the default step
  std::string tuned_problem_key;  ///< the winner's problem key (exact/nearest); "" for default
  double tuned_median_us = 0;     ///< the winner's median time on its own problem, microseconds (0 for default)
};

/// The qkv_proj lookup chain as a pure function (no CUDA, no database I/O), used by Runtime::explain_qkv:
/// resolve() for qkv_proj, typed.
///
/// 1. qkv::check_problem(p): throws ProblemError naming the rule when no variant supports p (k not a
///    multiple of 64 or of the format's block, head_dim not 64/128, num_heads % num_kv_heads != 0, ...).
/// 2. exact: a winner of family qkv_proj on `device_name` whose problem_key == p.key().
/// 3. nearest: among winners of the same family and device class with the same dtype, weight format, k,
///    num_heads, num_kv_heads, head_dim, bias and RoPE flags whose m lies in the asked m's power-of-two bucket, the
///    one minimising |ln(m / m')| (tokens; ties,
///    within 1e-9, broken by the larger m' -- its grid has no more token tiles here than where it was tuned --, then
///    by problem key).
/// In steps 2 and 3 a winner is skipped when its problem/config JSON does not parse, when its family or device
/// class differs, or when its config cannot run p on `arch`: qkv::invalid_reason() rejects it, or split_k > 1
/// with split_k > k / tile_k (every split needs a K tile). A tuned config is not required to be among
/// qkv::valid_configs(p, arch): that pruning by M is about speed, and a tile larger than M is still correct.
/// 4. default: qkv::default_config(arch, p).
/// Deterministic: the result depends only on the arguments, not on the order of `winners`.
QkvChoice resolve_qkv(const std::vector<db::Winner>& winners, const std::string& device_name, ArchId arch,
                      const qkv::Problem& p);

/// Maps a compute capability to the arch kerntune compiles for: 9.0 -> sm_90a (arch-specific
/// features), 8.x -> sm_8x, 10.0+ -> sm_XY (generic). Throws UnsupportedDevice below 8.0.
ArchId arch_for_compute_capability(int cc_major, int cc_minor);

class Runtime {
 public:
  using Choice = AttentionChoice;

  /// db_path: a tuning database file, opened read-only; "" -> $KERNTUNE_DB if set and non-empty,
  /// else no database (built-in defaults only).
  /// Uses the CUDA context current on the calling thread, else retains device 0's primary context
  /// (and makes it current on the calling thread). Detects the device: its name is the device class
  /// whose winners are used (when the database has none for it, those of the device of the same compute
  /// capability with the most winners: winners_device, and explain says so); its compute capability gives
  /// the arch (arch_for_compute_capability).
  /// Throws db::DbError (missing or bad database file), cuda::CudaError / std::runtime_error (no
  /// driver or no GPU), UnsupportedDevice (compute capability < 8.0).
  explicit Runtime(const std::string& db_path = "");
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// The lookup chain for p on this device (resolve_attention over the database's winners).
  /// Throws ProblemError for an unsupported problem. Thread-safe.
  Choice explain(const attn::Problem& p) const;

  /// The lookup chain for a problem of any registered family (resolve() over the database's winners), the
  /// problem as its database JSON. Throws std::invalid_argument for an unknown family, ProblemError for an
  /// unsupported or malformed problem. Thread-safe.
  FamilyChoice explain(const std::string& family, const nlohmann::json& problem) const;

  /// Computes attention for p: o = softmax(scale * q k^T [+ causal mask]) v, tensors as described by
  /// attn::FwdParams (FlashAttention layout [B, S, H, D], strides in elements, 16-byte aligned).
  /// The first call for a problem resolves it (explain) and loads its kernel: the database's cubin
  /// when it has one for this device, else the disk cubin cache (CubinCache::default_dir()), else
  /// NVRTC (which fills that cache); kernels are shared between problems of one variant. Later calls
  /// do one hash lookup under a shared lock and launch, with no heap allocation.
  /// Asynchronous on `stream` (0 = legacy default stream). The calling thread must have this
  /// runtime's context current or none (then it is made current).
  /// Throws ProblemError (unsupported problem or bad params), cuda::CudaError (load/launch failure,
  /// or another context current), std::runtime_error (no cubin and NVRTC unavailable). Thread-safe.
  void attention_prefill(const attn::Problem& p, const attn::FwdParams& params, CUstream stream);

  /// The qkv_proj lookup chain for p on this device (resolve_qkv over the database's qkv_proj winners).
  /// Throws ProblemError for an unsupported problem. Thread-safe.
  QkvChoice explain_qkv(const qkv::Problem& p) const;

  /// Fused Q/K/V projection: Y = X W^T (+ bias), RoPE on the Q and K heads (when p.rope), split into
  /// q [m, Hq, D], k [m, Hkv, D], v [m, Hkv, D]; see templates/qkv_proj/qkv_proj_config.h (QkvParams) for the
  /// arguments and templates/qkv_proj/quant_format.h for the packed weight layout. With params.slot_mapping set, K
  /// (after RoPE) and V also go into the paged KV cache params.k_cache / v_cache at each token's slot, in the same
  /// kernel (k and v may then be null); the slots are device memory the kernel trusts (QkvParams).
  /// The first call for a problem resolves it (explain_qkv), loads its kernel (the database's binary for this
  /// device, else the disk cubin cache, else NVRTC; one loaded kernel per binary, shared by the problems and by
  /// the variants that differ only in split_k) and, when the chosen config reduces through a workspace
  /// (qkv::uses_workspace: mma / wgmma split_k > 1, wgmma_ws stream-K, the gemv balanced tail), allocates the workspace and zero-filled counters for that problem on the current
  /// device (qkv::workspace_bytes / counter_bytes).
  /// Later calls do one hash lookup under a shared lock and launch, with no allocation.
  /// params.workspace and params.counters are ignored: the runtime sets them (to its own buffers, or null
  /// when the config uses no workspace).
  /// Split-K ownership: the workspace and counters belong to the runtime's entry for the problem (the same
  /// p), not to the call. Launches of one split-K problem on one stream are ordered and safe (the kernel
  /// resets its counters); concurrent launches of the SAME split-K problem on different streams would share
  /// them and race, so the caller must order them (events, or one stream), or give each thread its own
  /// Runtime. Different problems never share a workspace.
  /// Asynchronous on `stream` (0 = legacy default stream); the same context rules as attention_prefill.
  /// Throws ProblemError (unsupported problem or bad params), cuda::CudaError (allocation, load or launch
  /// failure, or another context current), std::runtime_error (no cubin and NVRTC unavailable). Thread-safe.
  void qkv_proj(const qkv::Problem& p, const qkv::QkvParams& params, CUstream stream);

  /// Decode attention over a KV cache (split-KV flash decoding): for each sequence b, new token i and query head h,
  /// o[b, i, h] = softmax(scale * q[b, i, h] K_b^T [causal among the new tokens]) V_b over the first seqlens_k[b]
  /// cached tokens of KV head h / (num_heads / num_kv_heads); tensors, layouts (contiguous [B, S_max, Hkv, D] or
  /// paged [num_pages, page_size, Hkv, D] + block table) and masking as decode::DecodeParams
  /// (templates/attention_decode/decode_config.h) describes, built with decode::contiguous_params /
  /// decode::paged_params (generator/decode_family.h) or by hand. p.kv_len is the length the grid is sized for (the
  /// batch's maximum, or a bucket above it): each distinct value is one resolved problem.
  /// Checked on the host before anything is resolved or launched (decode::check_call): the problem (q_len 1..16,
  /// page size 16..256, head counts, head_dim, dtype), the pointers, alignment and strides, kv_len <= the cache's
  /// capacity. Trusted (device-resident; decode::check_tables checks host copies): seqlens_k in [0, capacity] and the
  /// block-table entries the lengths reach in [0, num_pages).
  /// The first call for a problem resolves it (explain("attention_decode", ...)), loads its kernel and, when the
  /// config splits the KV length, allocates the fp32 split partials and the zero-filled counters for that problem
  /// (the combining block of every launch resets its counter). params.kv_chunk, partial_o, partial_lse and
  /// counters are ignored: the runtime sets them. Split ownership is qkv_proj's: launches of one split problem on
  /// one stream are ordered and safe; concurrent launches of the SAME problem on different streams must be ordered
  /// by the caller. Asynchronous on `stream`; the context rules of attention_prefill.
  /// Throws ProblemError (unsupported problem or bad arguments, naming the argument), cuda::CudaError (allocation,
  /// load or launch failure), std::runtime_error (no cubin and NVRTC unavailable). Thread-safe.
  void attention_decode(const decode::Problem& p, const decode::DecodeParams& params, CUstream stream);

  /// Device class name, e.g. "NVIDIA H100 80GB HBM3".
  const std::string& device_name() const;
  ArchId arch() const;
  bool has_db() const;
  /// The database path in use ("" without one).
  const std::string& db_path() const;
  /// The CUDA context kernels are loaded into.
  CUcontext context() const;
  /// Number of distinct problems resolved and cached by attention_prefill so far.
  size_t resolved_problems() const;
  /// Number of distinct problems resolved and cached by qkv_proj so far.
  size_t resolved_qkv_problems() const;
  /// Number of distinct problems of `family` resolved and cached so far (0 for an unknown family).
  size_t resolved_problems(const std::string& family) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kt
