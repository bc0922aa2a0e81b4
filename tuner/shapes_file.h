// Shapes files: a model's attention geometry plus the workloads the autotuner tunes for it.
//
// Format: a JSON object (plain JSON: no comments, no trailing commas, no duplicate keys); shapes/qwen7b.json
// is the reference example. This one names every field:
//
//   {
//     "model": "Qwen2.5-7B",
//     "hidden_size": 3584,
//     "num_attention_heads": 28,
//     "num_key_value_heads": 4,
//     "head_dim": 128,
//     "qkv_bias": true,
//     "rope_theta": 1000000.0,
//     "dtypes": ["bf16", "fp16"],
//     "workloads": {
//       "attention_prefill": [
//         {"batch": 1, "seqlen": 512},
//         {"batch": 4, "seqlen": 128, "seqlen_k": 1024, "causal": false}
//       ],
//       "qkv_proj": {"tokens": [1, 16, 64], "formats": ["fp16", "int4"]},
//       "attention_decode": [
//         {"batch": 1, "kv_len": 4096},
//         {"batch": [1, 16], "kv_len": [2048, 8192], "q_len": 4, "page_size": 64, "causal": true}
//       ]
//     }
//   }
//
//   model                 string, required: display name (no control characters)
//   hidden_size           integer 1..kMaxHiddenSize, required: K of the Q/K/V projection
//   num_attention_heads   integer 1..kMaxHeads, required: query heads Hq
//   num_key_value_heads   integer 1..kMaxHeads, required: Hkv, with Hq % Hkv == 0
//   head_dim              integer 1..kMaxHeadDim, required: D (Hq * D need not equal hidden_size)
//   qkv_bias              boolean, optional (default false): the Q/K/V projection has a bias
//   rope_theta            positive number, optional (default 10000)
//   dtypes                activation dtypes, optional (default ["bf16", "fp16"]): names kt::parse_dtype
//                         accepts, no duplicates
//   workloads             object, required, at least one workload in total:
//     attention_prefill   optional list of {batch 1..kMaxBatch, seqlen 1..kMaxSeqlen (= seqlen_q), required;
//                         seqlen_k 1..kMaxSeqlen, default = seqlen; causal, default true (bottom-right
//                         aligned)}; no two entries equal
//     qkv_proj            optional {tokens: M values 1..kMaxTokens, required; formats: weight formats, required:
//                         fp16, bf16, int8, int4, nf4, mxfp4, nvfp4, fp16_kb64, bf16_kb64, int8_kb64, int4_kb128,
//                         nf4_kb128, mxfp4_kb128, nvfp4_kb128 (templates/qkv_proj/quant_format.h), no
//                         duplicates}
//     attention_decode    optional list of {batch 1..kMaxBatch and kv_len 1..kMaxSeqlen, required, each an
//                         integer or a non-empty array of them (the entry is then every batch x kv_len pair,
//                         batch outer: a bucket grid); q_len 1..kMaxDecodeQLen, default 1 (new tokens per
//                         sequence); page_size, default 0 = a contiguous cache, else the tokens per page of a
//                         paged cache (1..kMaxDecodePageSize here; the family supports 16..256 powers of two);
//                         causal, default true (the new tokens causal among themselves)}; no two expanded
//                         workloads equal
//
// No tensor of a workload (Q, K/V, the fp16 Q/K/V weight, the projection's input and output, at 2 bytes an
// element) may exceed kMaxTensorBytes. Unknown keys are rejected with their name (top level, inside
// "workloads", "qkv_proj" and every workload entry), so a misspelt key never silently drops a workload.
//
// A Hugging Face transformers config.json is accepted too: a file with none of the kerntune-only keys
// ("model", "dtypes", "qkv_bias", "workloads") and with "hidden_size" and "num_attention_heads" (or a
// multimodal "text_config" holding them). Any kerntune-only key makes it a kerntune file, whose unknown keys
// are then errors. See load_shapes.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "templates/common/kt_types.h"

