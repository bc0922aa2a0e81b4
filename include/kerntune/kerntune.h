/* kerntune C ABI: launch autotuned attention and Q/K/V projection kernels from C, Python (ctypes/cffi),
 * Rust, ...
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
 * Q/K/V projection (kt_qkv_proj, and kt_qkv_proj_kv_cache writing K and V into a paged KV cache): see the comments
 * at kt_qkv_problem, kt_qkv_args and kt_kv_cache_args.
 * Decode attention over a KV cache (kt_attention_decode): see kt_attention_decode_problem and _args.
 * Host-side weight quantization (kt_quantize_sizes, kt_quantize, kt_dequantize): see their comments; they
 * need neither a runtime nor a GPU.
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
  KT_ERROR_INVALID_ARGUMENT = 1, /**< null pointer, size < 1, unknown dtype, misaligned pointer or stride,
                                      a buffer length other than the one required */
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

/** Weight storage formats of the Q/K/V projection (values == kt::quant::Format). The packed layout of
 *  each (data bytes, scales, int4 zero points, nibble order, scale encodings, group sizes) is specified
 *  in templates/qkv_proj/quant_format.h; quant/quant.h quantizes float weights to it and imports
 *  GPTQ int4 and bitsandbytes NF4 checkpoints. Group (block) sizes along k: int4 128, nf4 64,
 *  mxfp4 32, nvfp4 16; int8 has one fp32 scale per output row; fp16/bf16 have no scales.
 *  FP16_KB64 / BF16_KB64: the fp16 / bf16 values K-blocked, data [k/64][n][64] (element (r, c) at
 *  ((c/64) n + r) 64 + c % 64), read by the TMA kernels only (faster weight streaming on sm_90a; the
 *  tuner and kt_qkv_proj treat them as formats of their own: kt_quantize packs them).
 *  INT8_KB64 / INT4_KB128 / NF4_KB128 / MXFP4_KB128 / NVFP4_KB128: the row-major format's data bytes K-blocked,
 *  [k bytes/64][n][64 bytes] (byte b of row r at ((b/64) n + r) 64 + b % 64), scales and zero points unchanged;
 *  k must be a multiple of 64 (int8) or 128 (4-bit). Read by gemv stages 0, 2 and 3 and wgmma_ws only. */
typedef enum {
  KT_WEIGHT_FP16 = 0,
  KT_WEIGHT_BF16 = 1,
  KT_WEIGHT_INT8 = 2,
  KT_WEIGHT_INT4 = 3,
  KT_WEIGHT_NF4 = 4,
  KT_WEIGHT_MXFP4 = 5,
  KT_WEIGHT_NVFP4 = 6,
  KT_WEIGHT_FP16_KB64 = 7,
  KT_WEIGHT_BF16_KB64 = 8,
  KT_WEIGHT_INT8_KB64 = 9,
  KT_WEIGHT_INT4_KB128 = 10,
  KT_WEIGHT_NF4_KB128 = 11,
  KT_WEIGHT_MXFP4_KB128 = 12,
  KT_WEIGHT_NVFP4_KB128 = 13
} kt_weight_format;

/** What defines the result of a fused Q/K/V projection (the tuning database key):
 *    y = x W^T (+ bias), x [m, k] (dtype), W [n, k] with n = (num_heads + 2 * num_kv_heads) * head_dim,
 *  then RoPE (rotate-half, Llama/Qwen convention) on the query and key heads when rope != 0, and the
 *  split of y into q [m, num_heads, head_dim], k [m, num_kv_heads, head_dim], v [m, num_kv_heads, head_dim]
 *  (W's rows in that order: the query heads, then the key heads, then the value heads).
 *  dtype: a kt_dtype (the activations, bias and outputs); weight_format: a kt_weight_format
 *  (fp16/bf16 weights must match dtype). m (tokens), k (hidden size), num_heads, num_kv_heads, head_dim:
 *  >= 1; head_dim 64 or 128; num_heads a multiple of num_kv_heads; k a multiple of 64 and of the
 *  format's group. has_bias, rope: 0 or nonzero. */
