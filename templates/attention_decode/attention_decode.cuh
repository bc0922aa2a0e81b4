// Split-KV flash decoding (attention_decode family): see decode_config.h for the work decomposition, layouts and
// kernel arguments.
#pragma once
#include "attention_decode/decode_config.h"
#include "common/ptx.cuh"

namespace kt {
namespace decode {

template <DType DT, int D, KvLayout Layout, int TileM, int TileN, int Warps, int Stages>
__global__ void __launch_bounds__(Warps * 32) attention_decode(const DecodeParams p) {
  static_assert(invalid_reason(DT, D, Layout, Config{TileM, TileN, Warps, Stages, 0},
                               ArchId{__CUDA_ARCH__ / 10, KT_ARCH_SPECIFIC}) == nullptr,
                "invalid attention_decode variant: see invalid_reason() in decode_config.h");
  (void)p;
}

}  // namespace decode
}  // namespace kt