namespace kt {

/// Size bounds, checked where a shapes file is parsed; a larger value is refused with the bound in the message.
constexpr int kMaxHiddenSize = 65536;              ///< hidden_size
constexpr int kMaxHeads = 1024;                    ///< num_attention_heads, num_key_value_heads
constexpr int kMaxHeadDim = 1024;                  ///< head_dim (the families support fewer; they say which)
constexpr int kMaxBatch = 65535;                   ///< batch (a CUDA grid dimension)
constexpr int kMaxSeqlen = 1 << 20;                ///< seqlen, seqlen_k, kv_len
constexpr int kMaxTokens = 1 << 20;                ///< qkv_proj tokens
constexpr long long kMaxTensorBytes = 64LL << 30;  ///< any one tensor of a workload, at 2 bytes an element
constexpr int kMaxDecodeQLen = 1024;               ///< attention_decode q_len (the family supports fewer)
constexpr int kMaxDecodePageSize = 65536;          ///< attention_decode page_size (the family supports fewer)
constexpr int kMaxJsonDepth = 64;                  ///< JSON nesting (a shapes file needs 4)

/// Attention geometry of a model (one transformer layer; all layers are equal).
struct ModelShape {
  std::string name;   ///< display name ("model", or HF "_name_or_path" / "architectures" / "model_type")
  int hidden_size;    ///< K of the Q/K/V projection
  int num_heads;      ///< query heads Hq
  int num_kv_heads;   ///< key/value heads Hkv (GQA: Hq % Hkv == 0; MQA: 1)
  int head_dim;       ///< D
  bool qkv_bias;      ///< Q/K/V projection has a bias vector
  double rope_theta;  ///< RoPE base frequency
};

/// One prefill attention problem: q [batch, seqlen_q, Hq, D], k/v [batch, seqlen_k, Hkv, D].
struct PrefillWorkload {
  int batch;
  int seqlen_q;
  int seqlen_k;
  bool causal;  ///< bottom-right aligned causal mask (FlashAttention 2.1+ convention)
};

/// One decode attention problem: q_len new tokens per sequence against kv_len cached keys (the new ones
/// included), in a contiguous (page_size 0) or paged KV cache.
struct DecodeWorkload {
  int batch;
  int kv_len;
  int q_len = 1;
  int page_size = 0;  ///< 0: contiguous cache; else tokens per page
  bool causal = true;
};

/// The attention_decode workloads of shapes/qwen7b.json (also those of a Hugging Face config.json): a bucket grid
/// batch {1, 4, 16, 64} x kv_len {512, 2048, 4096, 8192, 32768} for q_len 1, contiguous and paged (page 64), so the
/// runtime's nearest step is within a factor 2 of every length in 512..32768; and speculative decode, q_len 4 on
/// batch {1, 16, 64} x kv_len {1024, 4096, 16384} and q_len 8 at batch 16, kv_len 4096, both layouts.
std::vector<DecodeWorkload> default_decode_workloads();

/// A parsed shapes file. Lists keep the file's order.
struct ShapesFile {
  std::string source;  ///< path (or name) it was read from, used in messages
  ModelShape model;
  std::vector<DType> dtypes;             ///< activation dtypes to tune
  std::vector<PrefillWorkload> prefill;  ///< attention_prefill workloads
  std::vector<int> qkv_tokens;           ///< qkv_proj M values (tokens)
  std::vector<std::string> qkv_formats;  ///< qkv_proj weight formats, canonical lower-case names
  std::vector<DecodeWorkload> decode;    ///< attention_decode workloads
  bool hugging_face = false;             ///< read as a Hugging Face config.json (default workloads): callers
                                         ///< tell the user, e.g. "reading X as a Hugging Face config.json"

  /// The number of workloads (problems before the dtype axis) under each "workloads" key of the file, keyed by
  /// the key's name (which is the family's name): attention_prefill, qkv_proj (tokens x formats),
  /// attention_decode.
  std::vector<std::pair<std::string, size_t>> workload_counts() const {
    return {{"attention_prefill", prefill.size()},
            {"qkv_proj", qkv_tokens.empty() ? 0 : qkv_tokens.size() * qkv_formats.size()},
            {"attention_decode", decode.size()}};
  }
};

/// Any problem with a shapes file. The message starts with the source name and names the field,
/// e.g. "shapes/x.json: field 'workloads.attention_prefill[2].seqlen': expected a positive integer",
/// "shapes/x.json: missing field 'num_key_value_heads'", "shapes/x.json: unknown field 'foo'".
struct ShapesError : std::runtime_error {
  using runtime_error::runtime_error;
};

/// Weight formats accepted in "qkv_proj.formats", in canonical order: quant::format_name of every quant::Format
/// (fp16, bf16, int8, int4, nf4, mxfp4, nvfp4, fp16_kb64, bf16_kb64, int8_kb64, int4_kb128, nf4_kb128, mxfp4_kb128,
/// nvfp4_kb128).
const std::vector<std::string>& known_weight_formats();

/// Reads a kerntune shapes file (format above) or a Hugging Face config.json.
///
/// Hugging Face config.json (no kerntune-only key; "hidden_size" and "num_attention_heads" at the top level or
/// in "text_config", whose fields are then used): other keys are ignored; `hugging_face` is set;
///   head_dim     = "head_dim" if present (and not null), else hidden_size / num_attention_heads
///                  (which must divide exactly);
///   num_kv_heads = "num_key_value_heads" if present, else num_attention_heads;
///   qkv_bias     = "attention_bias" if present, else (model_type == "qwen2");
///   rope_theta   = "rope_theta" if present, else "rope_parameters"."rope_theta" if present, else 10000;
///   name         = top-level "_name_or_path" if non-empty, else "architectures"[0], else "model_type",
///                  else "unknown";
///   dtypes = {bf16, fp16}; workloads = those of shapes/qwen7b.json. The size bounds above apply.
///
/// Throws ShapesError (message names the file and the field) when the path is a directory or cannot be read,
/// is not valid JSON, has a duplicate key ("duplicate key 'head_dim'") or is nested deeper than kMaxJsonDepth,
/// or fails validation: positive integers within the bounds, Hq % Hkv == 0 ("field 'num_key_value_heads': 28
/// attention heads are not a multiple of 5 KV heads"), tensors within kMaxTensorBytes, known dtypes and
/// formats, no duplicate entries, no unknown keys.
ShapesFile load_shapes(const std::string& path);

/// As load_shapes, from an already parsed JSON value; source_name is used as `source` and in messages.
/// Duplicate keys cannot be detected here (the parsed value has kept one of them).
ShapesFile parse_shapes(const nlohmann::json& j, const std::string& source_name);

}  // namespace kt
