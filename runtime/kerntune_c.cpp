// The C ABI (include/kerntune/kerntune.h) over kt::Runtime and kt::quant. No exception leaves these functions.
#include "kerntune/kerntune.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "cache/tuning_db.h"
#include "cuda/driver.h"
#include "generator/registry.h"
#include "quant/quant.h"
#include "runtime/decode.h"
#include "runtime/runtime.h"
#include "runtime/version.h"

struct kt_runtime {
  kt::Runtime rt;
  explicit kt_runtime(const std::string& path) : rt(path) {}
};

namespace {

thread_local std::string g_last_error;

kt_status fail(kt_status s, const std::string& msg) {
  try {
    g_last_error = msg;
  } catch (...) {
  }
  return s;
}

/// Maps the exception in flight to a status and records its message. Callers validate the problem
/// (to_problem) first, so a ProblemError here is about the arguments (strides, alignment).
kt_status from_exception(const char* fn) {
  const std::string where = std::string(fn) + ": ";
  try {
    throw;
  } catch (const kt::db::DbError& e) {
    return fail(KT_ERROR_DATABASE, where + e.what());
  } catch (const kt::cuda::CudaError& e) {
    return fail(KT_ERROR_CUDA, where + e.what());
  } catch (const kt::UnsupportedDevice& e) {
    return fail(KT_ERROR_UNSUPPORTED, where + e.what());
  } catch (const std::invalid_argument& e) {  // includes kt::ProblemError (argument checks)
    return fail(KT_ERROR_INVALID_ARGUMENT, where + e.what());
  } catch (const std::bad_alloc&) {
    return fail(KT_ERROR_INTERNAL, where + "out of memory");
  } catch (const std::exception& e) {
    return fail(KT_ERROR_INTERNAL, where + e.what());
  } catch (...) {
    return fail(KT_ERROR_INTERNAL, where + "unknown exception");
  }
}

/// The last step of every to_problem: `check(p)` (the family's check_problem) throws ProblemError for a problem no
/// variant supports -> UNSUPPORTED naming the rule; anything else is mapped by from_exception. On success *out = p.
template <class Problem, class Check>
kt_status checked_problem(const Problem& p, Check check, const std::string& where, const char* fn, Problem* out) {
  try {
    check(p);
  } catch (const kt::ProblemError& e) {
    return fail(KT_ERROR_UNSUPPORTED, where + e.what());
  } catch (...) {
    return from_exception(fn);
  }
  *out = p;
  return KT_OK;
}

/// Converts and validates a problem: malformed (null, unknown dtype, size < 1) -> INVALID_ARGUMENT;
/// well-formed but not supported by any kernel (check_problem) -> UNSUPPORTED.
kt_status to_problem(const kt_attention_problem* in, kt::attn::Problem* out, const char* fn) {
  const std::string where = std::string(fn) + ": ";
  if (!in) return fail(KT_ERROR_INVALID_ARGUMENT, where + "problem is NULL");
  if (in->dtype != KT_DTYPE_FP16 && in->dtype != KT_DTYPE_BF16)
    return fail(KT_ERROR_INVALID_ARGUMENT,
                where + "unknown dtype " + std::to_string(in->dtype) + " (KT_DTYPE_FP16 = 0, KT_DTYPE_BF16 = 1)");
  const struct {
    const char* name;
    int32_t v;
  } sizes[] = {{"batch", in->batch},         {"seqlen_q", in->seqlen_q},         {"seqlen_k", in->seqlen_k},
               {"num_heads", in->num_heads}, {"num_kv_heads", in->num_kv_heads}, {"head_dim", in->head_dim}};
  for (const auto& s : sizes)
    if (s.v < 1) return fail(KT_ERROR_INVALID_ARGUMENT, where + s.name + " must be >= 1, got " + std::to_string(s.v));
  kt::attn::Problem p;
  p.dtype = in->dtype == KT_DTYPE_FP16 ? kt::DType::f16 : kt::DType::bf16;
  p.batch = in->batch;
  p.seqlen_q = in->seqlen_q;
  p.seqlen_k = in->seqlen_k;
  p.num_heads = in->num_heads;
  p.num_kv_heads = in->num_kv_heads;
  p.head_dim = in->head_dim;
  p.causal = in->causal != 0;
  return checked_problem(
      p, [](const auto& q) { kt::attn::check_problem(q); }, where, fn, out);
}

/// As to_problem, for the Q/K/V projection: malformed -> INVALID_ARGUMENT; unsupported (check_problem) ->
/// UNSUPPORTED.
kt_status to_qkv_problem(const kt_qkv_problem* in, kt::qkv::Problem* out, const char* fn) {
  const std::string where = std::string(fn) + ": ";
  if (!in) return fail(KT_ERROR_INVALID_ARGUMENT, where + "problem is NULL");
  if (in->dtype != KT_DTYPE_FP16 && in->dtype != KT_DTYPE_BF16)
    return fail(KT_ERROR_INVALID_ARGUMENT,
                where + "unknown dtype " + std::to_string(in->dtype) + " (KT_DTYPE_FP16 = 0, KT_DTYPE_BF16 = 1)");
  if (in->weight_format < KT_WEIGHT_FP16 || in->weight_format > KT_WEIGHT_NVFP4_KB128)
    return fail(KT_ERROR_INVALID_ARGUMENT, where + "unknown weight_format " + std::to_string(in->weight_format) +
                                               " (KT_WEIGHT_FP16 = 0 ... KT_WEIGHT_NVFP4_KB128 = 13)");
  const struct {
    const char* name;
    int32_t v;
  } sizes[] = {{"m", in->m},
               {"k", in->k},
               {"num_heads", in->num_heads},
               {"num_kv_heads", in->num_kv_heads},
               {"head_dim", in->head_dim}};
  for (const auto& s : sizes)
    if (s.v < 1) return fail(KT_ERROR_INVALID_ARGUMENT, where + s.name + " must be >= 1, got " + std::to_string(s.v));
  kt::qkv::Problem p;
  p.dtype = in->dtype == KT_DTYPE_FP16 ? kt::DType::f16 : kt::DType::bf16;
  p.format = static_cast<kt::quant::Format>(in->weight_format);
  p.m = in->m;
  p.k = in->k;
  p.num_heads = in->num_heads;
  p.num_kv_heads = in->num_kv_heads;
  p.head_dim = in->head_dim;
  p.has_bias = in->has_bias != 0;
  p.rope = in->rope != 0;
  return checked_problem(
      p, [](const auto& q) { kt::qkv::check_problem(q); }, where, fn, out);
}

/// As to_problem, for attention_decode: malformed (null, unknown dtype, size < 1) -> INVALID_ARGUMENT; unsupported
/// (check_problem: q_len above 16, page size, head_dim, head counts) -> UNSUPPORTED.
kt_status to_decode_problem(const kt_attention_decode_problem* in, kt::decode::Problem* out, const char* fn) {
  const std::string where = std::string(fn) + ": ";
  if (!in) return fail(KT_ERROR_INVALID_ARGUMENT, where + "problem is NULL");
  if (in->dtype != KT_DTYPE_FP16 && in->dtype != KT_DTYPE_BF16)
    return fail(KT_ERROR_INVALID_ARGUMENT,
                where + "unknown dtype " + std::to_string(in->dtype) + " (KT_DTYPE_FP16 = 0, KT_DTYPE_BF16 = 1)");
  const struct {
    const char* name;
    int32_t v;
  } sizes[] = {{"batch", in->batch},         {"q_len", in->q_len},
               {"num_heads", in->num_heads}, {"num_kv_heads", in->num_kv_heads},
               {"head_dim", in->head_dim},   {"kv_len", in->kv_len}};
  for (const auto& s : sizes)
    if (s.v < 1) return fail(KT_ERROR_INVALID_ARGUMENT, where + s.name + " must be >= 1, got " + std::to_string(s.v));
  kt::decode::Problem p;
  p.dtype = in->dtype == KT_DTYPE_FP16 ? kt::DType::f16 : kt::DType::bf16;
  p.batch = in->batch;
  p.q_len = in->q_len;
  p.num_heads = in->num_heads;
  p.num_kv_heads = in->num_kv_heads;
  p.head_dim = in->head_dim;
  p.kv_len = in->kv_len;
  p.kv_layout = in->paged ? kt::decode::KvLayout::paged : kt::decode::KvLayout::contiguous;
  p.page_size = in->page_size;
  p.causal = in->causal != 0;
  return checked_problem(
      p, [](const auto& q) { kt::decode::check_problem(q); }, where, fn, out);
}

/// The kernel arguments of a decode call (pointers and strides as given; the runtime binds the split buffers).
/// Throws ProblemError naming the argument (decode::check_call).
kt::decode::DecodeParams to_decode_params(const kt::decode::Problem& p, const kt_attention_decode_args& a) {
  const bool paged = p.kv_layout == kt::decode::KvLayout::paged;
  if (std::isnan(a.softmax_scale))  // NaN is neither a scale nor "<= 0 = the default"
    throw kt::ProblemError("attention_decode: softmax_scale is NaN (give a positive scale, or <= 0 for 1/sqrt(D))");
  kt::decode::DecodeParams d =
      paged ? kt::decode::paged_params(p, a.q, a.k, a.v, a.o, a.lse, a.seqlens_k, a.block_table, a.num_pages,
                                       a.max_pages_per_seq, a.softmax_scale)
            : kt::decode::contiguous_params(p, a.q, a.k, a.v, a.o, a.lse, a.seqlens_k, a.s_max, a.softmax_scale);
  d.q_batch_stride = a.q_stride_batch;
  d.q_row_stride = a.q_stride_row;
  d.q_head_stride = a.q_stride_head;
  (paged ? d.k_page_stride : d.k_batch_stride) = a.k_stride_batch;
  d.k_row_stride = a.k_stride_row;
  d.k_head_stride = a.k_stride_head;
  (paged ? d.v_page_stride : d.v_batch_stride) = a.v_stride_batch;
  d.v_row_stride = a.v_stride_row;
  d.v_head_stride = a.v_stride_head;
  d.o_batch_stride = a.o_stride_batch;
  d.o_row_stride = a.o_stride_row;
  d.o_head_stride = a.o_stride_head;
  if (paged) {
    if (a.max_pages_per_seq < 1)
      throw kt::ProblemError("attention_decode: max_pages_per_seq must be >= 1 for a paged cache, got " +
                             std::to_string(a.max_pages_per_seq));
    if (a.block_table_stride < a.max_pages_per_seq)
      throw kt::ProblemError("attention_decode: block_table_stride " + std::to_string(a.block_table_stride) +
                             " is smaller than max_pages_per_seq " + std::to_string(a.max_pages_per_seq));
    d.block_table_stride = a.block_table_stride;
  } else if (a.s_max < 1) {
    throw kt::ProblemError("attention_decode: s_max must be >= 1 for a contiguous cache, got " +
                           std::to_string(a.s_max));
  }
  kt::decode::check_call(p, d);
  return d;
}

// The C enums mirror the C++ ones.
static_assert(KT_WEIGHT_FP16 == int(kt::quant::Format::fp16) && KT_WEIGHT_BF16 == int(kt::quant::Format::bf16) &&
                  KT_WEIGHT_INT8 == int(kt::quant::Format::int8) && KT_WEIGHT_INT4 == int(kt::quant::Format::int4) &&
                  KT_WEIGHT_NF4 == int(kt::quant::Format::nf4) && KT_WEIGHT_MXFP4 == int(kt::quant::Format::mxfp4) &&
                  KT_WEIGHT_NVFP4 == int(kt::quant::Format::nvfp4) &&
                  KT_WEIGHT_FP16_KB64 == int(kt::quant::Format::fp16_kb64) &&
                  KT_WEIGHT_BF16_KB64 == int(kt::quant::Format::bf16_kb64) &&
                  KT_WEIGHT_INT8_KB64 == int(kt::quant::Format::int8_kb64) &&
                  KT_WEIGHT_INT4_KB128 == int(kt::quant::Format::int4_kb128) &&
                  KT_WEIGHT_NF4_KB128 == int(kt::quant::Format::nf4_kb128) &&
                  KT_WEIGHT_MXFP4_KB128 == int(kt::quant::Format::mxfp4_kb128) &&
                  KT_WEIGHT_NVFP4_KB128 == int(kt::quant::Format::nvfp4_kb128) && kt::quant::kFormatCount == 14,
              "kt_weight_format must equal kt::quant::Format");
static_assert(sizeof(int32_t) == sizeof(int), "positions are passed to the kernel as int");
// The layouts python/kerntune/_lib.py mirrors with ctypes (no padding on LP64).
static_assert(sizeof(kt_attention_decode_problem) == 40, "kt_attention_decode_problem: ten int32 fields");
static_assert(sizeof(kt_attention_decode_args) == 176, "kt_attention_decode_args: 7 pointers, 13 int64, 4 x 4 bytes");

/// Writes "<step>: <variant>: <why>" into buf (truncated, NUL-terminated; buf_len >= 1).
void write_line(const std::string& line, char* buf, size_t buf_len) {
  const size_t n = line.size() < buf_len - 1 ? line.size() : buf_len - 1;
  std::memcpy(buf, line.data(), n);
  buf[n] = '\0';
}

/// Byte sizes of a packed weight's buffers, after checking (format, n, k) as kt::quant does (unknown format,
/// n or k < 1, k not a multiple of 64 or of the group -> INVALID_ARGUMENT naming the rule).
struct QuantSizes {
  kt::quant::Format format;
  int32_t n, k;
  size_t data, scales, zeros;
};
kt_status quant_sizes(int32_t weight_format, int32_t n, int32_t k, QuantSizes* out, const char* fn) {
  const std::string where = std::string(fn) + ": ";
  if (weight_format < KT_WEIGHT_FP16 || weight_format > KT_WEIGHT_NVFP4_KB128)
    return fail(KT_ERROR_INVALID_ARGUMENT, where + "unknown weight_format " + std::to_string(weight_format) +
                                               " (KT_WEIGHT_FP16 = 0 ... KT_WEIGHT_NVFP4_KB128 = 13)");
  const auto f = static_cast<kt::quant::Format>(weight_format);
  const std::string pre =
      where + kt::quant::format_name(f) + " n=" + std::to_string(n) + " k=" + std::to_string(k) + ": ";
  if (n < 1) return fail(KT_ERROR_INVALID_ARGUMENT, pre + "n must be >= 1 (got " + std::to_string(n) + ")");
  if (k < 1) return fail(KT_ERROR_INVALID_ARGUMENT, pre + "k must be >= 1 (got " + std::to_string(k) + ")");
  if (k % 64 != 0)
    return fail(KT_ERROR_INVALID_ARGUMENT,
                pre + "k must be a multiple of 64, the kernels' k step (got " + std::to_string(k) + ")");
  const int g = kt::quant::format_group(f);
  if (g > 0 && k % g != 0)
    return fail(KT_ERROR_INVALID_ARGUMENT, pre + "k must be a multiple of the " + kt::quant::format_name(f) +
                                               " group size " + std::to_string(g) + " (got " + std::to_string(k) + ")");
  const size_t rows = static_cast<size_t>(n);
  const size_t groups_per_row = g > 0 ? static_cast<size_t>(k / g) : g < 0 ? 1 : 0;
  out->format = f;
  out->n = n;
  out->k = k;
  out->data = rows * static_cast<size_t>(k) * kt::quant::format_bits(f) / 8;
  out->scales = rows * groups_per_row * kt::quant::scale_bytes(f);
  if (const std::string e = kt::quant::k_block_error(f, k); !e.empty()) return fail(KT_ERROR_INVALID_ARGUMENT, pre + e);
  out->zeros = kt::quant::format_element(f) == kt::quant::Format::int4 ? rows * static_cast<size_t>(k / 128) : 0;
  return KT_OK;
}

/// One byte buffer of a packed weight given to kt_quantize / kt_dequantize: `bytes` must equal `want` (the
/// kt_quantize_sizes value), and `ptr` may be NULL only when want is 0. The message names the argument, the format,
/// the shape and the expected size.
kt_status check_buffer(const char* fn, const QuantSizes& sz, const char* name, const void* ptr, size_t bytes,
                       size_t want, const char* what) {
  const std::string pre = std::string(fn) + ": " + name;
  const std::string shape =
      std::string(kt::quant::format_name(sz.format)) + " n=" + std::to_string(sz.n) + " k=" + std::to_string(sz.k);
  if (want == 0) {
    if (bytes != 0)
      return fail(KT_ERROR_INVALID_ARGUMENT, pre + "_bytes is " + std::to_string(bytes) + " but " + shape + " has no " +
                                                 what + " (pass 0 and NULL)");
    return KT_OK;
  }
  if (!ptr)
    return fail(KT_ERROR_INVALID_ARGUMENT,
                pre + " is NULL but " + shape + " has " + std::to_string(want) + " bytes of " + what);
  if (bytes != want)
    return fail(KT_ERROR_INVALID_ARGUMENT, pre + "_bytes is " + std::to_string(bytes) + " but " + shape +
                                               " needs exactly " + std::to_string(want) + " bytes of " + what +
                                               " (kt_quantize_sizes)");
  return KT_OK;
}

/// The byte length of w (kt_quantize) or out (kt_dequantize): exactly n * k elements of elem_size bytes. Compared by
/// division, so no product can overflow size_t.
kt_status check_elem_bytes(const char* fn, const QuantSizes& sz, const char* name, size_t bytes, size_t elem_size,
                           const char* what) {
  const size_t elems = static_cast<size_t>(sz.n) * static_cast<size_t>(sz.k);
  if (bytes % elem_size == 0 && bytes / elem_size == elems) return KT_OK;
  const std::string want =
      elems <= SIZE_MAX / elem_size ? std::to_string(elems * elem_size) : std::string("more than SIZE_MAX");
  return fail(KT_ERROR_INVALID_ARGUMENT, std::string(fn) + ": " + name + "_bytes is " + std::to_string(bytes) +
                                             " but " + kt::quant::format_name(sz.format) +
                                             " n=" + std::to_string(sz.n) + " k=" + std::to_string(sz.k) +
                                             " needs exactly " + want + " bytes of " + what);
}

}  // namespace

