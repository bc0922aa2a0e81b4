// The gemv mainloop's packed 16-bit-pair decode, one GemvElement<DT, F> specialization per weight element (16-bit,
// int8, int4, and the table formats nf4 / mxfp4 / nvfp4): where the element's scale is applied (kScale), whether
// its decoded pairs need X permuted (kPermutedX), the per-unit operand constants (unit_scales2) and the decode of one
// chunk of a 16-byte unit (decode_chunk2). The wgmma mainloops use the same routines. Compiled by NVRTC only.
//
// decode_chunk computes every element in fp32 (about 8 instructions per element with the table load and the pack),
// which made the gemv kernel instruction-bound. The routines below produce the mma operand pairs directly in fp16x2 /
// bf16x2 arithmetic, and where the format allows, leave the scale out of the operand and apply it to the fp32
// accumulator instead (gemv_scale_mode):
//  - int4 (group 128 = one warp step along K): the operand is n - z, an exact small integer; the step's mma partial sum
//    is multiplied by the group scale in fp32. fp16: (w & 0x000F000F) | 0x6400 6400 is the pair (1024 + n_j,
//    1024 + n_j+4), exact; the odd nibbles are taken in place as 1024 + 16 n and scaled by 1/16 in the same fma that
//    subtracts 64 + z. bf16 (8 significant bits) uses 0x4300 = 128.0 with a shift per nibble. The natural pairs are
//    (n_j, n_j+4), so the X operand is permuted to match (prmt), see gemv_permuted_x.
//  - int8 (one scale per row): the operand is the exact integer b; the row scale multiplies the finished sum in the
//    epilogue. fp16: (b ^ 0x80) placed under 0x64 by prmt is 1024 + 128 + b, minus 1152. bf16: 0x43 | (b & 0x7f) is
//    128 + (b & 0x7f) and 0x43 | (b & 0x80) is 128 or 256 (the sign's weight); their difference is b.
//  - nf4, mxfp4, nvfp4 (groups of 64 / 32 / 16 along K, narrower than a warp step): one shared-memory table of 256
//    pairs indexed by a packed byte (two elements), holding the code values (NF4 code rounded to the dtype; E2M1 values
//    are exact in both) in kGemvTableCopies interleaved copies (copy = lane % copies) so that lanes rarely meet in a
//    bank; then times the scale rounded to the dtype. fp16 cannot hold every scale (mxfp4 E8M0 spans 2^-127..2^127,
//    nf4 / nvfp4 scales are fp32): a unit whose scale is outside fp16's normal range [2^-14, 65504] is decoded by
//    decode_chunk (fp32), so results never depend on an overflowed or flushed scale.
#pragma once
#include "qkv_proj/qkv_proj.cuh"