typedef struct {
  int32_t dtype;
  int32_t weight_format;
  int32_t m;
  int32_t k;
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t has_bias;
  int32_t rope;
} kt_qkv_problem;

/** Device pointers and row strides (in ELEMENTS, multiples of 8) of one projection; the feature
 *  dimension is contiguous. x, w_data, q, k, v: 16-byte aligned; w_scales, w_zeros, bias: 4-byte aligned (errors
 *  name the pointer). For contiguous tensors:
 *  x_row_stride = k, q_row_stride = num_heads * head_dim, k_row_stride = v_row_stride =
 *  num_kv_heads * head_dim (larger strides address rows of a KV cache or a fused buffer). */
typedef struct {
  const void* x;            /**< [m, k] activations */
  const void* w_data;       /**< packed weight data (templates/qkv_proj/quant_format.h) */
  const void* w_scales;     /**< weight scales; required for int8/int4/nf4/mxfp4/nvfp4, else NULL */
  const void* w_zeros;      /**< int4 zero points; required for int4, else NULL */
  const void* bias;         /**< [n] in dtype; required when has_bias, else ignored */
  const int32_t* positions; /**< [m] token positions for RoPE; required when rope, else ignored */
  void* q;                  /**< [m, num_heads, head_dim] (written) */
  void* k;                  /**< [m, num_kv_heads, head_dim] (written; may be NULL in kt_qkv_proj_kv_cache) */
  void* v;                  /**< [m, num_kv_heads, head_dim] (written; may be NULL in kt_qkv_proj_kv_cache) */
  int64_t x_row_stride, q_row_stride, k_row_stride, v_row_stride;
  float tensor_scale; /**< nvfp4 per-tensor scale (> 0); ignored by the other formats */
  double rope_theta;  /**< RoPE base, e.g. 1000000.0 for Qwen2.5 (> 0 when rope; ignored otherwise) */
} kt_qkv_args;

/** Computes the projection of p on cu_stream (a CUstream; NULL = the legacy default stream).
 *  Asynchronous like kt_attention_prefill: the first call for a problem chooses the kernel (see
 *  kt_qkv_explain), loads it and, for a split-K kernel, allocates its workspace (this first call may
 *  synchronize the context); later calls for the same problem only launch.
 *  The split-K workspace belongs to the runtime's entry for the problem: calls for the SAME problem
 *  issued concurrently on different streams must be ordered by the caller (or use one kt_runtime per
 *  thread); calls on one stream, and calls for different problems, need nothing.
 *  Errors: INVALID_ARGUMENT (rt, p, a, x, w_data, q, k or v NULL; a size < 1; unknown dtype or
 *  weight_format; misaligned pointer; stride not a multiple of 8; a pointer the problem needs is NULL;
 *  rope_theta <= 0 with rope), UNSUPPORTED (k not a multiple of 64 or of the format's group, head_dim
 *  not 64/128, num_heads not a multiple of num_kv_heads, fp16/bf16 weights of the other dtype), CUDA,
 *  INTERNAL. */
KT_API kt_status kt_qkv_proj(kt_runtime* rt, const kt_qkv_problem* p, const kt_qkv_args* a, void* cu_stream);