extern "C" {

kt_status kt_runtime_create(const char* db_path, kt_runtime** out) {
  if (!out) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_runtime_create: out is NULL");
  *out = nullptr;
  try {
    *out = new kt_runtime(db_path ? std::string(db_path) : std::string());
    return KT_OK;
  } catch (const kt::db::DbError&) {
    return from_exception("kt_runtime_create");
  } catch (const kt::cuda::CudaError&) {
    return from_exception("kt_runtime_create");
  } catch (const kt::UnsupportedDevice&) {
    return from_exception("kt_runtime_create");
  } catch (const std::exception& e) {
    // A driver that cannot be loaded is reported by cuda::api() as std::runtime_error.
    std::string why;
    if (!kt::cuda::gpu_available(&why))
      return fail(KT_ERROR_CUDA, std::string("kt_runtime_create: no usable GPU: ") + e.what());
    return from_exception("kt_runtime_create");
  } catch (...) {
    return from_exception("kt_runtime_create");
  }
}

void kt_runtime_destroy(kt_runtime* rt) {
  try {
    delete rt;
  } catch (...) {
  }
}

kt_status kt_attention_prefill(kt_runtime* rt, const kt_attention_problem* p, const kt_attention_args* a,
                               void* cu_stream) {
  const char* fn = "kt_attention_prefill";
  if (!rt) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_attention_prefill: rt is NULL");
  if (!a) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_attention_prefill: args is NULL");
  kt::attn::Problem prob;
  if (kt_status s = to_problem(p, &prob, fn)) return s;
  if (!a->q) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_attention_prefill: args->q is NULL");
  if (!a->k) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_attention_prefill: args->k is NULL");
  if (!a->v) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_attention_prefill: args->v is NULL");
  if (!a->o) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_attention_prefill: args->o is NULL");
  try {
    // Sizes and the softmax scale exactly as contiguous_params computes them; strides from the caller.
    kt::attn::FwdParams f = kt::attn::contiguous_params(prob, a->q, a->k, a->v, a->o, a->lse, a->softmax_scale);
    f.q_batch_stride = a->q_stride_batch;
    f.q_row_stride = a->q_stride_row;
    f.q_head_stride = a->q_stride_head;
    f.k_batch_stride = a->k_stride_batch;
    f.k_row_stride = a->k_stride_row;
    f.k_head_stride = a->k_stride_head;
    f.v_batch_stride = a->v_stride_batch;
    f.v_row_stride = a->v_stride_row;
    f.v_head_stride = a->v_stride_head;
    f.o_batch_stride = a->o_stride_batch;
    f.o_row_stride = a->o_stride_row;
    f.o_head_stride = a->o_stride_head;
    rt->rt.attention_prefill(prob, f, static_cast<CUstream>(cu_stream));
    return KT_OK;
  } catch (...) {
    return from_exception(fn);
  }
}

kt_status kt_attention_explain(kt_runtime* rt, const kt_attention_problem* p, char* buf, size_t buf_len) {
  const char* fn = "kt_attention_explain";
  if (!rt) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_attention_explain: rt is NULL");
  if (!buf) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_attention_explain: buf is NULL");
  if (buf_len == 0) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_attention_explain: buf_len is 0");
  buf[0] = '\0';
  kt::attn::Problem prob;
  if (kt_status s = to_problem(p, &prob, fn)) return s;
  try {
    const kt::Runtime::Choice c = rt->rt.explain(prob);
    write_line(c.step + ": " + c.variant_name + ": " + c.why, buf, buf_len);
    return KT_OK;
  } catch (...) {
    return from_exception(fn);
  }
}

namespace {

/// kt_qkv_proj (kv NULL) and kt_qkv_proj_kv_cache (kv non-null: k and v may be NULL, the cache is written).
kt_status qkv_proj(const char* fn, kt_runtime* rt, const kt_qkv_problem* p, const kt_qkv_args* a,
                   const kt_kv_cache_args* kv, void* cu_stream) {
  const std::string where = std::string(fn) + ": ";
  if (!rt) return fail(KT_ERROR_INVALID_ARGUMENT, where + "rt is NULL");
  if (!a) return fail(KT_ERROR_INVALID_ARGUMENT, where + "args is NULL");
  kt::qkv::Problem prob;
  if (kt_status s = to_qkv_problem(p, &prob, fn)) return s;
  prob.kv_cache = kv != nullptr;  // the kernel class with the cache write (qkv::Problem::kv_cache)
  const struct {
    const char* name;
    const void* ptr;
  } required[] = {{"x", a->x}, {"w_data", a->w_data}, {"q", a->q}, {"k", a->k}, {"v", a->v}};
  const size_t n_required = kv ? 3 : 5;  // with a KV cache, k and v may be NULL
  for (size_t i = 0; i < n_required; ++i)
    if (!required[i].ptr) return fail(KT_ERROR_INVALID_ARGUMENT, where + "args->" + required[i].name + " is NULL");
  if (prob.rope && !(std::isfinite(a->rope_theta) && a->rope_theta > 0))
    return fail(KT_ERROR_INVALID_ARGUMENT,
                where + "rope_theta must be finite and > 0 when rope is set, got " + std::to_string(a->rope_theta));
  if (kv) {
    const struct {
      const char* name;
      const void* ptr;
    } cache[] = {{"slot_mapping", kv->slot_mapping}, {"k_cache", kv->k_cache}, {"v_cache", kv->v_cache}};
    for (const auto& r : cache)
      if (!r.ptr) return fail(KT_ERROR_INVALID_ARGUMENT, where + "kv->" + r.name + " is NULL");
  }
  try {
    kt::qkv::QkvParams q{};
    q.x = a->x;
    q.w_data = a->w_data;
    q.w_scales = a->w_scales;
    q.w_zeros = a->w_zeros;
    q.bias = prob.has_bias ? a->bias : nullptr;
    q.positions = prob.rope ? reinterpret_cast<const int*>(a->positions) : nullptr;
    q.q = a->q;
    q.k = a->k;
    q.v = a->v;
    q.workspace = nullptr;  // the runtime's (split-K)
    q.counters = nullptr;
    q.x_row_stride = a->x_row_stride;
    q.q_row_stride = a->q_row_stride;
    q.k_row_stride = a->k_row_stride;
    q.v_row_stride = a->v_row_stride;
    q.m = prob.m;
    q.k_dim = prob.k;
    q.num_heads = prob.num_heads;
    q.num_kv_heads = prob.num_kv_heads;
    q.tensor_scale = kt::quant::format_element(prob.format) == kt::quant::Format::nvfp4 ? a->tensor_scale : 1.f;
    q.rope_log2_theta = prob.rope ? std::log2(a->rope_theta) : 0.0;
    if (kv) {
      q.slot_mapping = reinterpret_cast<const int*>(kv->slot_mapping);
      q.k_cache = kv->k_cache;
      q.v_cache = kv->v_cache;
      q.k_cache_page_stride = kv->k_stride_page;
      q.k_cache_slot_stride = kv->k_stride_slot;
      q.k_cache_head_stride = kv->k_stride_head;
      q.v_cache_page_stride = kv->v_stride_page;
      q.v_cache_slot_stride = kv->v_stride_slot;
      q.v_cache_head_stride = kv->v_stride_head;
      q.num_pages = kv->num_pages;
      q.page_size = kv->page_size;
    }
    rt->rt.qkv_proj(prob, q, static_cast<CUstream>(cu_stream));
    return KT_OK;
  } catch (...) {
    return from_exception(fn);
  }
}

}  // namespace

kt_status kt_qkv_proj(kt_runtime* rt, const kt_qkv_problem* p, const kt_qkv_args* a, void* cu_stream) {
  return qkv_proj("kt_qkv_proj", rt, p, a, nullptr, cu_stream);
}

kt_status kt_qkv_proj_kv_cache(kt_runtime* rt, const kt_qkv_problem* p, const kt_qkv_args* a,
                               const kt_kv_cache_args* kv, void* cu_stream) {
  if (!kv) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_qkv_proj_kv_cache: kv is NULL");
  return qkv_proj("kt_qkv_proj_kv_cache", rt, p, a, kv, cu_stream);
}

kt_status kt_qkv_explain(kt_runtime* rt, const kt_qkv_problem* p, char* buf, size_t buf_len) {
  const char* fn = "kt_qkv_explain";
  if (!rt) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_qkv_explain: rt is NULL");
  if (!buf) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_qkv_explain: buf is NULL");
  if (buf_len == 0) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_qkv_explain: buf_len is 0");
  buf[0] = '\0';
  kt::qkv::Problem prob;
  if (kt_status s = to_qkv_problem(p, &prob, fn)) return s;
  try {
    const kt::QkvChoice c = rt->rt.explain_qkv(prob);
    write_line(c.step + ": " + c.variant_name + ": " + c.why, buf, buf_len);
    return KT_OK;
  } catch (...) {
    return from_exception(fn);
  }
}

kt_status kt_attention_decode(kt_runtime* rt, const kt_attention_decode_problem* p, const kt_attention_decode_args* a,
                              void* cu_stream) {
  const char* fn = "kt_attention_decode";
  kt::decode::Problem prob;
  if (kt_status s = to_decode_problem(p, &prob, fn)) return s;
  if (!a) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_attention_decode: args is NULL");
  try {
    const kt::decode::DecodeParams d = to_decode_params(prob, *a);
    if (!rt) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_attention_decode: rt is NULL");
    rt->rt.attention_decode(prob, d, static_cast<CUstream>(cu_stream));
    return KT_OK;
  } catch (...) {
    return from_exception(fn);
  }
}

kt_status kt_explain(kt_runtime* rt, const char* family, const char* problem_json, char* buf, size_t buf_len) {
  const char* fn = "kt_explain";
  if (!rt) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_explain: rt is NULL");
  if (!family) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_explain: family is NULL");
  if (!problem_json) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_explain: problem_json is NULL");
  if (!buf) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_explain: buf is NULL");
  if (buf_len == 0) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_explain: buf_len is 0");
  buf[0] = '\0';
  try {
    const kt::Family& f = kt::find_family(family);
    nlohmann::json problem;
    try {
      problem = nlohmann::json::parse(problem_json);
    } catch (const nlohmann::json::exception& e) {
      return fail(KT_ERROR_INVALID_ARGUMENT, std::string("kt_explain: problem_json does not parse: ") + e.what());
    }
    f.problem_key(problem);  // a missing or mistyped field: ProblemError -> INVALID_ARGUMENT
    try {
      f.canonical_problem(problem);
    } catch (const kt::ProblemError& e) {
      return fail(KT_ERROR_UNSUPPORTED, std::string("kt_explain: ") + e.what());
    }
    const kt::FamilyChoice c = rt->rt.explain(family, problem);
    write_line(c.step + ": " + c.variant_name + ": " + c.why, buf, buf_len);
    return KT_OK;
  } catch (...) {
    return from_exception(fn);
  }
}

kt_status kt_quantize_sizes(int32_t weight_format, int32_t n, int32_t k, size_t* data_bytes, size_t* scales_bytes,
                            size_t* zeros_bytes) {
  const char* fn = "kt_quantize_sizes";
  QuantSizes sz{};
  if (kt_status s = quant_sizes(weight_format, n, k, &sz, fn)) return s;
  if (!data_bytes) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_quantize_sizes: data_bytes is NULL");
  if (!scales_bytes) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_quantize_sizes: scales_bytes is NULL");
  if (!zeros_bytes) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_quantize_sizes: zeros_bytes is NULL");
  *data_bytes = sz.data;
  *scales_bytes = sz.scales;
  *zeros_bytes = sz.zeros;
  return KT_OK;
}

kt_status kt_quantize(int32_t weight_format, const float* w, size_t w_bytes, int32_t n, int32_t k, void* data,
                      size_t data_bytes, void* scales, size_t scales_bytes, void* zeros, size_t zeros_bytes,
                      float* tensor_scale) {
  const char* fn = "kt_quantize";
  QuantSizes sz{};
  if (kt_status s = quant_sizes(weight_format, n, k, &sz, fn)) return s;
  if (!w) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_quantize: w is NULL");
  if (kt_status s = check_elem_bytes(fn, sz, "w", w_bytes, sizeof(float), "float32 values (n * k * 4)")) return s;
  if (kt_status s = check_buffer(fn, sz, "data", data, data_bytes, sz.data, "data")) return s;
  if (kt_status s = check_buffer(fn, sz, "scales", scales, scales_bytes, sz.scales, "scales")) return s;
  if (kt_status s = check_buffer(fn, sz, "zeros", zeros, zeros_bytes, sz.zeros, "zero points")) return s;
  if (!tensor_scale) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_quantize: tensor_scale is NULL");
  try {
    const kt::quant::PackedWeight pw = kt::quant::quantize(sz.format, w, n, k);
    if (pw.data.size() != sz.data || pw.scales.size() != sz.scales || pw.zeros.size() != sz.zeros)
      return fail(KT_ERROR_INTERNAL, "kt_quantize: quantize produced buffers of unexpected sizes");
    std::memcpy(data, pw.data.data(), sz.data);
    if (sz.scales > 0) std::memcpy(scales, pw.scales.data(), sz.scales);
    if (sz.zeros > 0) std::memcpy(zeros, pw.zeros.data(), sz.zeros);
    *tensor_scale = pw.tensor_scale;
    return KT_OK;
  } catch (...) {
    return from_exception(fn);
  }
}

kt_status kt_dequantize(int32_t weight_format, int32_t n, int32_t k, const void* data, size_t data_bytes,
                        const void* scales, size_t scales_bytes, const void* zeros, size_t zeros_bytes,
                        float tensor_scale, double* out, size_t out_bytes) {
  const char* fn = "kt_dequantize";
  QuantSizes sz{};
  if (kt_status s = quant_sizes(weight_format, n, k, &sz, fn)) return s;
  if (kt_status s = check_buffer(fn, sz, "data", data, data_bytes, sz.data, "data")) return s;
  if (kt_status s = check_buffer(fn, sz, "scales", scales, scales_bytes, sz.scales, "scales")) return s;
  if (kt_status s = check_buffer(fn, sz, "zeros", zeros, zeros_bytes, sz.zeros, "zero points")) return s;
  if (!out) return fail(KT_ERROR_INVALID_ARGUMENT, "kt_dequantize: out is NULL");
  if (kt_status s = check_elem_bytes(fn, sz, "out", out_bytes, sizeof(double), "float64 values (n * k * 8)")) return s;
  try {
    kt::quant::PackedWeight pw;
    pw.format = sz.format;
    pw.n = n;
    pw.k = k;
    const auto* d = static_cast<const uint8_t*>(data);
    pw.data.assign(d, d + sz.data);
    if (sz.scales > 0) {
      const auto* s = static_cast<const uint8_t*>(scales);
      pw.scales.assign(s, s + sz.scales);
    }
    if (sz.zeros > 0) {
      const auto* z = static_cast<const uint8_t*>(zeros);
      pw.zeros.assign(z, z + sz.zeros);
    }
    pw.tensor_scale = tensor_scale;
    kt::quant::dequantize(pw, out);  // validates first
    return KT_OK;
  } catch (...) {
    return from_exception(fn);
  }
}

const char* kt_last_error(void) { return g_last_error.c_str(); }

const char* kt_status_string(kt_status s) {
  switch (s) {
    case KT_OK: return "KT_OK";
    case KT_ERROR_INVALID_ARGUMENT: return "KT_ERROR_INVALID_ARGUMENT";
    case KT_ERROR_UNSUPPORTED: return "KT_ERROR_UNSUPPORTED";
    case KT_ERROR_CUDA: return "KT_ERROR_CUDA";
    case KT_ERROR_DATABASE: return "KT_ERROR_DATABASE";
    case KT_ERROR_INTERNAL: return "KT_ERROR_INTERNAL";
  }
  return "KT_ERROR_UNKNOWN_STATUS";
}

const char* kt_version(void) { return kt::version_cstr(); }

}  // extern "C"
