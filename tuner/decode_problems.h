// From a shapes file to the attention_decode problems it names.
#pragma once
#include <vector>

#include "generator/decode_family.h"
#include "tuner/shapes_file.h"

namespace kt {

/// One Problem per (dtype, decode workload), in the file's order (dtypes outer): the model's heads and head_dim, the
/// workload's batch, kv_len, q_len, page size (0: contiguous) and causal flag. Throws ProblemError (naming the file,
/// the workload and the rule) for a geometry no variant supports, e.g. head_dim 96, q_len 17 or page_size 48.
std::vector<decode::Problem> attention_decode_problems(const ShapesFile& shapes);

}  // namespace kt