/** Where kt_qkv_proj_kv_cache writes K (after RoPE) and V: a paged KV cache (the vLLM / TensorRT-LLM layout)
 *    k_cache, v_cache [num_pages, page_size, num_kv_heads, head_dim] in the problem's dtype, device memory,
 *      16-byte aligned; element (page, offset, h, d) at page * *_stride_page + offset * *_stride_slot +
 *      h * *_stride_head + d (strides in ELEMENTS, non-negative multiples of 8, head_dim contiguous; any order of
 *      the three dimensions whose elements do not overlap, e.g. FlashInfer's [num_pages, num_kv_heads, page_size,
 *      head_dim] too). Contiguous [num_pages, page_size, num_kv_heads, head_dim]: stride_head = head_dim,
 *      stride_slot = num_kv_heads * head_dim, stride_page = page_size * stride_slot.
 *    slot_mapping [m] int32, device memory, 4-byte aligned: token i goes to slot s = slot_mapping[i] =
 *      page * page_size + offset, or nowhere when s = -1 (e.g. padding tokens). The slots are device memory and
 *      are NOT checked: each must be -1 or in [0, num_pages * page_size), and no slot may appear twice; anything
 *      else writes outside the cache or races.
 *  num_pages, page_size >= 1, num_pages * page_size < 2^31. */
typedef struct {
  const int32_t* slot_mapping; /**< [m] cache slot per token, -1 = skip */
  void* k_cache;               /**< [num_pages, page_size, num_kv_heads, head_dim] (written at the mapped slots) */
  void* v_cache;               /**< [num_pages, page_size, num_kv_heads, head_dim] (written at the mapped slots) */
  int64_t k_stride_page, k_stride_slot, k_stride_head;
  int64_t v_stride_page, v_stride_slot, v_stride_head;
  int32_t num_pages;
  int32_t page_size;
} kt_kv_cache_args;

/** kt_qkv_proj that also writes every token's K (after RoPE) and V heads into the paged cache of kv (see
 *  kt_kv_cache_args), in the same kernel. q is written as by kt_qkv_proj. a->k and a->v may be NULL: then only the
 *  cache receives K and V (as TensorRT-LLM's fused QKV); when non-null they are written too, for every token
 *  (slot -1 included). Cache slots no token maps to are not touched. The kernel is the cache-writing twin of
 *  kt_qkv_proj's (its own kernel class, so kt_qkv_proj's kernels carry none of this code): the config tuned for the
 *  same problem, its binary from the database or compiled by NVRTC on first use; same workspace and asynchrony.
 *  Errors: as kt_qkv_proj (k and v may be NULL), and INVALID_ARGUMENT for kv NULL, slot_mapping, k_cache or v_cache
 *  NULL or misaligned, num_pages or page_size < 1, num_pages * page_size >= 2^31, a cache stride not a
 *  non-negative multiple of 8, or strides whose elements overlap (each message names the argument). */
KT_API kt_status kt_qkv_proj_kv_cache(kt_runtime* rt, const kt_qkv_problem* p, const kt_qkv_args* a,
                                      const kt_kv_cache_args* kv, void* cu_stream);

/** Writes which kernel kt_qkv_proj would use for p, and why, as one NUL-terminated line
 *  "<step>: <variant>: <why>" (as kt_attention_explain), truncated to buf_len - 1 bytes.
 *  Does not touch the GPU. Errors: INVALID_ARGUMENT (rt, p or buf NULL, buf_len 0, malformed
 *  problem), UNSUPPORTED. */
KT_API kt_status kt_qkv_explain(kt_runtime* rt, const kt_qkv_problem* p, char* buf, size_t buf_len);