namespace kt {
namespace qkv {

/// Where the gemv mainloop applies a format's scale: none (16-bit), in the decoded operand (table formats), to each
/// warp step's partial sum (int4), or to the finished row in the epilogue (int8).
enum GemvScaleMode { kScaleNone, kScaleOperand, kScaleStep, kScaleRow };
KT_HD constexpr GemvScaleMode gemv_scale_mode(quant::Format f) {
  return quant::format_bits(f) == 16 ? kScaleNone
         : f == quant::Format::int4  ? kScaleStep
         : f == quant::Format::int8  ? kScaleRow
                                     : kScaleOperand;
}
/// Sets every element of a [A][R][NT][4] accumulator array to 0 (compile-time extents, fully unrolled).
template <int A, int R, int NT>
__device__ __forceinline__ void zero_fill(float (&acc)[A][R][NT][4]) {
#pragma unroll
  for (int a = 0; a < A; ++a)
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[a][r][t][e] = 0.f;
}

/// Whether format f decodes through the 256-pair table.
KT_HD constexpr bool gemv_uses_table(quant::Format f) { return format_uses_table(f); }
/// Whether format f's decoded pairs are (element j, element j + 4) of each 8-element group, with X permuted to match.
KT_HD constexpr bool gemv_permuted_x(quant::Format f) { return f == quant::Format::int4; }

/// (a & b) | c in one LOP3 (the compiler splits two immediates into two instructions).
__device__ __forceinline__ unsigned and_or(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

/// int8: the operand pair (b0, b1) of two bytes of x, exact integers in the dtype; sel = 0x4140 takes bytes (0, 1), 0x4342
/// bytes (2, 3), each placed under a constant high byte (see the int8 note above).
template <DType DT>
__device__ __forceinline__ unsigned int8_pair(unsigned x, unsigned sel) {
  constexpr unsigned kOne = DT == DType::f16 ? 0x3C003C00u : 0x3F803F80u;
  if (DT == DType::f16) {
    const unsigned t = ptx::prmt(x ^ 0x80808080u, 0x64646464u, sel);  // 1024 + 128 + b
    return ptx::fma2<DT>(t, kOne, 0xE480E480u);                       // - 1152
  }
  const unsigned t = ptx::prmt(x, 0x43434343u, sel);
  return ptx::fma2<DT>(t & 0xFF7FFF7Fu, kOne, and_or(t, 0x00800080u, 0xC300C300u));  // (128 + low 7) - (128 | 256)
}

/// int4: the operand pair ((n_lo - z) s, (n_hi - z) s) of the byte of x that sel picks (sel = i | i << 4 | (4 + i) << 8 |
/// (4 + i) << 12 for byte i: its low nibble is the even element, its high nibble the odd one). The nibbles become
/// magic + n (prmt + lop3; magic 1024 for fp16, 128 for bf16: ulp 1, exact), zz = -(magic + z) in both halves is
/// subtracted exactly, then one rounding by the scale sc (both halves).
template <DType DT>
__device__ __forceinline__ unsigned int4_pair(unsigned x, unsigned sel, unsigned zz, unsigned sc) {
  constexpr unsigned kOne = DT == DType::f16 ? 0x3C003C00u : 0x3F803F80u;
  constexpr unsigned kMagic = DT == DType::f16 ? 0x64006400u : 0x43004300u;
  return ptx::fma2<DT>(ptx::fma2<DT>(and_or(ptx::prmt(x, x >> 4, sel), 0x000F000Fu, kMagic), kOne, zz), sc,
                       0x80008000u);
}

using quant::build_decode_tables;
using quant::PairTable;

/// Per-unit operand constants: table formats: the scale(s) in the dtype (both halves equal; s1: nvfp4's second group)
/// and ok = false when the unit must take the fp32 path; int4: the subtrahends for the even / odd nibbles (za, zb).
struct UnitScales2 {
  unsigned s0, s1, za, zb;
  bool ok;
};

template <DType DT>
__device__ __forceinline__ bool dtype_holds_scale(float s) {
  if (DT == DType::bf16) return true;  // bf16 has fp32's exponent range
  const float a = fabsf(s);
  return a == 0.f || (a >= 6.103515625e-05f && a <= 65504.f);  // NaN: false
}

/// GemvElement<DT, F>: the packed-pair decode of weight element F for operand dtype DT, one specialization per
/// element (16-bit, int8, int4, nf4 / mxfp4 / nvfp4). Each has
///   kScale, kPermutedX             gemv_scale_mode(F), gemv_permuted_x(F)
///   unit_scales2(s)                the unit's operand constants (UnitScales2) from its fp32 scales
///   decode_chunk2(u, s, tab, c, o) chunk c of the 16-byte unit u into four operand pairs (see decode_chunk2)
template <DType DT, quant::Format F>
struct GemvElement;

/// Members every specialization shares.
template <quant::Format F>
struct GemvElementBase {
  // (Enumerators, not static data members: NVRTC emits every static constexpr member as a global of the module.)
  enum : int { kScale = gemv_scale_mode(F), kPermutedX = gemv_permuted_x(F) };
};

/// 16-bit elements: the unit's words are the operand pairs.
template <DType DT, quant::Format F>
struct GemvElement16 : GemvElementBase<F> {
  __device__ __forceinline__ static UnitScales2 unit_scales2(const UnitScales&) {
    return UnitScales2{0u, 0u, 0u, 0u, true};
  }
  __device__ __forceinline__ static void decode_chunk2(const uint4& u, const UnitScales2&,
                                                       const PairTable<kGemvTableCopies>&, int, unsigned (&out)[4]) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = w[i];
  }
};
template <DType DT>
struct GemvElement<DT, quant::Format::fp16> : GemvElement16<DT, quant::Format::fp16> {};
template <DType DT>
struct GemvElement<DT, quant::Format::bf16> : GemvElement16<DT, quant::Format::bf16> {};

/// int8: the exact integers b (int8_pair); the row scale is applied in the epilogue (kScaleRow).
template <DType DT>
struct GemvElement<DT, quant::Format::int8> : GemvElementBase<quant::Format::int8> {
  __device__ __forceinline__ static UnitScales2 unit_scales2(const UnitScales&) {
    return UnitScales2{0u, 0u, 0u, 0u, true};
  }
  __device__ __forceinline__ static void decode_chunk2(const uint4& u, const UnitScales2&,
                                                       const PairTable<kGemvTableCopies>&, int c, unsigned (&out)[4]) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const unsigned x = w[2 * c + i];
#pragma unroll
      for (int h = 0; h < 2; ++h) out[2 * i + h] = int8_pair<DT>(x, h == 0 ? 0x4140u : 0x4342u);
    }
  }
};

