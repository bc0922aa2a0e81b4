// Decoders of the weight formats' scale encodings and element code tables (quant_format.h value rules), and the decode
// tables in shared memory (the 16 code values, the 256-pair table of a packed byte), device side.
// Compiled by NVRTC only. No standard headers.
#pragma once
#include "common/ptx.cuh"
#include "qkv_proj/quant_format.h"

namespace kt {
namespace quant {

/// FP8 E4M3 (OCP FP8: bias 7, no infinities, 0x7F/0xFF NaN) to float.
__device__ __forceinline__ float e4m3_to_float(unsigned b) {
  const unsigned e = (b >> 3) & 15u, m = b & 7u;
  float v = e == 0 ? float(m) * 0.001953125f /* 2^-9 */ : __int_as_float(int(((e + 120u) << 23) | (m << 20)));
  if ((b & 0x7fu) == 0x7fu) v = __int_as_float(0x7fc00000);
  return (b & 0x80u) ? -v : v;
}

/// E8M0 scale (OCP MX v1.0: 2^(e - 127), e = 255 NaN) to float; e = 0 is 2^-127, a denormal.
__device__ __forceinline__ float e8m0_to_float(unsigned e) {
  return e == 255u ? __int_as_float(0x7fc00000) : (e == 0u ? 5.877471754111438e-39f : __int_as_float(int(e << 23)));
}

/// Two E4M3 bytes (the low 16 bits of b, byte 0 first) to two fp32 values times tensor_scale. sm_89+: one exact
/// cvt.rn.f16x2.e4m3x2 (PTX ISA, cvt; every E4M3 value, NaN included, is an fp16) instead of about 12 instructions per
/// byte in e4m3_to_float.
__device__ __forceinline__ void e4m3x2_to_float(unsigned b, float tensor_scale, float& s0, float& s1) {
#if __CUDA_ARCH__ >= 890
  unsigned pair;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(pair) : "h"((unsigned short)(b & 0xffffu)));
  s0 = ptx::to_float<DType::f16>((unsigned short)(pair & 0xffffu)) * tensor_scale;
  s1 = ptx::to_float<DType::f16>((unsigned short)(pair >> 16)) * tensor_scale;
#else
  s0 = e4m3_to_float(b & 0xffu) * tensor_scale;
  s1 = e4m3_to_float((b >> 8) & 0xffu) * tensor_scale;
#endif
}

/// Entry c (0..15) of a 4-bit format's decode table as a compile-time constant: the NF4 code value (nf4) or the signed
/// E2M1 value (the other 4-bit formats).
template <Format F, int C>
struct LutConst {
  static constexpr float value = F == Format::nf4 ? nf4_code(C) : (C & 8 ? -1.f : 1.f) * e2m1_magnitude(C & 7);
};

/// a if i == C else b, as one setp + selp in inline PTX: opaque to the compiler, which turns a plain chain of
/// compare-and-selects on one variable back into a switch (a branch tree).
template <int C>
__device__ __forceinline__ float select_if_eq(int i, float a, float b) {
  float r;
  asm("{ .reg .pred p; setp.eq.s32 p, %1, %2; selp.f32 %0, %3, %4, p; }" : "=f"(r) : "r"(i), "n"(C), "f"(a), "f"(b));
  return r;
}

/// Entry i (0..15; any other i gives entry 0) of the decode table (LutConst<F, i>), branch-free: 15 compare-and-selects
/// on immediates that every lane runs alike. (Indexing the switch of quant::nf4_code with the lane's i compiles to a
/// branch tree whose 16 leaves the lanes of a warp walk one after another.) The kernels fill a 16-entry shared-memory
/// table with it.
template <Format F, int C = 15>
__device__ __forceinline__ float lut_value(int i) {
  if constexpr (C == 0) {
    return LutConst<F, 0>::value;
  } else {
    return select_if_eq<C>(i, LutConst<F, C>::value, lut_value<F, C - 1>(i));
  }
}

/// Whether element F decodes through the 256-pair code table (the 4-bit formats with a code table: nf4, mxfp4,
/// nvfp4; int4 decodes by arithmetic).
KT_HD constexpr bool table_format(Format f) {
  return format_element(f) == Format::nf4 || format_element(f) == Format::mxfp4 || format_element(f) == Format::nvfp4;
}

/// Fills s_lut (the 16 code values, lut_value) and, for the table formats, s_tab: entry b = the pair (value of nibble
/// b & 15, value of nibble b >> 4) in the dtype, Copies interleaved copies (entry b, copy c at s_tab[b * Copies + c]).
/// Called by all nthreads threads of the block; the caller's next barrier makes the tables visible. The table is
/// written as 16-byte chunks in address order, thread t taking chunks t, t + nthreads, ..: a warp stores 512
/// contiguous bytes, without bank conflicts (one entry per thread would put a store's 32 lanes Copies x 4 bytes apart,
/// in the same few banks).
template <DType DT, Format F, int Copies>
__device__ __forceinline__ void build_decode_tables(float* s_lut, unsigned* s_tab, int tid, int nthreads) {
  static_assert(Copies % 4 == 0, "table copies are written as uint4");
  if (tid < 16) s_lut[tid] = quant::lut_value<F>(tid);
  if (table_format(F)) {
    __syncthreads();  // s_lut
    constexpr int kChunksPerEntry = Copies / 4;
    for (int u = tid; u < 256 * kChunksPerEntry; u += nthreads) {
      const int b = u / kChunksPerEntry;  // 4 or 8 (16 or 32 copies): a shift
      const unsigned v = ptx::pack2<DT>(s_lut[b & 15], s_lut[b >> 4]);
      reinterpret_cast<uint4*>(s_tab)[u] = make_uint4(v, v, v, v);
    }
  }
}

/// This lane's copy of a 256-pair decode table of Copies interleaved copies (build_decode_tables), read through a
/// 32-bit shared-window address: entry b at base + 4 Copies b. With a generic pointer into s_tab the compiler rebuilt
/// the address at each lookup (an IMAD, a LEA and uniform operations on the CTA's shared-window base: 6 instructions
/// per decoded pair in the gemv loop instead of 4).
template <int Copies>
struct PairTable {
  unsigned base;  ///< shared-window address of entry 0 of this lane's copy
  /// s_tab: the table ([256][Copies] words); copy: lane % Copies.
  __device__ __forceinline__ PairTable(const unsigned* s_tab, int copy)
      : base(ptx::smem_u32(s_tab) + 4u * unsigned(copy)) {}
  /// Entry b (0..255): the pair (value of nibble b & 15, value of nibble b >> 4) in the dtype.
  __device__ __forceinline__ unsigned operator[](unsigned b) const {
    return ptx::lds_u32(base + b * unsigned(4 * Copies));
  }
};

}  // namespace quant
}  // namespace kt
