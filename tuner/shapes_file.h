// Shapes files: a model's attention geometry plus the workloads the autotuner tunes for it.
//
// Format (JSON object; shapes/qwen7b.json is the reference example):
//
//   {
//     "model": "Qwen2.5-7B",               // string, required: display name
//     "hidden_size": 3584,                 // positive integer, required
//     "num_attention_heads": 28,           // positive integer, required (query heads, Hq)
//     "num_key_value_heads": 4,            // positive integer, required (Hkv); Hq % Hkv == 0
//     "head_dim": 128,                     // positive integer, required (D); Hq * D need not equal
//                                          //   hidden_size
//     "qkv_bias": true,                    // boolean, optional (default false): Q/K/V projection has a bias
//     "rope_theta": 1000000.0,             // positive number, optional (default 10000)
//     "dtypes": ["bf16", "fp16"],          // activation dtypes, optional (default ["bf16", "fp16"]);
//                                          //   names as accepted by kt::parse_dtype, no duplicates
//     "workloads": {                       // required; at least one workload in total
//       "attention_prefill": [             // optional list
//         {"batch": 1, "seqlen": 512,      //   batch, seqlen (= seqlen_q): positive integers, required
//          "seqlen_k": 512,                //   optional, default = seqlen
//          "causal": true}                 //   optional, default true (bottom-right aligned)
//       ],
//       "qkv_proj": {                      // optional
//         "tokens": [1, 16, 64],           //   M values (tokens per call): positive integers, required
//         "formats": ["fp16", "int4"]      //   weight formats, required: fp16, bf16, int8, int4, nf4,
//       },                                 //   mxfp4, nvfp4, fp16_kb64, bf16_kb64, int8_kb64, int4_kb128,
//                                          //   nf4_kb128, mxfp4_kb128, nvfp4_kb128 (see quant/quant_format.h
//                                          //   and ANCHORS.md "Format definitions")
//       "attention_decode": [              // optional list (one query token per sequence)
//         {"batch": 1, "kv_len": 4096}     //   positive integers, required
//       ]
//     }
//   }
//
// Unknown keys are rejected with their name (top level, inside "workloads", "qkv_proj" and every
// workload entry), so a misspelt key never silently drops a workload.
//
// A Hugging Face transformers config.json is accepted too (detected: no "workloads" key but
// "hidden_size" and "num_attention_heads" present); see load_shapes.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "templates/common/kt_types.h"

namespace kt {

/// Attention geometry of a model (one transformer layer; all layers are equal).
struct ModelShape {
  std::string name;     ///< display name ("model", or HF "_name_or_path" / "model_type")
  int hidden_size;      ///< K of the Q/K/V projection
  int num_heads;        ///< query heads Hq
  int num_kv_heads;     ///< key/value heads Hkv (GQA: Hq % Hkv == 0; MQA: 1)
  int head_dim;         ///< D
  bool qkv_bias;        ///< Q/K/V projection has a bias vector
  double rope_theta;    ///< RoPE base frequency
};

/// One prefill attention problem: q [batch, seqlen_q, Hq, D], k/v [batch, seqlen_k, Hkv, D].
struct PrefillWorkload {
  int batch;
  int seqlen_q;
  int seqlen_k;
  bool causal;  ///< bottom-right aligned causal mask (FlashAttention 2.1+ convention)
};

/// One decode attention problem: one query token per sequence against kv_len cached keys.
struct DecodeWorkload {
  int batch;
  int kv_len;
};

/// A parsed shapes file. Lists keep the file's order.
struct ShapesFile {
  std::string source;                    ///< path (or name) it was read from, used in messages
  ModelShape model;
  std::vector<DType> dtypes;             ///< activation dtypes to tune
  std::vector<PrefillWorkload> prefill;  ///< attention_prefill workloads
  std::vector<int> qkv_tokens;           ///< qkv_proj M values (tokens)
  std::vector<std::string> qkv_formats;  ///< qkv_proj weight formats, canonical lower-case names
  std::vector<DecodeWorkload> decode;    ///< attention_decode workloads
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
/// Hugging Face config.json (detected: no "workloads" key, but "hidden_size" and
/// "num_attention_heads"): other keys are ignored;
///   head_dim     = config["head_dim"] if present (and not null), else hidden_size / num_attention_heads
///                  (which must divide exactly);
///   num_kv_heads = config["num_key_value_heads"] if present, else num_attention_heads;
///   qkv_bias     = config["attention_bias"] if present, else (model_type == "qwen2");
///   rope_theta   = config["rope_theta"] if present, else 10000;
///   name         = "_name_or_path" if present and non-empty, else "model_type", else "unknown";
///   dtypes = {bf16, fp16}; workloads = those of shapes/qwen7b.json.
///
/// Throws ShapesError (message names the file and the field) when the file cannot be read, is not
/// valid JSON, or fails validation: positive integers, Hq % Hkv == 0 ("field 'num_key_value_heads':
/// 28 attention heads are not a multiple of 5 KV heads"), known dtypes and formats, no unknown keys.
ShapesFile load_shapes(const std::string& path);

/// As load_shapes, from an already parsed JSON value; source_name is used as `source` and in messages.
ShapesFile parse_shapes(const nlohmann::json& j, const std::string& source_name);

}  // namespace kt
