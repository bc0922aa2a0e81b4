// Inputs, float64 reference rows, device buffers and verification for attention_prefill.
// Shared by the [gpu] tests, the tuner's verify-before-time step and the benchmark.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/driver.h"
#include "generator/attention_family.h"

namespace kt {
namespace attn {

/// Random inputs (normal, stddev 1, rounded to the dtype; never zeros) in contiguous FlashAttention
/// layout: q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D], as dtype bits and as exact floats.
struct HostInputs {
  Problem problem;
  std::vector<uint16_t> q, k, v;
  std::vector<float> qf, kf, vf;
};
HostInputs make_inputs(const Problem& p, uint64_t seed);

/// Float64 reference for a subset of query rows (b, i, h): every row when the problem has at most
/// max_rows rows, else a random sample of max_rows that always includes the first and last rows
/// of every (b, h) pair of the first and last batch. out: rows.size() x D; lse natural log.
struct RefRows {
  std::vector<std::array<int, 3>> rows;  // (b, i, h)
  std::vector<double> out;
  std::vector<double> lse;
  double softmax_scale = 0;
};
RefRows reference_rows(const HostInputs& in, double softmax_scale, size_t max_rows, uint64_t seed, int threads = 0);

/// Acceptance bound on ||out - ref|| / ||ref||: 2e-3 for fp16, 1e-2 for bf16.
double tolerance(DType dtype);

/// Outcome of one verification.
struct Verdict {
  bool pass = false;
  double rel_l2 = 0;        ///< over the reference rows
  double max_abs = 0;       ///< over the reference rows
  double lse_max_err = 0;   ///< max |lse - ref| over reference rows with a visible key
  long long unwritten = 0;  ///< output (and lse) elements that are NaN anywhere: poison left or NaN computed
  std::string message;      ///< empty when pass
};

/// Checks a downloaded output (the whole O tensor, and the whole LSE when non-empty) against the
/// reference rows. Every element of O must be finite (outputs are poisoned with NaN before each run).
Verdict verify(const HostInputs& in, const RefRows& ref, const std::vector<uint16_t>& out,
               const std::vector<float>& lse);

/// Device copies of a problem's inputs (`copies` rotating sets, for cold-L2 timing) and outputs.
class DeviceProblem {
 public:
  DeviceProblem(const HostInputs& in, int copies, bool with_lse);
  int copies() const { return static_cast<int>(q_.size()); }
  /// Contiguous kernel arguments for input/output set `copy`.
  FwdParams params(int copy, float softmax_scale) const;
  /// Fills every O and LSE element of every set with NaN (0xFFFF / 0xFFFFFFFF).
  void poison();
  /// Downloads O (and LSE, if allocated) of set `copy`.
  void download(int copy, std::vector<uint16_t>& out, std::vector<float>& lse) const;

 private:
  Problem p_;
  std::vector<cuda::DeviceBuffer> q_, k_, v_, o_, lse_;
};

/// Bytes of one input+output set of a problem (q, k, v, o and lse).
size_t set_bytes(const Problem& p);

/// Number of rotating input sets so that together they exceed 3x the L2 size (at least 1).
int cold_l2_copies(size_t set_bytes, size_t l2_bytes);

}  // namespace attn
}  // namespace kt