/// int4: n - z, exact (the magic-number pairs of the note above); the group scale is applied to each warp step's
/// partial sums (kScaleStep). Pairs (element j, element j + 4): X is permuted to match (kPermutedX).
template <DType DT>
struct GemvElement<DT, quant::Format::int4> : GemvElementBase<quant::Format::int4> {
  /// za, zb: the subtrahends of the even / odd nibbles (z is an integer 0..15: every subtrahend is exact).
  __device__ __forceinline__ static UnitScales2 unit_scales2(const UnitScales& s) {
    UnitScales2 o{0u, 0u, 0u, 0u, true};
    o.za = DT == DType::f16 ? ptx::pack2<DT>(-(1024.f + s.z), -(1024.f + s.z))
                            : ptx::pack2<DT>(-(128.f + s.z), -(128.f + s.z));
    o.zb = DT == DType::f16 ? ptx::pack2<DT>(-(64.f + s.z), -(64.f + s.z)) : o.za;
    return o;
  }
  __device__ __forceinline__ static void decode_chunk2(const uint4& u, const UnitScales2& s,
                                                       const PairTable<kGemvTableCopies>&, int c, unsigned (&out)[4]) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
    constexpr unsigned kOne = DT == DType::f16 ? 0x3C003C00u : 0x3F803F80u;
    const unsigned x = w[c];
    if (DT == DType::f16) {
      const unsigned magic = 0x64006400u, sixteenth = 0x2C002C00u;  // 1024.0, 0.0625
      const unsigned x8 = x >> 8;
      out[0] = ptx::fma2<DT>(and_or(x, 0x000F000Fu, magic), kOne, s.za);
      out[1] = ptx::fma2<DT>(and_or(x, 0x00F000F0u, magic), sixteenth, s.zb);
      out[2] = ptx::fma2<DT>(and_or(x8, 0x000F000Fu, magic), kOne, s.za);
      out[3] = ptx::fma2<DT>(and_or(x8, 0x00F000F0u, magic), sixteenth, s.zb);
    } else {
      const unsigned magic = 0x43004300u;  // 128.0
#pragma unroll
      for (int j = 0; j < 4; ++j) out[j] = ptx::fma2<DT>(and_or(x >> (4 * j), 0x000F000Fu, magic), kOne, s.za);
    }
  }
};

/// nf4, mxfp4, nvfp4: the 256-pair table (tab, this lane's copy) times the scale in the dtype (kScaleOperand). A unit
/// holds two groups where the group is shorter than the unit (nvfp4: elements 16..31, chunks 2 and 3, take s1).
template <DType DT, quant::Format F>
struct GemvElementTable : GemvElementBase<F> {
  static_assert(gemv_uses_table(F), "GemvElementTable: a format decoded through the 256-pair table");
  enum : int { kTwoGroups = quant::FormatTraits<F>::kGroup < quant::FormatTraits<F>::kUnitElems };
  /// s0, s1: the scales in the dtype; ok: the dtype holds them (else the unit takes the fp32 decode).
  __device__ __forceinline__ static UnitScales2 unit_scales2(const UnitScales& s) {
    UnitScales2 o{0u, 0u, 0u, 0u, true};
    o.s0 = ptx::pack2<DT>(s.s0, s.s0);
    o.s1 = kTwoGroups ? ptx::pack2<DT>(s.s1, s.s1) : o.s0;
    o.ok = dtype_holds_scale<DT>(s.s0) && (!kTwoGroups || dtype_holds_scale<DT>(s.s1));
    return o;
  }
  __device__ __forceinline__ static void decode_chunk2(const uint4& u, const UnitScales2& s,
                                                       const PairTable<kGemvTableCopies>& tab, int c,
                                                       unsigned (&out)[4]) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
    constexpr unsigned kNegZero = 0x80008000u;
    const unsigned sc = (kTwoGroups && c >= 2) ? s.s1 : s.s0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const unsigned b = ptx::prmt(w[c], 0u, 0x4440u | unsigned(j));  // byte j, zero-extended
      out[j] = ptx::fma2<DT>(tab[b], sc, kNegZero);
    }
  }
};
template <DType DT>
struct GemvElement<DT, quant::Format::nf4> : GemvElementTable<DT, quant::Format::nf4> {};
template <DType DT>
struct GemvElement<DT, quant::Format::mxfp4> : GemvElementTable<DT, quant::Format::mxfp4> {};
template <DType DT>
struct GemvElement<DT, quant::Format::nvfp4> : GemvElementTable<DT, quant::Format::nvfp4> {};

/// The unit's operand constants (GemvElement<DT, F>::unit_scales2).
template <DType DT, quant::Format F>
__device__ __forceinline__ UnitScales2 unit_scales2(const UnitScales& s) {
  return GemvElement<DT, F>::unit_scales2(s);
}

/// Decodes chunk c of one 16-byte unit (same chunks as decode_chunk) into four operand pairs with the routines
/// described above: int4 gives n - z, int8 gives b (their scales are applied to the accumulator, gemv_scale_mode), the
/// table formats give value x scale. Natural formats: out[i] = elements (2i, 2i + 1) of the chunk, as decode_chunk;
/// gemv_permuted_x formats: out[i] = elements (i, i + 4) of the chunk. tab: this lane's copy of the 256-pair table;
/// unused by int4 / int8. 16-bit formats: copied.
template <DType DT, quant::Format F>
__device__ __forceinline__ void decode_chunk2(const uint4& u, const UnitScales2& s,
                                              const PairTable<kGemvTableCopies>& tab, int c, unsigned (&out)[4]) {
  GemvElement<DT, F>::decode_chunk2(u, s, tab, c, out);
}

}  // namespace qkv
}  // namespace kt
