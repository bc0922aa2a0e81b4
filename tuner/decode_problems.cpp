#include "tuner/decode_problems.h"

#include <string>

namespace kt {

std::vector<decode::Problem> attention_decode_problems(const ShapesFile& s) {
  std::vector<decode::Problem> out;
  for (DType dt : s.dtypes)
    for (size_t i = 0; i < s.decode.size(); ++i) {
      const DecodeWorkload& w = s.decode[i];
      decode::Problem p;
      p.dtype = dt;
      p.batch = w.batch;
      p.q_len = w.q_len;
      p.num_heads = s.model.num_heads;
      p.num_kv_heads = s.model.num_kv_heads;
      p.head_dim = s.model.head_dim;
      p.kv_len = w.kv_len;
      p.kv_layout = w.page_size > 0 ? decode::KvLayout::paged : decode::KvLayout::contiguous;
      p.page_size = w.page_size;
      p.causal = w.causal;
      try {
        decode::check_problem(p);
      } catch (const ProblemError& e) {
        throw ProblemError(s.source + ": attention_decode workload " + std::to_string(i) + " (batch " +
                           std::to_string(w.batch) + ", kv_len " + std::to_string(w.kv_len) + "): " + e.what());
      }
      out.push_back(p);
    }
  return out;
}

}  // namespace kt
