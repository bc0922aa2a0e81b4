#include "tuner/decode_harness.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

#include "reference/attention_decode_ref.h"
#include "reference/attention_ref.h"  // ref::compare
#include "reference/dtype_convert.h"
#include "reference/parallel_for.h"

namespace kt {
namespace decode {
namespace {

constexpr uint16_t kNaN16 = 0xFFFF;  // NaN in fp16 and bf16

/// Random values drawn once and shared by every token of a cache: token rows are windows of this pool at scattered
/// offsets (distinct per token and per K/V), which fills a multi-GiB cache at memcpy speed.
constexpr size_t kPool = size_t(1) << 22;

size_t window(uint64_t token, uint64_t salt, size_t row) {
  uint64_t h = (token + 1) * 0x9E3779B97F4A7C15ull ^ salt * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  return static_cast<size_t>(h % (kPool - row));
}

/// The cache slot of sequence b's token t (contiguous: b's row of capacity slots; paged: through the block table).
size_t cache_slot(const HostInputs& in, int b, int t) {
  const Problem& p = in.problem;
  return p.kv_layout == KvLayout::paged
             ? size_t(in.table[size_t(b) * in.max_pages + t / p.page_size]) * p.page_size + t % p.page_size
             : size_t(b) * in.capacity + t;
}

}  // namespace

HostInputs make_inputs(const Problem& p, uint64_t seed, std::vector<int> lens, int capacity) {
  check_problem(p);
  HostInputs in;
  in.problem = p;
  if (lens.empty()) lens.assign(size_t(p.batch), p.kv_len);
  if (lens.size() != size_t(p.batch))
    throw std::invalid_argument("decode make_inputs: lens has " + std::to_string(lens.size()) + " entries, batch is " +
                                std::to_string(p.batch));
  const int longest = std::max(p.kv_len, *std::max_element(lens.begin(), lens.end()));
  const bool paged = p.kv_layout == KvLayout::paged;
  if (capacity == 0) capacity = paged ? (longest + p.page_size - 1) / p.page_size * p.page_size : longest;
  if (paged && capacity % p.page_size != 0)
    throw std::invalid_argument("decode make_inputs: capacity must be a whole number of pages");
  for (int l : lens)
    if (l < 0 || l > capacity)
      throw std::invalid_argument("decode make_inputs: a length " + std::to_string(l) + " is outside [0, " +
                                  std::to_string(capacity) + "]");
  in.lens = lens;
  in.capacity = capacity;
  const int D = p.head_dim;
  const size_t row = size_t(p.num_kv_heads) * D;
  std::mt19937_64 rng(seed);
  in.q.resize(size_t(p.batch) * p.q_len * p.num_heads * D);
  fill_random(p.dtype, in.q.data(), in.q.size(), seed * 3 + 1);
  size_t slots = size_t(p.batch) * capacity;
  std::vector<int> spare;  // paged: the pages the table does not name
  if (paged) {
    in.max_pages = capacity / p.page_size;
    in.num_pages = p.batch * in.max_pages + 3;
    std::vector<int> perm(size_t(in.num_pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    in.table.assign(perm.begin(), perm.begin() + size_t(p.batch) * in.max_pages);
    spare.assign(perm.begin() + size_t(p.batch) * in.max_pages, perm.end());
    slots = size_t(in.num_pages) * p.page_size;
  }
  std::vector<uint16_t> pool(kPool);
  fill_random(p.dtype, pool.data(), pool.size(), seed * 3 + 2);
  in.k.resize(slots * row);  // unwritten until the pass below, which writes every slot once
  in.v.resize(slots * row);
  // Blocks of kFillTokens token positions [0, capacity) of one sequence spread over the machine's cores: a position
  // below the sequence's length gets its token, one past it NaN; each block writes only its own slots. Every slot of
  // the contiguous cache, and of the pages the table names, is one such position; the spare pages get NaN after.
  constexpr int kFillTokens = 1024;
  const size_t per_seq = size_t(capacity + kFillTokens - 1) / kFillTokens;
  parallel_for(size_t(p.batch) * per_seq + spare.size(), [&](size_t j) {
    if (j >= size_t(p.batch) * per_seq) {
      const size_t first = size_t(spare[j - size_t(p.batch) * per_seq]) * p.page_size * row;
      std::fill_n(&in.k[first], size_t(p.page_size) * row, kNaN16);
      std::fill_n(&in.v[first], size_t(p.page_size) * row, kNaN16);
      return;
    }
    const int b = int(j / per_seq), t0 = int(j % per_seq) * kFillTokens;
    for (int t = t0; t < std::min(capacity, t0 + kFillTokens); ++t) {
      const size_t slot = cache_slot(in, b, t);
      if (t < lens[b]) {
        const uint64_t token = uint64_t(b) * capacity + t;
        std::memcpy(&in.k[slot * row], &pool[window(token, seed * 2 + 1, row)], row * 2);
        std::memcpy(&in.v[slot * row], &pool[window(token, seed * 2 + 2, row)], row * 2);
      } else {
        std::fill_n(&in.k[slot * row], row, kNaN16);
        std::fill_n(&in.v[slot * row], row, kNaN16);
      }
    }
  });
  return in;
}

RefRows reference_rows(const HostInputs& in, double scale, size_t max_rows, uint64_t seed, int threads) {
  const Problem& p = in.problem;
  const int D = p.head_dim;
  const size_t kv_row = size_t(p.num_kv_heads) * D;
  std::mt19937_64 rng(seed);
  // The sequences checked: the first, the last and two more (all of a batch of at most 4).
  std::set<int> seqs{0, p.batch - 1};
  for (int n = 0; n < 8 && seqs.size() < 4 && int(seqs.size()) < p.batch; ++n) seqs.insert(int(rng() % p.batch));
  std::vector<int> seq(seqs.begin(), seqs.end());
  RefRows r;
  for (int b : seq)
    for (int i = 0; i < p.q_len; ++i)
      for (int h = 0; h < p.num_heads; ++h) r.rows.push_back({b, i, h});
  if (r.rows.size() > max_rows) {
    std::shuffle(r.rows.begin(), r.rows.end(), rng);
    r.rows.resize(std::max<size_t>(1, max_rows));
    std::sort(r.rows.begin(), r.rows.end());
  }
  // A contiguous float cache of the checked sequences only, gathered through the block table when paged.
  const int nb = int(seq.size());
  int cap = 1;
  for (int b : seq) cap = std::max(cap, in.lens[b]);
  std::vector<float> qf(size_t(nb) * p.q_len * p.num_heads * D);
  HostBuffer<float> kf(size_t(nb) * cap * kv_row), vf(size_t(nb) * cap * kv_row);  // written by the gather below
  std::vector<int> lens(static_cast<size_t>(nb), 0);
  std::map<int, int> index;
  for (int n = 0; n < nb; ++n) {
    const int b = seq[n];
    index[b] = n;
    lens[n] = in.lens[b];
    const size_t qn = size_t(p.q_len) * p.num_heads * D;
    for (size_t e = 0; e < qn; ++e) qf[n * qn + e] = dtype_to_float(p.dtype, in.q[b * qn + e]);
  }
  // The gather in blocks of kGatherTokens positions of one checked sequence, on every core (zeros past its length).
  constexpr int kGatherTokens = 1024;
  const size_t per_seq = size_t(cap + kGatherTokens - 1) / kGatherTokens;
  parallel_for(size_t(nb) * per_seq, [&](size_t j) {
    const int n = int(j / per_seq), b = seq[size_t(n)], t0 = int(j % per_seq) * kGatherTokens;
    for (int t = t0; t < std::min(cap, t0 + kGatherTokens); ++t) {
      float* kd = &kf[(size_t(n) * cap + t) * kv_row];
      float* vd = &vf[(size_t(n) * cap + t) * kv_row];
      if (t >= in.lens[b]) {
        std::fill_n(kd, kv_row, 0.f);
        std::fill_n(vd, kv_row, 0.f);
        continue;
      }
      const size_t slot = cache_slot(in, b, t);
      for (size_t e = 0; e < kv_row; ++e) {
        kd[e] = dtype_to_float(p.dtype, in.k[slot * kv_row + e]);
        vd[e] = dtype_to_float(p.dtype, in.v[slot * kv_row + e]);
      }
    }
  });
  const ref::DecodeShape shape{nb, p.q_len, p.num_heads, p.num_kv_heads, D, p.causal, scale};
  const ref::KvCacheView view{kf.data(), vf.data(), false, cap, 0, 0, 0, nullptr};
  r.out.assign(r.rows.size() * D, 0.0);
  r.lse.assign(r.rows.size(), 0.0);
  parallel_for(
      r.rows.size(),
      [&](size_t n) {
        const auto& row = r.rows[n];
        r.lse[n] = ref::attention_decode_row(shape, qf.data(), view, lens.data(), index.at(row[0]), row[1], row[2],
                                             r.out.data() + n * D);
      },
      threads);
  return r;
}

double tolerance(DType dtype) { return dtype == DType::f16 ? 2e-3 : 1e-2; }

Verdict verify(const HostInputs& in, const RefRows& ref, const std::vector<uint16_t>& out,
               const std::vector<float>& lse) {
  const Problem& p = in.problem;
  const int D = p.head_dim;
  Verdict v;
  v.unwritten = (long long)count_nonfinite(p.dtype, out.data(), out.size());
  for (float x : lse)
    if (std::isnan(x)) ++v.unwritten;
  std::vector<float> got(ref.rows.size() * D);
  for (size_t n = 0; n < ref.rows.size(); ++n) {
    const auto& row = ref.rows[n];
    const size_t base = ((size_t(row[0]) * p.q_len + row[1]) * p.num_heads + row[2]) * D;
    for (int d = 0; d < D; ++d) got[n * D + d] = dtype_to_float(p.dtype, out[base + d]);
    if (!lse.empty()) {
      const float l = lse[(size_t(row[0]) * p.num_heads + row[2]) * p.q_len + row[1]];
      const double want = ref.lse[n];
      double err = std::isinf(want) ? ((std::isinf(l) && l < 0) ? 0.0 : INFINITY) : std::fabs(double(l) - want);
      if (std::isnan(err)) err = INFINITY;
      v.lse_max_err = std::max(v.lse_max_err, err);
    }
  }
  const auto c = ref::compare(got.data(), ref.out.data(), got.size());
  // A reference of all zeros (every checked row sees no key) has no relative error: compare absolutely.
  double ref_norm = 0;
  for (double x : ref.out) ref_norm += x * x;
  v.rel_l2 = ref_norm > 0 ? c.rel_l2 : c.max_abs;
  std::ostringstream msg;
  if (v.unwritten) msg << v.unwritten << " output elements are NaN/inf (unwritten or computed); ";
  if (c.nan_count) msg << c.nan_count << " checked elements non-finite; ";
  if (!(v.rel_l2 <= tolerance(p.dtype))) msg << "rel_l2 " << v.rel_l2 << " > " << tolerance(p.dtype) << "; ";
  if (!(v.lse_max_err <= 1e-3)) msg << "lse error " << v.lse_max_err << " > 1e-3; ";
  v.message = msg.str();
  v.pass = v.message.empty();
  return v;
}

DeviceProblem::DeviceProblem(const HostInputs& in, int copies, bool with_lse)
    : p_(in.problem),
      capacity_(in.capacity),
      max_pages_(in.max_pages),
      num_pages_(in.num_pages),
      q_elems_(in.q.size()),
      lse_elems_(in.q.size() / size_t(in.problem.head_dim)) {
  for (int c = 0; c < std::max(1, copies); ++c) {
    q_.emplace_back(in.q.size() * 2);
    k_.emplace_back(in.k.size() * 2);
    v_.emplace_back(in.v.size() * 2);
    o_.emplace_back(in.q.size() * 2);
    lens_.emplace_back(in.lens.size() * 4);
    q_.back().upload(in.q.data(), in.q.size() * 2);
    k_.back().upload(in.k.data(), in.k.size() * 2);
    v_.back().upload(in.v.data(), in.v.size() * 2);
    lens_.back().upload(in.lens.data(), in.lens.size() * 4);
    if (!in.table.empty()) {
      table_.emplace_back(in.table.size() * 4);
      table_.back().upload(in.table.data(), in.table.size() * 4);
    }
    if (with_lse) lse_.emplace_back(lse_elems_ * 4);
  }
  poison();
}

DecodeParams DeviceProblem::params(int copy, float scale) const {
  auto ptr = [](const cuda::DeviceBuffer& b) { return reinterpret_cast<void*>(static_cast<uintptr_t>(b.ptr())); };
  float* lse = lse_.empty() ? nullptr : static_cast<float*>(ptr(lse_[copy]));
  const int* lens = static_cast<const int*>(ptr(lens_[copy]));
  if (p_.kv_layout == KvLayout::paged)
    return paged_params(p_, ptr(q_[copy]), ptr(k_[copy]), ptr(v_[copy]), ptr(o_[copy]), lse, lens,
                        static_cast<const int*>(ptr(table_[copy])), num_pages_, max_pages_, scale);
  return contiguous_params(p_, ptr(q_[copy]), ptr(k_[copy]), ptr(v_[copy]), ptr(o_[copy]), lse, lens, capacity_, scale);
}

void DeviceProblem::poison() {
  for (auto& o : o_) o.fill_u16(0xFFFF);
  for (auto& l : lse_) l.fill_u32(0xFFFFFFFFu);
}

void DeviceProblem::download(int copy, std::vector<uint16_t>& out, std::vector<float>& lse) const {
  out.resize(q_elems_);
  o_[copy].download(out.data(), out.size() * 2);
  lse.clear();
  if (!lse_.empty()) {
    lse.resize(lse_elems_);
    lse_[copy].download(lse.data(), lse.size() * 4);
  }
}

size_t set_bytes(const HostInputs& in) {
  return (2 * in.q.size() + in.k.size() + in.v.size()) * 2 + in.q.size() / size_t(in.problem.head_dim) * 4 +
         (in.lens.size() + in.table.size()) * 4;
}

int cold_l2_copies(size_t set_bytes, size_t l2_bytes) {
  if (set_bytes == 0) return 1;
  return int(3 * l2_bytes / set_bytes + 1);  // copies * set_bytes > 3 * l2_bytes
}

}  // namespace decode
}  // namespace kt
