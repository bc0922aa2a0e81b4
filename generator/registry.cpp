#include "generator/registry.h"

#include <stdexcept>

#include "generator/attention_family.h"
#include "generator/qkv_family.h"

namespace kt {

const std::vector<FamilyInfo>& families() {
  static const std::vector<FamilyInfo> f = {
      {attn::kFamily, "flash attention forward (prefill): FlashAttention-2 online softmax, GQA/MQA, causal, fp16/bf16"},
      {qkv::kFamily, "fused Q/K/V projection: block-quantized weights (int8/int4/NF4/MXFP4/NVFP4/fp16/bf16) dequantized in the "
                     "GEMM mainloop, bias + RoPE + split into Q/K/V in the epilogue, split-K for small M"},
  };
  return f;
}

const FamilyInfo& find_family(const std::string& name) {
  for (const auto& f : families())
    if (f.name == name) return f;
  std::string known;
  for (const auto& f : families()) known += (known.empty() ? "" : ", ") + f.name;
  throw std::invalid_argument("unknown family '" + name + "': known are " + known);
}

}  // namespace kt
