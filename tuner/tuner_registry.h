// The tuner's part of each family (ARCHITECTURE.md: the tuner sits above the runtime, so these live here): the problems
// a shapes file names, the float64 reference rows and tolerance, and the GPU measure session. Listed beside the
// generator's registry (generator/registry.h), one line per family in tuner/tuner_registry.cpp; autotune, the
// worker and the work-item builder iterate it and never branch on a family's name.
#pragma once
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "generator/family.h"
#include "tuner/session.h"
#include "tuner/shapes_file.h"

namespace kt {

struct TunerFamily {
  const Family* family;  ///< the generator-level interface (name, enumerate, sources, ...)
  /// The family's problems in a shapes file, as canonical problem JSON in the file's order; empty when the file
  /// names no workload of the family. Throws ProblemError naming the file and the rule for an unsupported one.
  std::function<std::vector<nlohmann::json>(const ShapesFile&)> problems;
  /// Float64 reference rows the worker computes per problem (a row's cost differs per family).
  size_t ref_rows;
  /// Relative L2 error verification accepts for the problem's dtype / format.
  std::function<double(const nlohmann::json& problem)> tolerance;
  /// The measure session for a problem (make_session's per-family factory). Requires a current context.
  std::function<std::unique_ptr<MeasureSession>(const nlohmann::json& problem, uint64_t seed, size_t ref_rows,
                                                size_t l2_bytes)>
      session;
  /// Optional: problems with equal keys share host inputs that a worker keeps from one problem to the next (qkv_proj:
  /// the quantized weight of one format, dtype, n and k), so autotune --devices measures them on one GPU in a row
  /// (tuner/item_scheduler.h). Empty: nothing is shared.
  std::function<std::string(const nlohmann::json& problem)> input_key;
};

/// A family's registration from its typed pieces: `problems(shapes)` gives typed problems (each written with
/// `to_json`), `tolerance(problem)` reads the problem JSON, and `Session(problem, seed, ref_rows, l2_bytes)` is the
/// family's MeasureSession built from the typed problem (`from_json`).
template <class Session, class Problem>
TunerFamily make_tuner_family(const Family& family, std::vector<Problem> (*problems)(const ShapesFile&),
                              nlohmann::json (*to_json)(const Problem&), Problem (*from_json)(const nlohmann::json&),
                              size_t ref_rows, std::function<double(const nlohmann::json&)> tolerance) {
  TunerFamily f;
  f.family = &family;
  f.problems = [problems, to_json](const ShapesFile& shapes) {
    std::vector<nlohmann::json> out;
    for (const auto& p : problems(shapes)) out.push_back(to_json(p));
    return out;
  };
  f.ref_rows = ref_rows;
  f.tolerance = std::move(tolerance);
  f.session = [from_json](const nlohmann::json& p, uint64_t seed, size_t rows,
                          size_t l2_bytes) -> std::unique_ptr<MeasureSession> {
    return std::make_unique<Session>(from_json(p), seed, rows, l2_bytes);
  };
  return f;
}

/// Every family the tuner can tune, in the generator registry's order.
const std::vector<TunerFamily>& tuner_families();

/// Throws std::invalid_argument("unknown family 'x': known are ...") if name is not registered.
const TunerFamily& find_tuner_family(const std::string& name);

}  // namespace kt