/** Decode attention over a KV cache (kt_attention_decode): what defines the result (the tuning database key).
 *    q   [batch, q_len, num_heads, head_dim]                          dtype
 *    K,V contiguous (paged = 0): [batch, s_max, num_kv_heads, head_dim] with per-sequence lengths seqlens_k [batch]
 *        paged (paged != 0):     [num_pages, page_size, num_kv_heads, head_dim] with a block table
 *                                [batch, max_pages_per_seq] int32: token t of sequence b lies in page
 *                                block_table[b][t / page_size], row t % page_size (the vLLM / FlashInfer layout)
 *    o   [batch, q_len, num_heads, head_dim]                          dtype (written)
 *    lse [batch, num_heads, q_len] float32, contiguous, natural log  (written; optional)
 *  dtype: a kt_dtype. batch, num_heads, num_kv_heads >= 1; q_len 1..16 (new tokens per sequence: 1 for decode,
 *  2..16 for speculative / multi-token decode); head_dim 64 or 128; num_heads a multiple of num_kv_heads.
 *  kv_len >= 1: the length the launch grid is sized for (FlashAttention's max_seqlen_k: the batch's longest
 *  sequence, or a bucket above it, at most the cache's capacity); each distinct value is one resolved problem.
 *  page_size: 16, 32, 64, 128 or 256 when paged, 0 otherwise. causal != 0: the q_len new tokens are the last
 *  q_len tokens of each sequence, causal among themselves (query i of sequence b sees keys
 *  [0, seqlens_k[b] - q_len + i]); causal = 0: every query sees keys [0, seqlens_k[b]). A query that sees no key
 *  (a sequence of length 0) gets o = 0 and lse = -inf. */
typedef struct {
  int32_t dtype;
  int32_t batch;
  int32_t q_len;
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t kv_len;
  int32_t paged;
  int32_t page_size;
  int32_t causal;
} kt_attention_decode_problem;

/** Device pointers, strides (in ELEMENTS, multiples of 8; head_dim contiguous) and cache sizes of one decode call.
 *  q, k, v, o 16-byte aligned; lse, seqlens_k, block_table 4-byte aligned. k_stride_batch / v_stride_batch:
 *  elements between sequences (contiguous) or between pages (paged). For contiguous tensors:
 *  q/o: stride_head = head_dim, stride_row = num_heads * head_dim, stride_batch = q_len * stride_row;
 *  k/v: stride_head = head_dim, stride_row = num_kv_heads * head_dim, stride_batch = s_max (contiguous) or
 *  page_size (paged) * stride_row.
 *  Trusted, not checked (device memory): seqlens_k[b] in [0, capacity] (capacity = s_max, or
 *  max_pages_per_seq * page_size) and the block-table entries a sequence's length reaches in [0, num_pages). */
typedef struct {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;                 /**< may be NULL: the log-sum-exp is then not written */
  const int32_t* seqlens_k;   /**< [batch] tokens of each sequence in the cache, new tokens included */
  const int32_t* block_table; /**< paged: [batch, max_pages_per_seq] (row stride block_table_stride); else NULL */
  int64_t q_stride_batch, q_stride_row, q_stride_head;
  int64_t k_stride_batch, k_stride_row, k_stride_head;
  int64_t v_stride_batch, v_stride_row, v_stride_head;
  int64_t o_stride_batch, o_stride_row, o_stride_head;
  int64_t block_table_stride; /**< paged: elements between block-table rows (>= max_pages_per_seq) */
  int32_t s_max;              /**< contiguous: token slots per sequence (>= kv_len); ignored when paged */
  int32_t num_pages;          /**< paged: pages in the K and V caches; ignored when contiguous */
  int32_t max_pages_per_seq;  /**< paged: block-table entries per sequence (capacity / page_size); ignored else */
  float softmax_scale;        /**< multiplies q k^T before the softmax; <= 0 selects 1/sqrt(head_dim) */
} kt_attention_decode_args;

