#include "tuner/attention_harness.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <sstream>

#include "reference/attention_ref.h"
#include "reference/dtype_convert.h"
#include "reference/parallel_for.h"

namespace kt {
namespace attn {
namespace {

size_t q_elems(const Problem& p) { return size_t(p.batch) * p.seqlen_q * p.num_heads * p.head_dim; }
size_t kv_elems(const Problem& p) { return size_t(p.batch) * p.seqlen_k * p.num_kv_heads * p.head_dim; }
size_t lse_elems(const Problem& p) { return size_t(p.batch) * p.num_heads * p.seqlen_q; }

ref::AttentionShape shape_of(const Problem& p, double scale) {
  return ref::AttentionShape{p.batch, p.seqlen_q, p.seqlen_k, p.num_heads, p.num_kv_heads, p.head_dim, p.causal, scale};
}

void fill(const Problem& p, std::vector<uint16_t>& bits, std::vector<float>& f, size_t n, uint64_t seed) {
  bits.resize(n);
  f.resize(n);
  fill_random(p.dtype, bits.data(), n, seed);
  for (size_t i = 0; i < n; ++i) f[i] = dtype_to_float(p.dtype, bits[i]);
}

}  // namespace

HostInputs make_inputs(const Problem& p, uint64_t seed) {
  check_problem(p);
  HostInputs in;
  in.problem = p;
  fill(p, in.q, in.qf, q_elems(p), seed * 3 + 1);
  fill(p, in.k, in.kf, kv_elems(p), seed * 3 + 2);
  fill(p, in.v, in.vf, kv_elems(p), seed * 3 + 3);
  return in;
}

RefRows reference_rows(const HostInputs& in, double scale, size_t max_rows, uint64_t seed, int threads) {
  const Problem& p = in.problem;
  RefRows r;
  r.softmax_scale = scale;
  const size_t total = size_t(p.batch) * p.seqlen_q * p.num_heads;
  if (total <= max_rows) {
    for (int b = 0; b < p.batch; ++b)
      for (int i = 0; i < p.seqlen_q; ++i)
        for (int h = 0; h < p.num_heads; ++h) r.rows.push_back({b, i, h});
  } else {
    std::set<std::array<int, 3>> picked;
    for (int b : {0, p.batch - 1})
      for (int h = 0; h < p.num_heads && picked.size() < max_rows / 2; ++h) {
        picked.insert({b, 0, h});
        picked.insert({b, p.seqlen_q - 1, h});
      }
    std::mt19937_64 rng(seed);
    while (picked.size() < max_rows) {
      size_t idx = rng() % total;
      int h = int(idx % p.num_heads);
      int i = int((idx / p.num_heads) % p.seqlen_q);
      int b = int(idx / (size_t(p.num_heads) * p.seqlen_q));
      picked.insert({b, i, h});
    }
    r.rows.assign(picked.begin(), picked.end());
  }
  const auto shape = shape_of(p, scale);
  r.out.assign(r.rows.size() * p.head_dim, 0.0);
  r.lse.assign(r.rows.size(), 0.0);
  parallel_for(
      r.rows.size(),
      [&](size_t n) {
        const auto& row = r.rows[n];
        r.lse[n] = ref::attention_row(shape, in.qf.data(), in.kf.data(), in.vf.data(), row[0], row[1], row[2],
                                      r.out.data() + n * p.head_dim);
      },
      threads);
  return r;
}

double tolerance(DType dtype) { return dtype == DType::f16 ? 2e-3 : 1e-2; }

Verdict verify(const HostInputs& in, const RefRows& ref, const std::vector<uint16_t>& out,
               const std::vector<float>& lse) {
  const Problem& p = in.problem;
  Verdict v;
  v.unwritten = (long long)count_nonfinite(p.dtype, out.data(), out.size());
  for (float x : lse)
    if (std::isnan(x)) ++v.unwritten;
  std::vector<float> got(ref.rows.size() * p.head_dim);
  for (size_t n = 0; n < ref.rows.size(); ++n) {
    const auto& row = ref.rows[n];
    const size_t base = ((size_t(row[0]) * p.seqlen_q + row[1]) * p.num_heads + row[2]) * p.head_dim;
    for (int d = 0; d < p.head_dim; ++d) got[n * p.head_dim + d] = dtype_to_float(p.dtype, out[base + d]);
    if (!lse.empty()) {
      const float l = lse[(size_t(row[0]) * p.num_heads + row[2]) * p.seqlen_q + row[1]];
      const double want = ref.lse[n];
      double err;
      if (std::isinf(want)) err = (std::isinf(l) && l < 0) ? 0.0 : INFINITY;
      else err = std::fabs(double(l) - want);
      if (std::isnan(err)) err = INFINITY;
      v.lse_max_err = std::max(v.lse_max_err, err);
    }
  }
  const auto c = ref::compare(got.data(), ref.out.data(), got.size());
  v.rel_l2 = c.rel_l2;
  v.max_abs = c.max_abs;
  std::ostringstream msg;
  if (v.unwritten) msg << v.unwritten << " output elements are NaN/inf (unwritten or computed); ";
  if (c.nan_count) msg << c.nan_count << " checked elements non-finite; ";
  if (!(v.rel_l2 <= tolerance(p.dtype))) msg << "rel_l2 " << v.rel_l2 << " > " << tolerance(p.dtype) << "; ";
  if (!(v.lse_max_err <= 1e-3)) msg << "lse error " << v.lse_max_err << " > 1e-3; ";
  v.message = msg.str();
  v.pass = v.message.empty();
  return v;
}

DeviceProblem::DeviceProblem(const HostInputs& in, int copies, bool with_lse) : p_(in.problem) {
  for (int c = 0; c < std::max(1, copies); ++c) {
    q_.emplace_back(in.q.size() * 2);
    k_.emplace_back(in.k.size() * 2);
    v_.emplace_back(in.v.size() * 2);
    o_.emplace_back(in.q.size() * 2);
    q_.back().upload(in.q.data(), in.q.size() * 2);
    k_.back().upload(in.k.data(), in.k.size() * 2);
    v_.back().upload(in.v.data(), in.v.size() * 2);
    if (with_lse) lse_.emplace_back(lse_elems(p_) * 4);
  }
  poison();
}

FwdParams DeviceProblem::params(int copy, float scale) const {
  auto ptr = [](const cuda::DeviceBuffer& b) { return reinterpret_cast<void*>(b.ptr()); };
  return contiguous_params(p_, ptr(q_[copy]), ptr(k_[copy]), ptr(v_[copy]), ptr(o_[copy]),
                           lse_.empty() ? nullptr : static_cast<float*>(ptr(lse_[copy])), scale);
}

void DeviceProblem::poison() {
  for (auto& o : o_) o.fill_u16(0xFFFF);
  for (auto& l : lse_) l.fill_u32(0xFFFFFFFFu);
}

void DeviceProblem::download(int copy, std::vector<uint16_t>& out, std::vector<float>& lse) const {
  out.resize(q_elems(p_));
  o_[copy].download(out.data(), out.size() * 2);
  lse.clear();
  if (!lse_.empty()) {
    lse.resize(lse_elems(p_));
    lse_[copy].download(lse.data(), lse.size() * 4);
  }
}

size_t set_bytes(const Problem& p) { return (2 * q_elems(p) + 2 * kv_elems(p)) * 2 + lse_elems(p) * 4; }

int cold_l2_copies(size_t set_bytes, size_t l2_bytes) {
  if (set_bytes == 0) return 1;
  return int(3 * l2_bytes / set_bytes + 1);  // copies * set_bytes > 3 * l2_bytes
}

}  // namespace attn
}  // namespace kt
