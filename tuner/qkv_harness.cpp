#include "tuner/qkv_harness.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "reference/dtype_convert.h"
#include "reference/parallel_for.h"
#include "reference/qkv_ref.h"

namespace kt {
namespace qkv {
namespace {

ref::QkvShape shape_of(const HostInputs& in) {
  const Problem& p = in.problem;
  return ref::QkvShape{p.m, p.k, p.num_heads, p.num_kv_heads, p.head_dim, p.has_bias, p.rope, in.rope_theta};
}

}  // namespace

namespace {

/// X, bias and positions for p (the weight is filled by the callers).
HostInputs make_activations(const Problem& p, uint64_t seed, double rope_theta) {
  check_problem(p);
  HostInputs in;
  in.problem = p;
  in.rope_theta = rope_theta;
  const uint64_t s = seed ^ 0x9e3779b97f4a7c15ULL;
  in.x.resize(size_t(p.m) * p.k);
  in.xf.resize(in.x.size());
  fill_random(p.dtype, in.x.data(), in.x.size(), s);
  parallel_for(size_t(p.m), [&](size_t row) {  // token rows on every core
    for (size_t i = row * p.k; i < (row + 1) * p.k; ++i) in.xf[i] = dtype_to_float(p.dtype, in.x[i]);
  });
  in.bias.resize(size_t(p.n()));
  in.biasf.resize(in.bias.size());
  fill_random(p.dtype, in.bias.data(), in.bias.size(), s + 1, 0.1f);
  for (size_t i = 0; i < in.bias.size(); ++i) in.biasf[i] = dtype_to_float(p.dtype, in.bias[i]);
  std::mt19937_64 rng(s + 2);
  std::uniform_int_distribution<int> pos(0, 32767);
  in.positions.resize(size_t(p.m));
  for (auto& v : in.positions) v = pos(rng);
  return in;
}

}  // namespace

HostInputs make_inputs(const Problem& p, uint64_t seed, double rope_theta) {
  HostInputs in = make_activations(p, seed, rope_theta);
  std::vector<float> w(size_t(p.n()) * p.k);
  fill_normal(w.data(), w.size(), seed, 0.02f);
  in.w = quant::quantize(p.format, w.data(), p.n(), p.k);
  in.wd.resize(w.size());
  quant::dequantize(in.w, in.wd.data());
  return in;
}

std::string weight_key(const Problem& p) {
  return std::string(quant::format_name(p.format)) + (p.dtype == DType::f16 ? "/fp16" : "/bf16") + "/n" +
         std::to_string(p.n()) + "/k" + std::to_string(p.k);
}

HostInputs make_inputs_with_weight(const Problem& p, uint64_t seed, const HostInputs& from) {
  if (weight_key(from.problem) != weight_key(p))
    throw ProblemError("qkv_proj: make_inputs_with_weight needs the same weight (format, dtype, n and k): " +
                       weight_key(from.problem) + " against " + weight_key(p));
  HostInputs in = make_activations(p, seed, from.rope_theta);
  in.w = from.w;
  in.wd = from.wd;
  return in;
}

RefRows reference_rows(const HostInputs& in, size_t max_rows, uint64_t seed) {
  const Problem& p = in.problem;
  RefRows r;
  if (size_t(p.m) <= max_rows) {
    for (int i = 0; i < p.m; ++i) r.rows.push_back(i);
  } else {
    std::set<int> picked = {0, p.m - 1};
    std::mt19937_64 rng(seed);
    while (picked.size() < max_rows) picked.insert(int(rng() % size_t(p.m)));
    r.rows.assign(picked.begin(), picked.end());
  }
  r.q.resize(r.rows.size() * p.num_heads * p.head_dim);
  r.k.resize(r.rows.size() * p.num_kv_heads * p.head_dim);
  r.v.resize(r.k.size());
  const size_t qrow = size_t(p.num_heads) * p.head_dim, kvrow = size_t(p.num_kv_heads) * p.head_dim;
  // One contiguous range of rows per core (a row costs n x k multiply-adds in float64): each range's reference walks
  // the weights once.
  const size_t chunks = std::min<size_t>(r.rows.size(), std::max(1u, std::thread::hardware_concurrency()));
  parallel_for(chunks, [&](size_t j) {
    const size_t first = r.rows.size() * j / chunks, last = r.rows.size() * (j + 1) / chunks;
    if (first == last) return;
    const std::vector<int> rows(r.rows.begin() + long(first), r.rows.begin() + long(last));
    ref::qkv_projection_rows(shape_of(in), in.xf.data(), in.wd.data(), p.has_bias ? in.biasf.data() : nullptr,
                             p.rope ? in.positions.data() : nullptr, rows, r.q.data() + first * qrow,
                             r.k.data() + first * kvrow, r.v.data() + first * kvrow);
  });
  return r;
}

double tolerance(DType dtype) { return dtype == DType::f16 ? 2e-3 : 1e-2; }

Verdict verify(const HostInputs& in, const RefRows& ref, const std::vector<uint16_t>& q, const std::vector<uint16_t>& k,
               const std::vector<uint16_t>& v) {
  const Problem& p = in.problem;
  Verdict out;
  for (const auto* t : {&q, &k, &v}) out.unwritten += (long long)count_nonfinite(p.dtype, t->data(), t->size());
  double num = 0, den = 0;
  auto acc = [&](const std::vector<uint16_t>& got, const std::vector<double>& want, int heads) {
    const size_t row = size_t(heads) * p.head_dim;
    for (size_t j = 0; j < ref.rows.size(); ++j)
      for (size_t e = 0; e < row; ++e) {
        const double g = dtype_to_float(p.dtype, got[size_t(ref.rows[j]) * row + e]);
        const double w = want[j * row + e];
        if (std::isfinite(g)) num += (g - w) * (g - w);
        den += w * w;
      }
  };
  acc(q, ref.q, p.num_heads);
  acc(k, ref.k, p.num_kv_heads);
  acc(v, ref.v, p.num_kv_heads);
  out.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  std::ostringstream msg;
  if (out.unwritten) msg << out.unwritten << " output elements are NaN/inf (unwritten or computed); ";
  if (!(out.rel_l2 <= tolerance(p.dtype))) msg << "rel_l2 " << out.rel_l2 << " > " << tolerance(p.dtype) << "; ";
  out.message = msg.str();
  out.pass = out.message.empty();
  return out;
}

size_t DeviceInputs::weight_bytes(const HostInputs& in) {
  return in.w.data.size() + in.w.scales.size() + in.w.zeros.size();
}

DeviceInputs::DeviceInputs(const HostInputs& in, int copies) : in_(&in) {
  auto up = [](const void* src, size_t bytes) {
    cuda::DeviceBuffer b(std::max<size_t>(bytes, 16));
    if (bytes) b.upload(src, bytes);
    return b;
  };
  for (int c = 0; c < std::max(1, copies); ++c) {
    w_data_.push_back(up(in.w.data.data(), in.w.data.size()));
    w_scales_.push_back(up(in.w.scales.data(), in.w.scales.size()));
    w_zeros_.push_back(up(in.w.zeros.data(), in.w.zeros.size()));
  }
  x_ = up(in.x.data(), in.x.size() * 2);
  bias_ = up(in.bias.data(), in.bias.size() * 2);
  pos_ = up(in.positions.data(), in.positions.size() * 4);
  const Problem& p = in.problem;
  q_ = cuda::DeviceBuffer(size_t(p.m) * p.num_heads * p.head_dim * 2);
  k_ = cuda::DeviceBuffer(size_t(p.m) * p.num_kv_heads * p.head_dim * 2);
  v_ = cuda::DeviceBuffer(size_t(p.m) * p.num_kv_heads * p.head_dim * 2);
  poison();
}

QkvParams DeviceInputs::params(int copy, const Config& c) {
  const Problem& p = in_->problem;
  const size_t ws = workspace_bytes(p, c, cuda::current_sm_count()), cnt = counter_bytes(p, c);
  if (ws > ws_.bytes()) ws_ = cuda::DeviceBuffer(ws);
  if (cnt > counters_.bytes()) {
    counters_ = cuda::DeviceBuffer(cnt);
    counters_.fill_u32(0);
  }
  auto ptr = [](const cuda::DeviceBuffer& b) { return reinterpret_cast<void*>(b.ptr()); };
  QkvParams a{};
  a.x = ptr(x_);
  a.w_data = ptr(w_data_[copy]);
  a.w_scales = in_->w.scales.empty() ? nullptr : ptr(w_scales_[copy]);
  a.w_zeros = in_->w.zeros.empty() ? nullptr : ptr(w_zeros_[copy]);
  a.bias = p.has_bias ? ptr(bias_) : nullptr;
  a.positions = p.rope ? static_cast<const int*>(ptr(pos_)) : nullptr;
  a.q = ptr(q_);
  a.k = ptr(k_);
  a.v = ptr(v_);
  a.workspace = uses_workspace(c) ? static_cast<float*>(ptr(ws_)) : nullptr;
  a.counters = uses_workspace(c) ? static_cast<unsigned*>(ptr(counters_)) : nullptr;
  a.x_row_stride = p.k;
  a.q_row_stride = (long long)p.num_heads * p.head_dim;
  a.k_row_stride = a.v_row_stride = (long long)p.num_kv_heads * p.head_dim;
  a.m = p.m;
  a.k_dim = p.k;
  a.num_heads = p.num_heads;
  a.num_kv_heads = p.num_kv_heads;
  a.tensor_scale = in_->w.tensor_scale;
  a.rope_log2_theta = std::log2(in_->rope_theta);
  return a;
}

void DeviceInputs::poison() {
  q_.fill_u16(0xFFFF);
  k_.fill_u16(0xFFFF);
  v_.fill_u16(0xFFFF);
}

void DeviceInputs::download(std::vector<uint16_t>& q, std::vector<uint16_t>& k, std::vector<uint16_t>& v) const {
  q.resize(q_.bytes() / 2);
  k.resize(k_.bytes() / 2);
  v.resize(v_.bytes() / 2);
  q_.download(q.data(), q_.bytes());
  k_.download(k.data(), k_.bytes());
  v_.download(v.data(), v_.bytes());
}

}  // namespace qkv
}  // namespace kt
