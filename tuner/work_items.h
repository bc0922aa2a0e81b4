// The tuner's work list, family-neutral: the problems a shapes file names for the registered families, and per
// problem its candidates (default first) with the distinct binaries to compile. autotune's tuning loop, the
// database rows and the report read only this.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cache/tuning_db.h"
#include "generator/compiler.h"
#include "generator/family.h"
#include "tuner/shapes_file.h"
#include "tuner/tuner_registry.h"

namespace kt {

/// One problem of one family.
struct ProblemRef {
  const TunerFamily* family;
  nlohmann::json problem;  ///< canonical problem JSON
  /// Empty for a problem the shapes file names. For a bucket-grid problem (bucket_grid): the keys of the named
  /// problems whose best candidates it measures, besides its default.
  std::vector<std::string> transfer_from = {};
};

/// The problems of `shapes` for the families named in `families`, or for every registered family the file names
/// problems for when `families` is empty (then filled with those names). Registry order, then the file's order.
/// Throws std::invalid_argument naming an unknown family, ProblemError naming the file and the rule for an
/// unsupported problem.
std::vector<ProblemRef> collect_problems(const ShapesFile& shapes, std::vector<std::string>& families);

/// The problems whose key (TunerFamily::problem_key, e.g. "qkv_proj/bf16/int4/m16/k3584/h28/kv4/d128/bias/rope")
/// `keep` accepts, in their order (autotune --problems). A kept bucket-grid problem keeps its transfer_from: the
/// neighbours' measurements come from the database, so it measures only its default when they were never tuned there.
/// Throws std::invalid_argument naming `what` (the option as the user wrote it) when none is kept.
std::vector<ProblemRef> select_problems(std::vector<ProblemRef> problems,
                                        const std::function<bool(const std::string& key)>& keep,
                                        const std::string& what);

/// How many of each neighbour's fastest candidates a bucket-grid problem measures (besides its own default).
constexpr int kGridTransfer = 3;
/// How many named problems (the nearest) a bucket-grid problem takes candidates from.
constexpr int kGridNeighbours = 2;

/// The bucket grid between the problems a shapes file names (autotune's default, --grid buckets): for each family
/// and kernel class (Family::class_key), every combination of power-of-two buckets (generator/family.h,
/// size_bucket) of the family's bucket sizes between the smallest and largest bucket the named problems of the class
/// reach, less the buckets a named problem already holds, gets one problem at the bucket's power-of-two sizes. Its
/// other fields come from the named problem nearest in buckets; bucket sizes equal in every named problem of the
/// class stay equal (attention_prefill's seqlen_q = seqlen_k). Each grid problem names its kGridNeighbours nearest
/// named problems (Family::nearness) in transfer_from: the tuner measures only their kGridTransfer fastest candidates
/// and the default there, so the grid costs a few candidates per bucket. Returns only the added problems, in the
/// order of `named` (family, then class), then of the buckets. Deterministic. Sizes a family refuses
/// (with_bucket_sizes throws) are left out.
std::vector<ProblemRef> bucket_grid(const std::vector<ProblemRef>& named);

/// One problem's candidates, family-neutral: what the tuning loop, the database and the report need.
struct WorkItem {
  std::string family, key;
  nlohmann::json problem;
  double flops = 0, bytes = 0;          ///< for TFLOP/s and GB/s (bytes 0 when not meaningful)
  std::vector<nlohmann::json> configs;  ///< candidates, default first
  std::vector<std::string> variants;    ///< per candidate
  std::vector<size_t> source;           ///< per candidate: index of its binary in WorkPlan::sources
  std::string default_variant;
  /// Bucket-grid problems only (ProblemRef::transfer_from): the named problems whose candidates it measures.
  std::vector<std::string> transfer_from = {};
  /// A candidate the --max-candidates prefix cut off (config, variant name, index of its binary in WorkPlan::sources).
  struct Reserve {
    nlohmann::json config;
    std::string variant;
    size_t source = 0;
  };
  /// Per candidate: its pipeline-depth siblings that the prefix cut off (depth_siblings), in the family's order; what
  /// autotune's two-round strategies measure besides the first round's leaders (kt::refine_leaders). Empty vectors when
  /// nothing was cut (or for a bucket-grid problem).
  std::vector<std::vector<Reserve>> siblings = {};
};

/// Whether configs a and b are the same but for their pipeline depth: their JSON objects have the same leaves, and
/// exactly one differs, a leaf named "stages" (every family's configs name the depth so).
bool depth_siblings(const nlohmann::json& a, const nlohmann::json& b);

struct WorkOptions {
  int max_candidates = 0;  ///< at most this many candidates per problem (default first); 0 = all
  /// Keeps a candidate by variant name (autotune --only); the default config always stays. Empty: keep all.
  std::function<bool(const std::string& variant)> keep;
  /// Fill WorkItem::siblings (the depth siblings the max_candidates prefix cut off) and add their binaries to the
  /// plan's sources; false: siblings stay empty.
  bool depth_siblings = false;
};

struct WorkPlan {
  std::vector<KernelSource> sources;  ///< distinct binaries: one per (family, name expression)
  std::vector<WorkItem> items;        ///< one per problem, in the order of `problems`
};

/// The variants a bucket-grid problem measures: its default and, from each neighbour's measurements (rows of any
/// status, several per variant allowed), the kGridTransfer variants with the smallest 'ok' median, the unscreened
/// ones first (db::Measurement::screened; ties: the smaller name). Neighbours without an 'ok' row add nothing.
std::set<std::string> grid_candidates(const std::string& default_variant,
                                      const std::vector<std::vector<db::Measurement>>& neighbours);

/// Enumerates every problem's candidates for `arch` and `device` in the family's order, the default config first,
/// then `keep`, then `max_candidates`. A bucket-grid problem keeps its default and the candidates whose variant
/// name one of its transfer_from problems (earlier in `problems`) has.
WorkPlan build_work(const std::vector<ProblemRef>& problems, ArchId arch, const DeviceModel& device,
                    const WorkOptions& options);

/// The shard of a (problem, candidate) pair for `count` shards: FNV-1a of "family\nproblem key\nvariant" modulo
/// count. It depends on the pair alone (not on its position in a plan), so processes whose plans differ in order
/// or in other candidates still agree on every pair they share.
int shard_of(const std::string& family, const std::string& problem_key, const std::string& variant, int count);

/// Shard `index` of `count` (0 <= index < count) of `plan` (autotune --shard index/count): each item keeps the
/// candidates shard_of assigns to the shard (the default config too only when it falls there); items left without
/// candidates are dropped, and so are the binaries no kept candidate uses. The count shards of a plan are disjoint
/// and together hold every (problem, candidate) pair of it exactly once. Throws std::invalid_argument when count < 1
/// or index is outside [0, count).
WorkPlan shard_work(const WorkPlan& plan, int index, int count);

}  // namespace kt
