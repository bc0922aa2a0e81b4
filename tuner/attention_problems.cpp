#include "tuner/attention_problems.h"

namespace kt {

std::vector<attn::Problem> attention_prefill_problems(const ShapesFile& s) {
  std::vector<attn::Problem> out;
  for (DType dt : s.dtypes)
    for (const auto& w : s.prefill) {
      attn::Problem p;
      p.dtype = dt;
      p.batch = w.batch;
      p.seqlen_q = w.seqlen_q;
      p.seqlen_k = w.seqlen_k;
      p.num_heads = s.model.num_heads;
      p.num_kv_heads = s.model.num_kv_heads;
      p.head_dim = s.model.head_dim;
      p.causal = w.causal;
      try {
        attn::check_problem(p);
      } catch (const ProblemError& e) {
        throw ProblemError(s.source + ": " + e.what());
      }
      out.push_back(p);
    }
  return out;
}

}  // namespace kt
