// Inputs, quantized weights, device buffers, float64 reference and verification for qkv_proj.
// Shared by the [gpu] tests, the tuner's verify-before-time step and the benchmark.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/driver.h"
#include "generator/qkv_family.h"
#include "quant/quant.h"

namespace kt {
namespace qkv {

/// Random inputs: X [m, k] normal(0, 1) in the dtype, W [n, k] normal(0, 0.02) quantized to the format,
/// bias [n] normal(0, 0.1) in the dtype, positions [m] random in [0, 32768).
struct HostInputs {
  Problem problem;
  double rope_theta = 1e6;
  std::vector<uint16_t> x, bias;
  std::vector<float> xf, biasf;
  std::vector<int> positions;
  quant::PackedWeight w;
  std::vector<double> wd;  ///< dequantized W [n, k]: exactly what the kernel multiplies
};
HostInputs make_inputs(const Problem& p, uint64_t seed, double rope_theta = 1e6);
/// What make_inputs' weight depends on besides the seed: "format/dtype/n/k" (everything but m, bias and RoPE). Problems
/// with the same key share one weight (make_inputs_with_weight; the tuner keeps them on one GPU).
std::string weight_key(const Problem& p);
/// As make_inputs for problem p (its own m, bias, RoPE), reusing the quantized weight of `from`, which must have
/// the same weight_key. Throws ProblemError otherwise.
HostInputs make_inputs_with_weight(const Problem& p, uint64_t seed, const HostInputs& from);

/// Reference rows (all when m <= max_rows, else a random sample incl. the first and last token).
struct RefRows {
  std::vector<int> rows;
  std::vector<double> q, k, v;  ///< [rows, Hq, D], [rows, Hkv, D], [rows, Hkv, D]
};
RefRows reference_rows(const HostInputs& in, size_t max_rows, uint64_t seed);

/// 2e-3 (fp16 activations), 1e-2 (bf16): ||out - ref|| / ||ref|| over Q, K and V together.
double tolerance(DType dtype);

struct Verdict {
  bool pass = false;
  double rel_l2 = 0;
  long long unwritten = 0;  ///< NaN/inf anywhere in Q, K or V (outputs are poisoned before each run)
  std::string message;
};
Verdict verify(const HostInputs& in, const RefRows& ref, const std::vector<uint16_t>& q, const std::vector<uint16_t>& k,
               const std::vector<uint16_t>& v);

/// Device copies: `copies` rotating sets of the weight (the dominant bytes) for cold-L2 timing, one X,
/// bias, positions, outputs, and a split-K workspace sized for `max_workspace_bytes`.
class DeviceInputs {
 public:
  DeviceInputs(const HostInputs& in, int copies);
  int copies() const { return int(w_data_.size()); }
  /// Kernel arguments for weight copy `copy` and a config (workspace/counters grown on demand).
  QkvParams params(int copy, const Config& c);
  void poison();
  void download(std::vector<uint16_t>& q, std::vector<uint16_t>& k, std::vector<uint16_t>& v) const;
  static size_t weight_bytes(const HostInputs& in);

 private:
  HostInputs const* in_;
  std::vector<cuda::DeviceBuffer> w_data_, w_scales_, w_zeros_;
  cuda::DeviceBuffer x_, bias_, pos_, q_, k_, v_, ws_, counters_;
};

}  // namespace qkv
}  // namespace kt
