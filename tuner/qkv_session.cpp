#include "tuner/qkv_session.h"

#include <algorithm>

#include "runtime/qkv.h"
#include "tuner/qkv_harness.h"
#include "tuner/qkv_problems.h"
#include "tuner/tuner_registry.h"

namespace kt {
namespace qkv {
namespace {

/// qkv_proj: the quantized weight depends only on (format, dtype, n, k, seed), so the worker keeps the last one (the
/// weight alone: the activations of a large M would cost more to copy than to draw) and reuses it across the M values
/// of a sweep.
class Measure : public MeasureSession {
 public:
  Measure(const qkv::Problem& p, uint64_t seed, size_t ref_rows, size_t l2) {
    static std::unique_ptr<qkv::HostInputs> cached;  // one worker process = one thread; weight fields only
    const bool reuse = cached && qkv::weight_key(cached->problem) == qkv::weight_key(p) && cached_seed_ == seed;
    if (reuse) {
      in_ = qkv::make_inputs_with_weight(p, seed, *cached);
    } else {
      in_ = qkv::make_inputs(p, seed);
      cached = std::make_unique<qkv::HostInputs>();
      cached->problem = in_.problem;
      cached->rope_theta = in_.rope_theta;
      cached->w = in_.w;
      cached->wd = in_.wd;
    }
    cached_seed_ = seed;
    ref_ = qkv::reference_rows(in_, ref_rows, seed + 5);
    check_ = std::make_unique<qkv::DeviceInputs>(in_, 1);
    const size_t wb = qkv::DeviceInputs::weight_bytes(in_);
    rot_copies_ = int(3 * l2 / std::max<size_t>(wb, 1) + 1);
  }
  Outcome measure(const LoadedKernel& k, const nlohmann::json& config, CUstream stream, double budget_ms) override {
    const auto c = qkv::config_from_json(config);
    const auto check = [&] {
      check_->poison();
      qkv::launch(k, in_.problem, c, check_->params(0, c), stream);
      cuda::check(cuda::api().cuStreamSynchronize(stream), "cuStreamSynchronize");
      check_->download(q_, k_, v_);
      return qkv::verify(in_, ref_, q_, k_, v_);
    };
    const auto timed = [&] {
      if (!rot_) rot_ = std::make_unique<qkv::DeviceInputs>(in_, rot_copies_);
      std::vector<qkv::QkvParams> params;
      for (int r = 0; r < rot_->copies(); ++r) params.push_back(rot_->params(r, c));
      return [&k, &c, this, params, stream](int n) {
        qkv::launch(k, in_.problem, c, params[size_t(n) % params.size()], stream);
      };
    };
    return verify_then_time(stream, budget_ms, check, timed);
  }

 private:
  static inline uint64_t cached_seed_ = 0;
  qkv::HostInputs in_;
  qkv::RefRows ref_;
  std::unique_ptr<qkv::DeviceInputs> check_, rot_;
  int rot_copies_ = 1;
  std::vector<uint16_t> q_, k_, v_;  // the check's downloads, kept across candidates (no new pages per check)
};

}  // namespace

TunerFamily tuner_family() {
  // a row costs n x k
  TunerFamily f =
      make_tuner_family<Measure>(family_type(), &qkv_proj_problems, &problem_to_json, &problem_from_json, 48,
                                 [](const nlohmann::json& p) { return tolerance(problem_from_json(p).dtype); });
  f.input_key = [](const nlohmann::json& j) { return weight_key(problem_from_json(j)); };  // Measure's cached weight
  return f;
}

}  // namespace qkv
}  // namespace kt
