// From a shapes file to the qkv_proj problems it names.
#pragma once
#include <vector>

#include "generator/qkv_family.h"
#include "tuner/shapes_file.h"

namespace kt {

/// One qkv_proj Problem per (dtype, weight format, token count) of the shapes file's qkv_proj workload, dtypes
/// outer, then formats, then tokens. "fp16"/"bf16" formats mean the unquantized 16-bit weight in the activation
/// dtype (so the pair is deduplicated), and "fp16_kb64"/"bf16_kb64" its K-blocked layout in that dtype. K = hidden_size, heads from the model, bias = qkv_bias, RoPE on.
/// Throws ProblemError naming the file and the rule for unsupported geometry (e.g. hidden_size not a multiple of
/// a format's block).
std::vector<qkv::Problem> qkv_proj_problems(const ShapesFile& shapes);

}  // namespace kt
