// The family-neutral kernel-family interface (CUTLASS library's Operation + Manifest is the model): what the
// tuner, `autotune show`, the runtime's lookup chain and kernel cache know about a family, with problems and
// configs as their database JSON. Each family implements it once (generator/<family>_type.cpp, through
// FamilyAdapter in generator/family_adapter.h) and generator/registry.cpp lists it. Callers iterate the
// registry and never branch on a family's name.
//
// Layers (ARCHITECTURE.md: templates <- generator <- runtime <- tuner): this interface is the generator's part.
// The runtime's typed launch adapter is runtime/<family>.h (RuntimeAdapter), the tuner's shapes-file problems
// and measure session are tuner/tuner_registry.h. ARCHITECTURE.md, "Adding a family", gives the recipe.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/kt_types.h"
#include "generator/arch.h"  // DeviceModel, device_model()
#include "generator/compiler.h"

namespace kt {

/// A problem no variant supports, or a malformed one. The message names the family and the rule.
struct ProblemError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/// Grid, block and dynamic shared memory (bytes) of one launch. cluster_y: blocks along grid y per thread-block
/// cluster (1: no cluster).
struct LaunchDims {
  unsigned grid_x, grid_y, grid_z;
  unsigned block_x;
  unsigned smem_bytes;
  unsigned cluster_y = 1;
};

/// How far a tuned problem is from an asked one of the same class, for the runtime's nearest step: smaller is
/// nearer. Compared as (distance, tie) after quantizing both to 1e-9, then by the tuned problem key.
struct Nearness {
  double distance = 0;  ///< log-space distance of the tuned sizes (printed in the `why`)
  double tie = 0;       ///< tie break among equal distances
};

/// One kernel family. Problems and configs are the JSON stored in the tuning database (problem_json,
/// config_json); every function taking a problem parses it and throws ProblemError naming a missing or
/// mistyped field.
class Family {
 public:
  virtual ~Family() = default;

  /// "attention_prefill": the family column of the database and the registry key.
  virtual const std::string& name() const = 0;
  /// One line for `autotune show` and the docs.
  virtual const std::string& description() const = 0;

  // ---- problem: the result-defining database key ----
  /// The problem parsed, validated (throws ProblemError naming the rule no variant supports) and written back
  /// in canonical form: canonical_problem(canonical_problem(j)) == canonical_problem(j).
  virtual nlohmann::json canonical_problem(const nlohmann::json& problem) const = 0;
  /// "attention_prefill/bf16/b1/sq512/sk512/h28/kv4/d128/causal": canonical and greppable.
  virtual std::string problem_key(const nlohmann::json& problem) const = 0;
  /// The kernel class a tuned winner must share with an asked problem for the runtime's nearest step, e.g.
  /// "attention_prefill/bf16/d128/causal" (the key less the sizes the nearest step interpolates).
  virtual std::string class_key(const nlohmann::json& problem) const = 0;
  /// Distance of `tuned` from `asked` (both of one class_key).
  virtual Nearness nearness(const nlohmann::json& asked, const nlohmann::json& tuned) const = 0;
  /// The sizes the nearest step interpolates and the bucket grid spans, by problem JSON field name, in a fixed
  /// order (qkv_proj: m; attention_prefill: seqlen_q, seqlen_k; attention_decode: batch, kv_len). Each is >= 1.
  virtual std::vector<std::pair<std::string, long long>> bucket_sizes(const nlohmann::json& problem) const = 0;
  /// `problem` with its bucket sizes replaced by `sizes` (bucket_sizes' order), canonical. Throws ProblemError when
  /// the count differs or the result is a problem no variant supports.
  virtual nlohmann::json with_bucket_sizes(const nlohmann::json& problem,
                                           const std::vector<long long>& sizes) const = 0;
  /// FLOPs of one call, and the bytes it must move at least (0 where not meaningful).
  virtual double flops(const nlohmann::json& problem) const = 0;
  virtual double min_bytes(const nlohmann::json& problem) const = 0;

  // ---- configs: what changes speed only ----
  /// The valid configs of `problem` on `arch` in the family's candidate order (what --max-candidates keeps first).
  virtual std::vector<nlohmann::json> enumerate(const nlohmann::json& problem, ArchId arch,
                                                const DeviceModel& device) const = 0;
  /// The built-in default for the arch (the runtime's last step, the tuner's baseline).
  virtual nlohmann::json default_config(const nlohmann::json& problem, ArchId arch) const = 0;
  virtual bool same_config(const nlohmann::json& a, const nlohmann::json& b) const = 0;
  /// Why `config` cannot compute `problem` on `arch` (correctness only: not the pruning of enumerate by speed),
  /// or nullptr. Throws ProblemError for a config JSON it cannot read.
  virtual const char* unusable(const nlohmann::json& problem, const nlohmann::json& config, ArchId arch) const = 0;
  /// The word the runtime's `why` uses for configs unusable() rejects ("invalid", "unusable").
  virtual const char* rejected_as() const = 0;

  // ---- one variant ----
  /// Canonical, greppable: every kernel axis in declaration order, then the arch.
  virtual std::string variant_name(const nlohmann::json& problem, const nlohmann::json& config, ArchId arch) const = 0;
  /// The NVRTC name expression; variants with one expression share one binary.
  virtual std::string name_expression(const nlohmann::json& problem, const nlohmann::json& config) const = 0;
  virtual KernelSource kernel_source(const nlohmann::json& problem, const nlohmann::json& config,
                                     ArchId arch) const = 0;
  virtual LaunchDims launch_dims(const nlohmann::json& problem, const nlohmann::json& config,
                                 const DeviceModel& device) const = 0;
  /// Device workspace the launch needs (split-K partials, counters), bytes; 0 for none.
  virtual size_t workspace_bytes(const nlohmann::json& problem, const nlohmann::json& config,
                                 const DeviceModel& device) const = 0;
};

/// The power-of-two bucket of a size x >= 1: the k with 2^(k - 1/2) <= x < 2^(k + 1/2), so 2^k is x's nearest power
/// of two in log space (3 -> 2, i.e. 4; 5 -> 2; 6 -> 3, i.e. 8; 1000 -> 10, i.e. 1024). Exact integer arithmetic.
/// Throws std::invalid_argument for x < 1 or x >= 2^31.
int size_bucket(long long x);

/// The runtime's bucket of a problem: its class_key, then "/<name>~<2^k>" for each of its bucket_sizes, e.g.
/// "qkv_proj/bf16/int4/k3584/h28/kv4/d128/bias/rope/m~16" for m 12..22. The runtime's nearest step only answers from
/// a tuned problem of the same bucket (runtime/runtime.h, resolve), and the tuner's default grid tunes one problem
/// per bucket between the sizes a shapes file names (tuner/work_items.h, bucket_grid).
std::string bucket_key(const Family& family, const nlohmann::json& problem);

}  // namespace kt
