/* kerntune C ABI: launch autotuned attention kernels from C, Python (ctypes/cffi), Rust, ...
 *
 * C99-compatible. Link with -lkerntune (libkerntune.so). No C++ exception crosses this interface:
 * every failure is a kt_status, and kt_last_error() gives the message.
 *
 * Tensors use FlashAttention's layout, all of one dtype (fp16 or bf16), in device memory:
 *   q   [batch, seqlen_q, num_heads,    head_dim]
 *   k,v [batch, seqlen_k, num_kv_heads, head_dim]
 *   o   [batch, seqlen_q, num_heads,    head_dim]   (written)
 *   lse [batch, num_heads, seqlen_q] float32, contiguous (written; optional, natural log)
 * head_dim is contiguous (stride 1); the other strides are given in ELEMENTS and must be multiples
 * of 8 (16-byte loads); q, k, v, o must be 16-byte aligned, lse 4-byte aligned.
 * Grouped-query attention: query head h reads key/value head h / (num_heads / num_kv_heads).
 * Causal masking is bottom-right aligned: query i sees keys j <= i + seqlen_k - seqlen_q; a query
 * row that sees no key gets o = 0 and lse = -inf.
 *
 * Threading: a kt_runtime may be shared by threads. The CUDA context the runtime was created in
 * (or that it retained) must be current on the calling thread, or no context at all (then it is
 * made current).
 */
#ifndef KERNTUNE_KERNTUNE_H_
#define KERNTUNE_KERNTUNE_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define KT_API
#else
#define KT_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** Opaque handle: the tuning database, the detected device and the loaded kernels. */
typedef struct kt_runtime kt_runtime;

/** Result of every call that can fail. */
typedef enum {
  KT_OK = 0,
  KT_ERROR_INVALID_ARGUMENT = 1, /**< null pointer, size < 1, unknown dtype, misaligned pointer or stride */
  KT_ERROR_UNSUPPORTED = 2,      /**< a well-formed problem no kernel supports (head_dim not 64/128,
                                      num_heads not a multiple of num_kv_heads, grid too large), or a GPU
                                      older than sm_80 */
  KT_ERROR_CUDA = 3,             /**< a CUDA driver failure (no driver/GPU, load or launch error) */
  KT_ERROR_DATABASE = 4,         /**< the tuning database cannot be opened or read */
  KT_ERROR_INTERNAL = 5          /**< anything else (e.g. NVRTC unavailable when a kernel must be compiled) */
} kt_status;

typedef enum { KT_DTYPE_FP16 = 0, KT_DTYPE_BF16 = 1 } kt_dtype;

/** What defines the result of an attention call (the tuning database key). All fields >= 1 except
 *  dtype (a kt_dtype) and causal (0 = full attention, nonzero = causal). head_dim: 64 or 128. */
typedef struct {
  int32_t dtype;
  int32_t batch;
  int32_t seqlen_q;
  int32_t seqlen_k;
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t causal;
} kt_attention_problem;

/** Device pointers and strides (in elements) of one attention call. For contiguous tensors:
 *  q/o: stride_head = head_dim, stride_row = num_heads * head_dim, stride_batch = seqlen_q * stride_row;
 *  k/v: stride_head = head_dim, stride_row = num_kv_heads * head_dim, stride_batch = seqlen_k * stride_row. */
typedef struct {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse; /**< may be NULL: the log-sum-exp is then not written */
  int64_t q_stride_batch, q_stride_row, q_stride_head;
  int64_t k_stride_batch, k_stride_row, k_stride_head;
  int64_t v_stride_batch, v_stride_row, v_stride_head;
  int64_t o_stride_batch, o_stride_row, o_stride_head;
  float softmax_scale; /**< multiplies q k^T before the softmax; <= 0 selects 1/sqrt(head_dim) */
} kt_attention_args;

/** Creates a runtime.
 *  db_path: a tuning database written by `autotune` (opened read-only); NULL or "" -> $KERNTUNE_DB
 *  if set, else no database (built-in default kernels, compiled with NVRTC on first use).
 *  Uses the CUDA context current on the calling thread, else retains device 0's primary context and
 *  makes it current. *out receives the handle (NULL on failure).
 *  Errors: INVALID_ARGUMENT (out is NULL), DATABASE (missing or bad file), CUDA (no driver or GPU),
 *  UNSUPPORTED (GPU older than sm_80). */
KT_API kt_status kt_runtime_create(const char* db_path, kt_runtime** out);

/** Destroys a runtime and unloads its kernels. Work already queued on streams must have finished.
 *  NULL is ignored. */
KT_API void kt_runtime_destroy(kt_runtime* rt);

/** Computes o = softmax(softmax_scale * q k^T [causal mask]) v (and lse) for problem p on
 *  cu_stream (a CUstream; NULL = the legacy default stream). Asynchronous: returns once launched;
 *  execution errors appear at the next synchronisation. The first call for a problem chooses the
 *  kernel (see kt_attention_explain) and loads it (database cubin, else disk cache, else NVRTC);
 *  later calls for the same problem only launch.
 *  Errors: INVALID_ARGUMENT (rt, p, a, q, k, v or o NULL; a size < 1; unknown dtype; misaligned
 *  pointer; stride not a multiple of 8), UNSUPPORTED (see kt_status), CUDA, INTERNAL. */
KT_API kt_status kt_attention_prefill(kt_runtime* rt, const kt_attention_problem* p, const kt_attention_args* a,
                                      void* cu_stream);

/** Writes which kernel kt_attention_prefill would use for p, and why, as one NUL-terminated line
 *  "<step>: <variant>: <why>", step = exact | nearest | default, e.g.
 *  "nearest: attention_prefill__bf16_d128_causal__mmasync_m128_n64_w4_s2_r1__sm_90a: nearest tuned
 *  problem attention_prefill/bf16/b1/sq2048/sk2048/h28/kv4/d128/causal (log distance 0.69) on ...".
 *  The line is truncated to buf_len - 1 bytes when longer (512 bytes always suffice for the step and
 *  variant). Does not touch the GPU.
 *  Errors: INVALID_ARGUMENT (rt, p or buf NULL, buf_len 0, malformed problem), UNSUPPORTED. */
KT_API kt_status kt_attention_explain(kt_runtime* rt, const kt_attention_problem* p, char* buf, size_t buf_len);

/** Message of the last failing call on the calling thread ("" if none failed yet). Valid until the
 *  next failing kerntune call on this thread. Never NULL. */
KT_API const char* kt_last_error(void);

/** Name of a status, e.g. "KT_ERROR_UNSUPPORTED". Never NULL. */
KT_API const char* kt_status_string(kt_status s);

/** Library version, "MAJOR.MINOR.PATCH". */
KT_API const char* kt_version(void);

#ifdef __cplusplus
}
#endif

#endif /* KERNTUNE_KERNTUNE_H_ */
