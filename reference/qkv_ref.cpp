#include "reference/qkv_ref.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace kt::ref {

int qkv_out_features(const QkvShape& s) { return (s.num_heads + 2 * s.num_kv_heads) * s.head_dim; }

void validate(const QkvShape& s) {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("QkvShape: " + what);
  };
  need(s.m >= 0, "m must be >= 0 (got " + std::to_string(s.m) + ")");
  need(s.k >= 1, "k must be >= 1 (got " + std::to_string(s.k) + ")");
  need(s.num_heads >= 1, "num_heads must be >= 1 (got " + std::to_string(s.num_heads) + ")");
  need(s.num_kv_heads >= 1, "num_kv_heads must be >= 1 (got " + std::to_string(s.num_kv_heads) + ")");
  need(s.head_dim >= 1, "head_dim must be >= 1 (got " + std::to_string(s.head_dim) + ")");
  need(s.num_heads % s.num_kv_heads == 0, "num_heads (" + std::to_string(s.num_heads) +
                                              ") must be a multiple of num_kv_heads (" +
                                              std::to_string(s.num_kv_heads) + ")");
  if (s.rope) {
    need(s.head_dim % 2 == 0, "head_dim must be even when rope is set (got " + std::to_string(s.head_dim) + ")");
    need(std::isfinite(s.rope_theta) && s.rope_theta > 0,
         "rope_theta must be finite and > 0 when rope is set (got " + std::to_string(s.rope_theta) + ")");
  }
}

void qkv_projection_rows(const QkvShape& s, const float* x, const double* w, const float* bias, const int* positions,
                         const std::vector<int>& rows, double* q, double* k, double* v) {
  validate(s);
  const auto null_arg = [](const char* name) {
    throw std::invalid_argument(std::string("qkv_projection: ") + name + " is null");
  };
  if (!rows.empty()) {
    if (!x) null_arg("x");
    if (!w) null_arg("w");
    if (!q) null_arg("q");
    if (!k) null_arg("k");
    if (!v) null_arg("v");
    if (s.has_bias && !bias) null_arg("bias (has_bias is set)");
    if (s.rope && !positions) null_arg("positions (rope is set)");
  }
  for (int r : rows)
    if (r < 0 || r >= s.m)
      throw std::invalid_argument("qkv_projection_rows: row " + std::to_string(r) +
                                  " is outside [0, m = " + std::to_string(s.m) + ")");
  const int D = s.head_dim, Hq = s.num_heads, Hkv = s.num_kv_heads, K = s.k;
  const int n = qkv_out_features(s);
  // Inverse frequencies theta^(-2i/D), i < D/2.
  std::vector<double> inv_freq(static_cast<size_t>(D / 2));
  for (int i = 0; i < D / 2; ++i) inv_freq[i] = std::pow(s.rope_theta, -2.0 * i / D);
  std::vector<double> y(static_cast<size_t>(n));
  std::vector<double> cs(static_cast<size_t>(D / 2)), sn(static_cast<size_t>(D / 2));
  for (size_t j = 0; j < rows.size(); ++j) {
    const int r = rows[j];
    const float* xr = x + static_cast<size_t>(r) * K;
    for (int c = 0; c < n; ++c) {
      const double* wc = w + static_cast<size_t>(c) * K;
      double acc = 0;
      for (int t = 0; t < K; ++t) acc += static_cast<double>(xr[t]) * wc[t];
      y[c] = acc + (s.has_bias ? static_cast<double>(bias[c]) : 0.0);
    }
    if (s.rope) {
      const double pos = positions[r];
      for (int i = 0; i < D / 2; ++i) {
        cs[i] = std::cos(pos * inv_freq[i]);
        sn[i] = std::sin(pos * inv_freq[i]);
      }
      for (int h = 0; h < Hq + Hkv; ++h) {  // Q heads, then K heads (contiguous in y); V untouched
        double* yh = y.data() + static_cast<size_t>(h) * D;
        for (int i = 0; i < D / 2; ++i) {
          const double a = yh[i], b = yh[i + D / 2];
          yh[i] = a * cs[i] - b * sn[i];
          yh[i + D / 2] = b * cs[i] + a * sn[i];
        }
      }
    }
    const size_t qn = static_cast<size_t>(Hq) * D, kn = static_cast<size_t>(Hkv) * D;
    for (size_t c = 0; c < qn; ++c) q[j * qn + c] = y[c];
    for (size_t c = 0; c < kn; ++c) k[j * kn + c] = y[qn + c];
    for (size_t c = 0; c < kn; ++c) v[j * kn + c] = y[qn + kn + c];
  }
}

void qkv_projection(const QkvShape& s, const float* x, const double* w, const float* bias, const int* positions,
                    double* q, double* k, double* v) {
  validate(s);
  std::vector<int> rows(static_cast<size_t>(s.m));
  for (int i = 0; i < s.m; ++i) rows[i] = i;
  qkv_projection_rows(s, x, w, bias, positions, rows, q, k, v);
}

void kv_cache_write(const QkvShape& s, const double* k, const double* v, const std::vector<int>& slot_mapping,
                    int num_pages, int page_size, double* k_cache, double* v_cache) {
  validate(s);
  const auto bad = [](const std::string& what) { throw std::invalid_argument("kv_cache_write: " + what); };
  if (num_pages < 1) bad("num_pages must be >= 1 (got " + std::to_string(num_pages) + ")");
  if (page_size < 1) bad("page_size must be >= 1 (got " + std::to_string(page_size) + ")");
  if (slot_mapping.size() != static_cast<size_t>(s.m))
    bad("slot_mapping has " + std::to_string(slot_mapping.size()) + " entries, m = " + std::to_string(s.m));
  const long long slots = static_cast<long long>(num_pages) * page_size;
  std::vector<char> used(static_cast<size_t>(slots), 0);
  for (size_t i = 0; i < slot_mapping.size(); ++i) {
    const int slot = slot_mapping[i];
    if (slot < -1 || slot >= slots)
      bad("slot_mapping[" + std::to_string(i) + "] = " + std::to_string(slot) + " is outside [-1, num_pages * " +
          "page_size = " + std::to_string(slots) + ")");
    if (slot >= 0 && used[static_cast<size_t>(slot)]++)
      bad("slot_mapping[" + std::to_string(i) + "] = " + std::to_string(slot) + " is mapped twice");
  }
  if (s.m > 0) {
    if (!k) bad("k is null");
    if (!v) bad("v is null");
    if (!k_cache) bad("k_cache is null");
    if (!v_cache) bad("v_cache is null");
  }
  // A slot's [Hkv, D] elements are contiguous both in the cache (slot = page * page_size + offset) and in k / v.
  const size_t head_elems = static_cast<size_t>(s.num_kv_heads) * s.head_dim;
  for (size_t i = 0; i < slot_mapping.size(); ++i) {
    if (slot_mapping[i] < 0) continue;
    const size_t at = static_cast<size_t>(slot_mapping[i]) * head_elems;
    for (size_t e = 0; e < head_elems; ++e) {
      k_cache[at + e] = k[i * head_elems + e];
      v_cache[at + e] = v[i * head_elems + e];
    }
  }
}

}  // namespace kt::ref