/** Decode attention for problem p on cu_stream (a CUstream; NULL = the legacy default stream): split-KV flash
 *  decoding with the query heads of one KV head packed into one tile. The problem and the arguments are checked
 *  on the host first (before rt, so that a caller can check them without a GPU), then the call is asynchronous
 *  like kt_attention_prefill: the first call for a problem chooses the kernel (kt_explain with family
 *  "attention_decode"), loads it and, for a split kernel, allocates its fp32 partials and counters (that first
 *  call may synchronize the context); later calls only launch. The split buffers belong to the runtime's entry
 *  for the problem, as kt_qkv_proj's: concurrent calls for the SAME problem on different streams must be ordered
 *  by the caller.
 *  Errors (the message names the argument): INVALID_ARGUMENT (p, a or rt NULL; unknown dtype; a size < 1; q, k, v,
 *  o, seqlens_k NULL, or block_table NULL when paged; a misaligned pointer; a stride not a multiple of 8; kv_len
 *  above the cache's capacity; num_pages or max_pages_per_seq < 1 when paged), UNSUPPORTED (q_len above 16,
 *  head_dim not 64/128, num_heads not a multiple of num_kv_heads, a page size other than 16..256 powers of two,
 *  a page size with a contiguous cache), CUDA, INTERNAL. */
KT_API kt_status kt_attention_decode(kt_runtime* rt, const kt_attention_decode_problem* p,
                                     const kt_attention_decode_args* a, void* cu_stream);

/** Writes which kernel the runtime would use for a problem of any registered family, and why, as one
 *  NUL-terminated line "<step>: <variant>: <why>" (as kt_attention_explain), truncated to buf_len - 1 bytes.
 *  family: "attention_prefill", "qkv_proj", ...; problem_json: the problem as the tuning database stores it
 *  (e.g. {"dtype":"bf16","batch":1,"seqlen_q":512,"seqlen_k":512,"num_heads":28,"num_kv_heads":4,
 *  "head_dim":128,"causal":true}). Does not touch the GPU.
 *  Errors: INVALID_ARGUMENT (rt, family, problem_json or buf NULL, buf_len 0, unknown family, JSON that does
 *  not parse, a problem field missing or mistyped), UNSUPPORTED (a problem no kernel supports). */
KT_API kt_status kt_explain(kt_runtime* rt, const char* family, const char* problem_json, char* buf, size_t buf_len);

/* Host-side weight quantization (no runtime, no GPU): the quantizers of quant/quant.h behind the C ABI, so
 * that callers without C++ (Python/ctypes, Rust, ...) can produce the packed weights kt_qkv_proj reads.
 * A packed weight of (weight_format, n, k) is three host byte buffers plus one float, laid out as specified
 * in templates/qkv_proj/quant_format.h (all row-major, little-endian):
 *   data   [n, k * bits / 8] bytes: fp16/bf16 16-bit values; int8 two's complement bytes; 4-bit formats
 *          two elements per byte, element k in byte k / 2, LOW nibble for even k.
 *   scales [n, k / group] entries: int4 fp16, nf4 fp32 absmax (>= 0), mxfp4 E8M0 bytes, nvfp4 E4M3 bytes;
 *          int8 [n] fp32 absmax / 127 (>= 0, one per row); fp16/bf16 none (0 bytes).
 *   zeros  [n, k / 128] bytes, int4 only (zero points 0..15); 0 bytes for every other format.
 *   tensor_scale: nvfp4 per-tensor fp32 scale, a normal float (>= 2^-126, FLT_MIN: a kernel that flushes
 *          subnormals to zero would zero the weight); exactly 1 for every other format.
 * Shape rules (all formats): n >= 1, k >= 1, k a multiple of 64 (the kernels' k step) and of the format's
 * group (int4 128, nf4 64, mxfp4 32, nvfp4 16).
 * Every buffer is passed with its length in BYTES (w_bytes, data_bytes, scales_bytes, zeros_bytes, out_bytes),
 * which must equal the size the format and shape imply (kt_quantize_sizes; n * k * 4 for w, n * k * 8 for
 * out): a wrong length is refused with KT_ERROR_INVALID_ARGUMENT naming the argument, so that a buffer of
 * another format or shape is never read or written past its end. A buffer whose size is 0 (scales of
 * fp16/bf16, zeros of every format but int4) is passed as NULL with length 0.
 * The byte buffers passed to kt_qkv_proj (copied to device memory) are exactly these buffers. */

