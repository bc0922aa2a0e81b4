// kerntune C++ API: a header-only layer over the C ABI (kerntune.h) that needs nothing beyond the C++17 standard
// library. Link with libkerntune.so (CMake: find_package(kerntune) and target_link_libraries(app kerntune::kerntune)).
//
// Every failing call throws kerntune::Error carrying the kt_status and kt_last_error()'s message; the tensors,
// layouts, strides and units are those of the C structs (kt_attention_problem / _args, kt_qkv_problem / _args,
// kt_kv_cache_args, kt_attention_decode_problem / _args), documented in kerntune.h. Streams are CUstream handles
// passed as void* (nullptr: the legacy default stream).
//
//   kerntune::Runtime rt("qwen7b-h200.db");       // the tuning database written by autotune
//   std::cout << rt.explain_attention(problem);   // which kernel, and why
//   rt.attention_prefill(problem, args, stream);  // asynchronous launch
#ifndef KERNTUNE_KERNTUNE_HPP_
#define KERNTUNE_KERNTUNE_HPP_

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kerntune/kerntune.h"

namespace kerntune {

/// A failed kerntune call: status() is the C ABI's kt_status, what() "KT_ERROR_...: <message>".
class Error : public std::runtime_error {
 public:
  Error(kt_status status, const std::string& message)
      : std::runtime_error(std::string(kt_status_string(status)) + ": " + message), status_(status) {}
  kt_status status() const noexcept { return status_; }

 private:
  kt_status status_;
};

/// Throws Error for a status other than KT_OK, with the calling thread's kt_last_error().
inline void check(kt_status s) {
  if (s != KT_OK) throw Error(s, kt_last_error());
}

/// The library's version, "MAJOR.MINOR.PATCH".
inline std::string version() { return kt_version(); }

/// The dispatcher: a tuning database, the detected GPU and the kernels loaded so far (kt_runtime). Movable, not
/// copyable; may be shared by threads as kt_runtime is (kerntune.h, "Threading").
class Runtime {
 public:
  /// Opens the tuning database at db_path (read only) on the current CUDA device. Throws Error: KT_ERROR_DATABASE
  /// (missing or bad file), KT_ERROR_CUDA (no driver or GPU), KT_ERROR_UNSUPPORTED (a GPU older than sm_80).
  explicit Runtime(const std::string& db_path) { check(kt_runtime_create(db_path.c_str(), &rt_)); }
  ~Runtime() { kt_runtime_destroy(rt_); }
  Runtime(Runtime&& o) noexcept : rt_(std::exchange(o.rt_, nullptr)) {}
  Runtime& operator=(Runtime&& o) noexcept {
    if (this != &o) {
      kt_runtime_destroy(rt_);
      rt_ = std::exchange(o.rt_, nullptr);
    }
    return *this;
  }
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// The C handle, for calls this layer does not wrap.
  kt_runtime* handle() const noexcept { return rt_; }

  /// Flash-attention forward (kt_attention_prefill): asynchronous on `stream`.
  void attention_prefill(const kt_attention_problem& p, const kt_attention_args& a, void* stream = nullptr) {
    check(kt_attention_prefill(rt_, &p, &a, stream));
  }
  /// Fused Q/K/V projection (kt_qkv_proj), and with the paged KV-cache write (kt_qkv_proj_kv_cache).
  void qkv_proj(const kt_qkv_problem& p, const kt_qkv_args& a, void* stream = nullptr) {
    check(kt_qkv_proj(rt_, &p, &a, stream));
  }
  void qkv_proj_kv_cache(const kt_qkv_problem& p, const kt_qkv_args& a, const kt_kv_cache_args& kv,
                         void* stream = nullptr) {
    check(kt_qkv_proj_kv_cache(rt_, &p, &a, &kv, stream));
  }
  /// Decode attention over a contiguous or paged KV cache (kt_attention_decode).
  void attention_decode(const kt_attention_decode_problem& p, const kt_attention_decode_args& a,
                        void* stream = nullptr) {
    check(kt_attention_decode(rt_, &p, &a, stream));
  }

  /// "<step>: <variant>: <why>" for the kernel a call would use (no GPU work).
  std::string explain_attention(const kt_attention_problem& p) const {
    return explain_with([&](char* b, size_t n) { return kt_attention_explain(rt_, &p, b, n); });
  }
  std::string explain_qkv(const kt_qkv_problem& p) const {
    return explain_with([&](char* b, size_t n) { return kt_qkv_explain(rt_, &p, b, n); });
  }
  /// Any registered family by name ("attention_prefill", "qkv_proj", "attention_decode"), the problem as JSON.
  std::string explain(const std::string& family, const std::string& problem_json) const {
    return explain_with([&](char* b, size_t n) { return kt_explain(rt_, family.c_str(), problem_json.c_str(), b, n); });
  }

 private:
  template <class F>
  static std::string explain_with(F call) {
    std::vector<char> buf(4096, '\0');  // the C ABI truncates a longer line; 512 bytes hold step and variant
    check(call(buf.data(), buf.size()));
    return std::string(buf.data());
  }

  kt_runtime* rt_ = nullptr;
};

/// A weight matrix quantized to one of the kt_weight_format layouts (kt_quantize; kerntune.h and
/// templates/qkv_proj/quant_format.h give each layout).
struct QuantizedWeight {
  std::vector<std::uint8_t> data, scales, zeros;
  float tensor_scale = 1.f;  ///< nvfp4's per-tensor fp32 scale; 1 for the other formats
};

namespace detail {
/// A buffer as the C ABI takes it: NULL when empty.
template <class T>
T* ptr(std::vector<T>& v) {
  return v.empty() ? nullptr : v.data();
}
template <class T>
const T* ptr(const std::vector<T>& v) {
  return v.empty() ? nullptr : v.data();
}
}  // namespace detail

/// Quantizes w [n, k] row-major (float32) to weight_format (a kt_weight_format, e.g. KT_WEIGHT_NF4_KB128) with round-to-nearest (kt_quantize). Host only: no
/// runtime, no GPU. Throws Error (KT_ERROR_INVALID_ARGUMENT for an unknown format, sizes or w.size() != n * k).
inline QuantizedWeight quantize(std::int32_t weight_format, const std::vector<float>& w, std::int32_t n,
                                std::int32_t k) {
  size_t data_bytes = 0, scales_bytes = 0, zeros_bytes = 0;
  check(kt_quantize_sizes(weight_format, n, k, &data_bytes, &scales_bytes, &zeros_bytes));
  QuantizedWeight q;
  q.data.resize(data_bytes);
  q.scales.resize(scales_bytes);
  q.zeros.resize(zeros_bytes);
  check(kt_quantize(weight_format, detail::ptr(w), w.size() * sizeof(float), n, k, detail::ptr(q.data), q.data.size(),
                    detail::ptr(q.scales), q.scales.size(), detail::ptr(q.zeros), q.zeros.size(), &q.tensor_scale));
  return q;
}

/// The float64 values [n, k] that a quantized weight stands for (kt_dequantize). Throws Error.
inline std::vector<double> dequantize(std::int32_t weight_format, const QuantizedWeight& q, std::int32_t n,
                                      std::int32_t k) {
  std::vector<double> out(size_t(n) * size_t(k));
  check(kt_dequantize(weight_format, n, k, detail::ptr(q.data), q.data.size(), detail::ptr(q.scales), q.scales.size(),
                      detail::ptr(q.zeros), q.zeros.size(), q.tensor_scale, detail::ptr(out),
                      out.size() * sizeof(double)));
  return out;
}

}  // namespace kerntune

#endif  // KERNTUNE_KERNTUNE_HPP_
