#include "tuner/decode_session.h"

#include <memory>

#include "runtime/decode.h"
#include "tuner/decode_harness.h"
#include "tuner/decode_problems.h"
#include "tuner/tuner_registry.h"

namespace kt {
namespace decode {
namespace {

/// One problem's inputs (every sequence kv_len tokens; a paged cache over shuffled pages), up to ref_rows float64
/// reference rows, the check buffers (with LSE) and, once a candidate passes, `cold_l2_copies` rotating input sets
/// (together > 3 x l2_bytes). Each candidate gets its own split partials and counters, zeroed once (the kernel
/// leaves them zero). Requires a current context.
class Measure : public MeasureSession {
 public:
  Measure(const Problem& p, uint64_t seed, size_t ref_rows, size_t l2_bytes)
      : p_(p),
        scale_(contiguous_params(p, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1).softmax_scale),
        in_(make_inputs(p, seed)),
        ref_(reference_rows(in_, scale_, ref_rows, seed + 7)),
        check_(in_, 1, true),
        l2_bytes_(l2_bytes) {}

  kt::Outcome measure(const LoadedKernel& kernel, const nlohmann::json& config_json, CUstream stream,
                      double budget_ms) override {
    const Config config = config_from_json(config_json);
    cuda::DeviceBuffer workspace(workspace_bytes(p_, config)), counters(counter_bytes(p_, config));
    counters.fill_u32(0);
    float* ws = reinterpret_cast<float*>(static_cast<uintptr_t>(workspace.ptr()));
    unsigned* cnt = reinterpret_cast<unsigned*>(static_cast<uintptr_t>(counters.ptr()));
    const auto check = [&] {
      check_.poison();
      launch(kernel, p_, config, check_.params(0, scale_), ws, cnt, stream);
      cuda::check(cuda::api().cuStreamSynchronize(stream), "cuStreamSynchronize");
      check_.download(0, o_, lse_);
      return verify(in_, ref_, o_, lse_);
    };
    const auto timed = [&] {
      if (!rotation_)
        rotation_ = std::make_unique<DeviceProblem>(in_, cold_l2_copies(set_bytes(in_), l2_bytes_), false);
      std::vector<DecodeParams> params;
      for (int r = 0; r < rotation_->copies(); ++r) params.push_back(rotation_->params(r, scale_));
      return [&kernel, &config, this, params, ws, cnt, stream](int n) {
        launch(kernel, p_, config, params[size_t(n) % params.size()], ws, cnt, stream);
      };
    };
    return verify_then_time(stream, budget_ms, check, timed);
  }

 private:
  Problem p_;
  float scale_;
  HostInputs in_;
  RefRows ref_;
  DeviceProblem check_;
  std::unique_ptr<DeviceProblem> rotation_;
  size_t l2_bytes_;
  std::vector<uint16_t> o_;  // the check's downloads, kept across candidates (no new pages per check)
  std::vector<float> lse_;
};

}  // namespace

TunerFamily tuner_family() {
  // a row costs kv_len x head_dim
  return make_tuner_family<Measure>(family_type(), &attention_decode_problems, &problem_to_json, &problem_from_json,
                                    256, [](const nlohmann::json& p) { return tolerance(problem_from_json(p).dtype); });
}

}  // namespace decode
}  // namespace kt
