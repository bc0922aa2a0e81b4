// Inputs, float64 reference rows, device buffers and verification for attention_decode. Shared by the tuner's
// verify-before-time step and the [gpu] runtime tests.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/driver.h"
#include "generator/decode_family.h"
#include "reference/host_buffer.h"

namespace kt {
namespace decode {

/// A decode problem's host data in the kernel's layouts (dtype bits):
///   q [B, q_len, Hq, D]; K/V contiguous [B, capacity, Hkv, D], or paged [num_pages, page_size, Hkv, D] with a
///   shuffled block table [B, max_pages] over a pool of B x max_pages + 3 pages (the 3 spare pages never named);
///   lens [B] the sequences' lengths (seqlens_k).
/// Values: normal, stddev 1, rounded to the dtype (never zeros). Cache slots past a sequence's length, and the pages
/// the table does not name, hold NaN, so a read the kernel must not make shows in its output.
struct HostInputs {
  Problem problem;
  std::vector<int> lens;
  int capacity = 0;                  // tokens a sequence may hold (S_max, or max_pages x page_size)
  int max_pages = 0, num_pages = 0;  // paged only
  std::vector<uint16_t> q;
  HostBuffer<uint16_t> k, v;  // written once, in parallel, by make_inputs
  std::vector<int> table;     // [B, max_pages] (paged)
};

/// Inputs for p. lens empty: every sequence holds p.kv_len tokens (what the tuner times); else lens.size() ==
/// batch, each in [0, capacity]. capacity 0: the longest length (at least kv_len), rounded up to a whole page when
/// paged. Throws ProblemError (unsupported p) or std::invalid_argument (lens / capacity).
HostInputs make_inputs(const Problem& p, uint64_t seed, std::vector<int> lens = {}, int capacity = 0);

/// Float64 reference rows (b, i, h): every row when the problem has at most max_rows, else max_rows of them drawn
/// at random from the first and last sequence and two more picked at random (and every row of the first one that
/// fits). out: rows.size() x D; lse natural log (-inf for a row that sees no key).
struct RefRows {
  std::vector<std::array<int, 3>> rows;  // (b, i, h)
  std::vector<double> out;
  std::vector<double> lse;
};
RefRows reference_rows(const HostInputs& in, double softmax_scale, size_t max_rows, uint64_t seed, int threads = 0);

/// Acceptance bound on ||out - ref|| / ||ref|| (as the prefill family's): 2e-3 for fp16, 1e-2 for bf16.
double tolerance(DType dtype);

/// Outcome of one verification.
struct Verdict {
  bool pass = false;
  double rel_l2 = 0;        ///< over the reference rows
  double lse_max_err = 0;   ///< max |lse - ref| over the reference rows (-inf must be -inf)
  long long unwritten = 0;  ///< output (and lse) elements that are NaN anywhere: poison left or NaN computed
  std::string message;      ///< empty when pass
};

/// Checks a downloaded output (the whole O [B, q_len, Hq, D], and the whole LSE [B, Hq, q_len] when non-empty)
/// against the reference rows. Every element must be finite (outputs are poisoned with NaN before each run; a
/// sequence of length 0 must give o = 0), and an LSE row that sees no key must be -inf.
Verdict verify(const HostInputs& in, const RefRows& ref, const std::vector<uint16_t>& out,
               const std::vector<float>& lse);

/// Device copies of a problem's inputs (`copies` rotating sets, for cold-L2 timing) and outputs.
class DeviceProblem {
 public:
  DeviceProblem(const HostInputs& in, int copies, bool with_lse);
  int copies() const { return static_cast<int>(q_.size()); }
  /// Kernel arguments for input/output set `copy` (contiguous_params / paged_params; bind_config not applied).
  DecodeParams params(int copy, float softmax_scale) const;
  /// Fills every O and LSE element of every set with NaN (0xFFFF / 0xFFFFFFFF).
  void poison();
  /// Downloads O (and LSE, if allocated) of set `copy`.
  void download(int copy, std::vector<uint16_t>& out, std::vector<float>& lse) const;

 private:
  Problem p_;
  int capacity_, max_pages_, num_pages_;
  size_t q_elems_, lse_elems_;
  std::vector<cuda::DeviceBuffer> q_, k_, v_, o_, lse_, lens_, table_;
};

/// Bytes of one input+output set of a problem (q, the K/V cache, o, lse, lens, table).
size_t set_bytes(const HostInputs& in);

/// Number of rotating input sets so that together they exceed 3x the L2 size (at least 1).
int cold_l2_copies(size_t set_bytes, size_t l2_bytes);

}  // namespace decode
}  // namespace kt