/** Byte sizes of the three buffers of a packed weight (weight_format, n, k): *data_bytes = n * k * bits / 8,
 *  *scales_bytes (0 for fp16/bf16), *zeros_bytes (0 except int4). weight_format: a kt_weight_format.
 *  data_bytes, scales_bytes and zeros_bytes must not be NULL; nothing is written on failure.
 *  Errors: INVALID_ARGUMENT (unknown weight_format, n or k < 1, k not a multiple of 64 or of the format's
 *  group, a NULL output pointer). */
KT_API kt_status kt_quantize_sizes(int32_t weight_format, int32_t n, int32_t k, size_t* data_bytes,
                                   size_t* scales_bytes, size_t* zeros_bytes);

/** Quantizes w to weight_format with round-to-nearest, exactly as kt::quant::quantize (quant/quant.h documents
 *  each format's rule; fp16 and bf16 are a round-to-nearest-even conversion).
 *    w        [n, k] row-major fp32 in host memory (n = output features, k = input features); w_bytes = n * k * 4.
 *    data, scales, zeros: host buffers of exactly data_bytes, scales_bytes, zeros_bytes = kt_quantize_sizes'
 *             sizes (written); a buffer of size 0 is NULL with length 0.
 *    *tensor_scale (written): nvfp4's per-tensor scale, 1 for every other format.
 *  nvfp4's tensor scale is absmax(w) / (448 * 6), raised to 2^-126 (FLT_MIN) when smaller, so it is never a
 *  subnormal: a weight whose absmax is below 2688 * 2^-126 (about 3.2e-35) is quantized on that grid, and its
 *  blocks of absmax below about 7e-41 (6 * 2^-136) store zero. An all-zero weight gives zero codes and
 *  tensor_scale 1. Nothing is written on failure.
 *  Errors: INVALID_ARGUMENT (unknown weight_format, n or k < 1, k not a multiple of 64 or of the group, w,
 *  data or tensor_scale NULL, scales or zeros NULL where the format has them, a byte length other than the one
 *  required, a non-finite element of w, an fp16 overflow (fp16 format or an int4 group scale)),
 *  INTERNAL (out of memory). */
KT_API kt_status kt_quantize(int32_t weight_format, const float* w, size_t w_bytes, int32_t n, int32_t k, void* data,
                             size_t data_bytes, void* scales, size_t scales_bytes, void* zeros, size_t zeros_bytes,
                             float* tensor_scale);

/** Exact values of a packed weight, as kt::quant::dequantize: out = decode(q) * scale [* tensor_scale], the value the
 *  kernel decodes before rounding to its fp16/bf16 MMA operand.
 *    data, scales, zeros: host buffers of exactly data_bytes, scales_bytes, zeros_bytes = kt_quantize_sizes' sizes
 *             (a buffer of size 0 is NULL with length 0).
 *    tensor_scale: nvfp4's per-tensor scale (finite, >= 2^-126); exactly 1 for every other format.
 *    out      [n, k] row-major float64 in host memory (written); out_bytes = n * k * 8.
 *  The weight is validated first (kt::quant::validate); nothing is written to out on failure.
 *  Errors: INVALID_ARGUMENT (unknown weight_format, n or k < 1, k not a multiple of 64 or of the group, data
 *  or out NULL, scales or zeros NULL where the format has them, a byte length other than the one required, a NaN or
 *  infinite fp16/bf16 element, a zero point above 15, a NaN/infinite scale, a negative int8 or nf4 scale,
 *  tensor_scale not finite and >= 2^-126 for nvfp4 or not exactly 1 for another format), INTERNAL (out of
 *  memory). */
KT_API kt_status kt_dequantize(int32_t weight_format, int32_t n, int32_t k, const void* data, size_t data_bytes,
                               const void* scales, size_t scales_bytes, const void* zeros, size_t zeros_bytes,
                               float tensor_scale, double* out, size_t out_bytes);

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
