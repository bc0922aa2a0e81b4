#include "tuner/attention_session.h"

#include "runtime/attention.h"
#include "tuner/attention_problems.h"
#include "tuner/tuner_registry.h"

namespace kt {
namespace attn {

Session::Session(const Problem& p, uint64_t seed, size_t ref_rows, size_t l2_bytes, float softmax_scale)
    : p_(p),
      scale_(contiguous_params(p, nullptr, nullptr, nullptr, nullptr, nullptr, softmax_scale).softmax_scale),
      in_(make_inputs(p, seed)),
      ref_(reference_rows(in_, scale_, ref_rows, seed + 7)),
      check_(in_, 1, true),
      l2_bytes_(l2_bytes) {}

Outcome Session::measure(const LoadedKernel& kernel, const Config& config, CUstream stream, double budget_ms) {
  Outcome out;
  check_.poison();
  launch(kernel, p_, config, check_.params(0, scale_), stream);
  cuda::check(cuda::api().cuStreamSynchronize(stream), "cuStreamSynchronize");
  std::vector<uint16_t> o;
  std::vector<float> lse;
  check_.download(0, o, lse);
  out.verdict = verify(in_, ref_, o, lse);
  if (!out.verdict.pass) {
    out.status = db::Status::wrong_result;
    out.error = out.verdict.message;
    return out;
  }
  if (!rotation_) rotation_ = std::make_unique<DeviceProblem>(in_, cold_l2_copies(set_bytes(p_), l2_bytes_), false);
  std::vector<FwdParams> params;
  for (int r = 0; r < rotation_->copies(); ++r) params.push_back(rotation_->params(r, scale_));
  out.timing =
      time_launches([&](int n) { launch(kernel, p_, config, params[n % params.size()], stream); }, stream, budget_ms);
  return out;
}

namespace {

class Measure : public MeasureSession {
 public:
  Measure(const Problem& p, uint64_t seed, size_t ref_rows, size_t l2) : s_(p, seed, ref_rows, l2) {}
  kt::Outcome measure(const LoadedKernel& k, const nlohmann::json& config, CUstream stream, double budget_ms) override {
    const auto o = s_.measure(k, config_from_json(config), stream, budget_ms);
    return kt::Outcome{o.status, o.error, o.verdict.rel_l2, o.timing};
  }

 private:
  Session s_;
};

}  // namespace

TunerFamily tuner_family() {
  TunerFamily f;
  f.family = &family_type();
  f.problems = [](const ShapesFile& shapes) {
    std::vector<nlohmann::json> out;
    for (const auto& p : attention_prefill_problems(shapes)) out.push_back(problem_to_json(p));
    return out;
  };
  f.ref_rows = 512;  // a row costs seqlen_k x head_dim
  f.tolerance = [](const nlohmann::json& p) { return tolerance(problem_from_json(p).dtype); };
  f.session = [](const nlohmann::json& p, uint64_t seed, size_t ref_rows,
                 size_t l2_bytes) -> std::unique_ptr<MeasureSession> {
    return std::make_unique<Measure>(problem_from_json(p), seed, ref_rows, l2_bytes);
  };
  return f;
}

}  // namespace attn
}  // namespace kt
