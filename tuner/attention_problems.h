// From a shapes file to the attention_prefill problems it names.
#pragma once
#include <vector>

#include "generator/attention_family.h"
#include "tuner/shapes_file.h"

namespace kt {

/// One Problem per (dtype, prefill workload), in the file's order (dtypes outer). Throws ProblemError
/// (naming the file and the rule) when the model's geometry is one no variant supports, e.g. head_dim 96.
std::vector<attn::Problem> attention_prefill_problems(const ShapesFile& shapes);

}  // namespace kt
