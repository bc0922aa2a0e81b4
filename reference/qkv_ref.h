// CPU float64 reference of the fused Q/K/V projection (with optional bias and rotary position embedding),
// used by tests and by the tuner's verification of the qkv_proj kernels.
//
//   Y = X W^T + b                                   X [m, k], W [n, k], b [n], n = (Hq + 2 Hkv) * D
//   columns of Y: [0, Hq*D) = Q (head-major: head h, dim d at h*D + d), then Hkv*D of K, then Hkv*D of V
//   RoPE ("rotate half", GPT-NeoX / Llama / Qwen2 in Hugging Face transformers, apply_rotary_pos_emb; Su et
//   al. 2021, "RoFormer"), on every Q and K head, never on V, applied after the bias: for i < D/2,
//     angle = pos * theta^(-2i/D)
//     (y_i, y_{i+D/2}) -> (y_i cos(angle) - y_{i+D/2} sin(angle), y_{i+D/2} cos(angle) + y_i sin(angle))
// Everything is evaluated in float64 (the kernels compute the angles in fp32: the tolerance absorbs that).
#pragma once

#include <vector>

namespace kt::ref {

/// Geometry of one projection: m tokens, k input features (hidden size), num_heads Hq query heads,
/// num_kv_heads Hkv key/value heads, head_dim D; has_bias: add bias [n]; rope: rotate Q and K by token
/// position with base rope_theta (Llama 10000, Qwen2.5 1000000).
struct QkvShape {
  int m, k, num_heads, num_kv_heads, head_dim;
  bool has_bias;
  bool rope;
  double rope_theta;
};

/// n = (num_heads + 2 * num_kv_heads) * head_dim, the rows of W.
int qkv_out_features(const QkvShape& s);

/// Validates a shape: m >= 0, k, num_heads, num_kv_heads, head_dim >= 1, num_heads % num_kv_heads == 0,
/// head_dim even and rope_theta finite and > 0 when rope. Throws std::invalid_argument naming the field,
/// e.g. "QkvShape: head_dim must be even when rope is set (got 5)".
void validate(const QkvShape& s);

/// Full projection. x [m, k] (float values of the fp16/bf16 activations), w [n, k] float64 (e.g.
/// kt::quant::dequantize), bias [n] (read only when has_bias), positions [m] int32 token positions (read only
/// when rope). Writes q [m, Hq, D], k [m, Hkv, D], v [m, Hkv, D] (float64, contiguous).
/// Throws std::invalid_argument for an invalid shape or a null pointer that is needed.
void qkv_projection(const QkvShape& s, const float* x, const double* w, const float* bias, const int* positions,
                    double* q, double* k, double* v);

/// The same for the token rows listed in `rows` only (each in [0, m), any order, repeats allowed):
/// writes q [rows.size(), Hq, D], k and v [rows.size(), Hkv, D]; output row j is token rows[j]
/// (positions[rows[j]] is its position). Throws std::invalid_argument for a row out of range.
void qkv_projection_rows(const QkvShape& s, const float* x, const double* w, const float* bias, const int* positions,
                         const std::vector<int>& rows, double* q, double* k, double* v);

/// The paged KV cache a projection writes (the kernels' slot-mapping write, QkvParams::slot_mapping in
/// templates/qkv_proj/qkv_proj_config.h): for every token i with slot_mapping[i] = s >= 0, K head h of token i
/// (k [m, Hkv, D] as qkv_projection writes it, after RoPE) goes to k_cache[s / page_size][s % page_size][h][:] and
/// V likewise to v_cache; tokens with slot -1 are skipped and slots no token maps to keep their contents.
/// k_cache, v_cache: contiguous [num_pages, page_size, Hkv, D] float64 (read and written). slot_mapping: [m].
/// Throws std::invalid_argument (naming the argument) for an invalid shape, num_pages or page_size < 1, a
/// slot_mapping of another length, a slot below -1 or at or past num_pages * page_size, a slot mapped twice (the
/// kernels' result would depend on the store order), or a null pointer that is needed.
void kv_cache_write(const QkvShape& s, const double* k, const double* v, const std::vector<int>& slot_mapping,
                    int num_pages, int page_size, double* k_cache, double* v_cache);

}  // namespace kt::ref
