// kt::Runtime: the dispatcher. problem -> lookup chain (tuning database winners -> nearest tuned
// problem -> built-in default) -> cubin (database binary -> disk cubin cache -> NVRTC) -> launch.
// DESIGN.md, "The runtime lookup chain". Never links the tuner.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cache/tuning_db.h"
#include "generator/attention_family.h"

namespace kt {

/// The device cannot run any kerntune kernel (compute capability below 8.0).
struct UnsupportedDevice : std::runtime_error {
  using std::runtime_error::runtime_error;
};

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

/// The lookup chain as a pure function (no CUDA, no database I/O), used by Runtime::explain.
///
/// 1. check_problem(p): throws ProblemError naming the rule when no variant supports p
///    (head_dim not 64/128, num_heads % num_kv_heads != 0, sizes < 1, ...).
/// 2. exact: a winner of family attention_prefill on `device_name` whose problem_key == p.key().
/// 3. nearest: among winners of the same family and device class with the same dtype, head_dim and
///    causal flag, the one minimising |ln(sq/sq')| + |ln(sk/sk')| (sequence lengths; ties, within 1e-9,
///    broken by |ln(batch*heads / batch'*heads')|, then by problem key).
/// In steps 2 and 3 a winner is skipped when its problem/config JSON does not parse, when its family
/// or device class differs, or when invalid_reason() rejects its config for p's class on `arch`
/// (e.g. more shared memory than the arch allows).
/// 4. default: attn::default_config(arch, p).
/// Deterministic: the result depends only on the arguments, not on the order of `winners`.
AttentionChoice resolve_attention(const std::vector<db::Winner>& winners, const std::string& device_name, ArchId arch,
                                  const attn::Problem& p);

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
  /// whose winners are used; its compute capability gives the arch (arch_for_compute_capability).
  /// Throws db::DbError (missing or bad database file), cuda::CudaError / std::runtime_error (no
  /// driver or no GPU), UnsupportedDevice (compute capability < 8.0).
  explicit Runtime(const std::string& db_path = "");
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// The lookup chain for p on this device (resolve_attention over the database's winners).
  /// Throws ProblemError for an unsupported problem. Thread-safe.
  Choice explain(const attn::Problem& p) const;

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

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kt
