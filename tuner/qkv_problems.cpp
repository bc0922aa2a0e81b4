#include "tuner/qkv_problems.h"

#include <set>

#include "quant/quant.h"

namespace kt {

std::vector<qkv::Problem> qkv_proj_problems(const ShapesFile& s) {
  std::vector<qkv::Problem> out;
  std::set<std::string> seen;
  for (DType dt : s.dtypes)
    for (const auto& fname : s.qkv_formats)
      for (int m : s.qkv_tokens) {
        qkv::Problem p;
        p.dtype = dt;
        p.format = quant::parse_format(fname);
        // 16-bit weights are stored in the activation dtype: "fp16" / "bf16" (and "fp16_kb64" / "bf16_kb64") name
        // the format of that width and layout in the dtype at hand.
        if (p.format == quant::Format::fp16 || p.format == quant::Format::bf16)
          p.format = dt == DType::f16 ? quant::Format::fp16 : quant::Format::bf16;
        if (quant::format_k_blocked(p.format) && quant::format_bits(p.format) == 16)
          p.format = dt == DType::f16 ? quant::Format::fp16_kb64 : quant::Format::bf16_kb64;
        p.m = m;
        p.k = s.model.hidden_size;
        p.num_heads = s.model.num_heads;
        p.num_kv_heads = s.model.num_kv_heads;
        p.head_dim = s.model.head_dim;
        p.has_bias = s.model.qkv_bias;
        p.rope = true;
        try {
          qkv::check_problem(p);
        } catch (const ProblemError& e) {
          throw ProblemError(s.source + ": " + e.what());
        }
        if (seen.insert(p.key()).second) out.push_back(p);
      }
  return out;
}

}  // namespace kt
