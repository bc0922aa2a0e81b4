// Per-element weight knowledge, one FormatTraits<F> specialization per element encoding of quant_format.h (fp16,
// bf16, int8, int4, nf4, mxfp4, nvfp4; a K-blocked format uses its element's traits, the layout lives in the host's
// tensor maps). Each specialization holds what a mainloop needs to know about its element: bits per element, elements
// per scale, scale entry bytes, zero points, the scale entry of a weight unit from global or shared memory as raw bits,
// their conversion to fp32, and the 4-bit code table. Mainloops call FormatTraits<F>::... and never branch on the
// format for these.
//
// Scale addressing (quant_format.h): scales [N, K / group] row-major, entry bytes kScaleBytes; int4's zero points
// [N, K / 128] bytes; int8 one fp32 scale per row. Raw bits of a 16-byte unit (32 4-bit / 16 int8 elements starting at
// k0): int8 the row's fp32 scale; int4 the fp16 scale | the zero point << 16; nf4 the fp32 absmax; mxfp4 the E8M0 byte;
// nvfp4 the unit's two E4M3 bytes (an aligned pair: k0 / 16 is even, K / 16 too). Raw bits of a 64-element K step
// (StepScaleBits, the warp-specialized mainloop's 4 k16 slices): int4 the fp16 scale and the zero point; nf4 the absmax
// bits; mxfp4 the two E8M0 bytes; nvfp4 the four E4M3 bytes (one per k16 slice).
// Compiled by NVRTC only. No standard headers.
#pragma once
#include "common/quant_decode.cuh"

namespace kt {
namespace quant {

/// Scales of one 16-byte unit: s0 for its first group, s1 for a second group inside the unit (nvfp4), z (int4).
struct UnitScales {
  float s0, s1, z;
};

/// Scale bits of one 64-element K step of one row, as stored (converted at use, so the load can be issued steps
/// ahead): s the scale entries, z the zero point (int4).
struct StepScaleBits {
  unsigned s, z;
};

template <Format F>
struct FormatTraits;

/// Members shared by every specialization; each specialization adds its scale addressing and conversion.
template <Format F, int Bits, int Group, int ScaleBytes>
struct FormatTraitsBase {
  // (Enumerators, not static data members: NVRTC emits every static constexpr member of the instantiated traits as a
  // global variable of the module.)
  enum : int {
    kBits = Bits,                ///< bits per stored element
    kGroup = Group,              ///< elements per scale along K (0: no scale, -1: one per row)
    kScaleBytes = ScaleBytes,    ///< bytes of one scale entry
    kUnitElems = 128 / Bits,     ///< elements per 16-byte unit
    kZeros = F == Format::int4,  ///< 1: zero points beside the scales (int4)
  };
  static_assert(Bits == format_bits(F) && Group == format_group(F) && ScaleBytes == scale_bytes(F),
                "FormatTraits disagree with quant_format.h");
};

/// 16-bit elements: no scale.
template <Format F>
struct FormatTraits16 : FormatTraitsBase<F, 16, 0, 0> {
  __device__ __forceinline__ static unsigned global_bits(const void*, const void*, int, int, int) { return 0u; }
  __device__ __forceinline__ static unsigned smem_bits(const unsigned char*, const unsigned char*, int) { return 0u; }
  __device__ __forceinline__ static UnitScales unit_scales(unsigned, float) { return UnitScales{1.f, 1.f, 0.f}; }
  __device__ __forceinline__ static StepScaleBits step_bits(const void*, const void*, int, int, int) {
    return StepScaleBits{0u, 0u};
  }
};
template <>
struct FormatTraits<Format::fp16> : FormatTraits16<Format::fp16> {};
template <>
struct FormatTraits<Format::bf16> : FormatTraits16<Format::bf16> {};

/// int8: symmetric, one fp32 scale per row.
template <>
struct FormatTraits<Format::int8> : FormatTraitsBase<Format::int8, 8, -1, 4> {
  __device__ __forceinline__ static unsigned global_bits(const void* scales, const void*, int, int row, int) {
    return __ldg(static_cast<const unsigned*>(scales) + row);
  }
  __device__ __forceinline__ static unsigned smem_bits(const unsigned char* sc, const unsigned char*, int) {
    return *reinterpret_cast<const unsigned*>(sc);
  }
  __device__ __forceinline__ static UnitScales unit_scales(unsigned b, float) {
    UnitScales s{1.f, 1.f, 0.f};
    s.s0 = __uint_as_float(b);
    return s;
  }
  /// (the warp-specialized mainloop applies the row scale in its epilogue)
  __device__ __forceinline__ static StepScaleBits step_bits(const void*, const void*, int, int, int) {
    return StepScaleBits{0u, 0u};
  }
};

/// int4: asymmetric, an fp16 scale and a zero-point byte per 128 elements.
template <>
struct FormatTraits<Format::int4> : FormatTraitsBase<Format::int4, 4, 128, 2> {
  __device__ __forceinline__ static unsigned global_bits(const void* scales, const void* zeros, int k_dim, int row,
                                                         int k0) {
    const long long g = (long long)row * (k_dim / 128) + k0 / 128;
    return unsigned(__ldg(static_cast<const unsigned short*>(scales) + g)) |
           unsigned(__ldg(static_cast<const unsigned char*>(zeros) + g)) << 16;
  }
  __device__ __forceinline__ static unsigned smem_bits(const unsigned char* sc, const unsigned char* zp, int k0) {
    return unsigned(reinterpret_cast<const unsigned short*>(sc)[k0 / 128]) | unsigned(zp[k0 / 128]) << 16;
  }
  __device__ __forceinline__ static UnitScales unit_scales(unsigned b, float) {
    UnitScales s{1.f, 1.f, 0.f};
    s.s0 = ptx::to_float<DType::f16>((unsigned short)(b & 0xffffu));
    s.z = float(b >> 16);
    return s;
  }
  /// kt: the 64-element K step (two steps per group).
  __device__ __forceinline__ static StepScaleBits step_bits(const void* scales, const void* zeros, int k_dim, int row,
                                                            int kt) {
    const long long K = k_dim;
    const long long g = row * (K / 128) + kt / 2;
    StepScaleBits r{0u, 0u};
    r.s = __ldg(static_cast<const unsigned short*>(scales) + g);
    r.z = __ldg(static_cast<const unsigned char*>(zeros) + g);
    return r;
  }
  /// The fp32 scale of k16 slice sl of a step (one group: every slice).
  __device__ __forceinline__ static float slice_scale(const StepScaleBits& r, int) {
    return ptx::to_float<DType::f16>((unsigned short)r.s);
  }
};

/// nf4: an fp32 absmax per 64 elements.
template <>
struct FormatTraits<Format::nf4> : FormatTraitsBase<Format::nf4, 4, 64, 4> {
  __device__ __forceinline__ static unsigned global_bits(const void* scales, const void*, int k_dim, int row, int k0) {
    return __ldg(static_cast<const unsigned*>(scales) + (long long)row * (k_dim / 64) + k0 / 64);
  }
  __device__ __forceinline__ static unsigned smem_bits(const unsigned char* sc, const unsigned char*, int k0) {
    return reinterpret_cast<const unsigned*>(sc)[k0 / 64];
  }
  __device__ __forceinline__ static UnitScales unit_scales(unsigned b, float) {
    UnitScales s{1.f, 1.f, 0.f};
    s.s0 = __uint_as_float(b);
    return s;
  }
  __device__ __forceinline__ static StepScaleBits step_bits(const void* scales, const void*, int k_dim, int row,
                                                            int kt) {
    const long long K = k_dim;
    StepScaleBits r{0u, 0u};
    r.s = __ldg(static_cast<const unsigned*>(scales) + row * (K / 64) + kt);
    return r;
  }
  __device__ __forceinline__ static float slice_scale(const StepScaleBits& r, int) { return __uint_as_float(r.s); }
  /// The fp32 scales of the step's four k16 slices.
  __device__ __forceinline__ static void step_scales(const StepScaleBits& r, float, float (&s)[4]) {
#pragma unroll
    for (int sl = 0; sl < 4; ++sl) s[sl] = slice_scale(r, sl);
  }
};

/// mxfp4: an E8M0 byte per 32 elements.
template <>
struct FormatTraits<Format::mxfp4> : FormatTraitsBase<Format::mxfp4, 4, 32, 1> {
  __device__ __forceinline__ static unsigned global_bits(const void* scales, const void*, int k_dim, int row, int k0) {
    return __ldg(static_cast<const unsigned char*>(scales) + (long long)row * (k_dim / 32) + k0 / 32);
  }
  __device__ __forceinline__ static unsigned smem_bits(const unsigned char* sc, const unsigned char*, int k0) {
    return sc[k0 / 32];
  }
  __device__ __forceinline__ static UnitScales unit_scales(unsigned b, float) {
    UnitScales s{1.f, 1.f, 0.f};
    s.s0 = e8m0_to_float(b);
    return s;
  }
  /// The step's two E8M0 bytes (the row stride K / 32 bytes is even: K % 64 == 0).
  __device__ __forceinline__ static StepScaleBits step_bits(const void* scales, const void*, int k_dim, int row,
                                                            int kt) {
    const long long K = k_dim;
    StepScaleBits r{0u, 0u};
    r.s = __ldg(
        reinterpret_cast<const unsigned short*>(static_cast<const unsigned char*>(scales) + row * (K / 32) + 2 * kt));
    return r;
  }
  __device__ __forceinline__ static float slice_scale(const StepScaleBits& r, int sl) {
    return e8m0_to_float((r.s >> (8 * (sl / 2))) & 255u);
  }
  __device__ __forceinline__ static void step_scales(const StepScaleBits& r, float, float (&s)[4]) {
#pragma unroll
    for (int sl = 0; sl < 4; ++sl) s[sl] = slice_scale(r, sl);
  }
};

/// nvfp4: an E4M3 byte per 16 elements, times the fp32 per-tensor scale.
template <>
struct FormatTraits<Format::nvfp4> : FormatTraitsBase<Format::nvfp4, 4, 16, 1> {
  __device__ __forceinline__ static unsigned global_bits(const void* scales, const void*, int k_dim, int row, int k0) {
    return __ldg(reinterpret_cast<const unsigned short*>(static_cast<const unsigned char*>(scales) +
                                                         (long long)row * (k_dim / 16) + k0 / 16));
  }
  __device__ __forceinline__ static unsigned smem_bits(const unsigned char* sc, const unsigned char*, int k0) {
    return *reinterpret_cast<const unsigned short*>(sc + k0 / 16);
  }
  __device__ __forceinline__ static UnitScales unit_scales(unsigned b, float tensor_scale) {
    UnitScales s{1.f, 1.f, 0.f};
    e4m3x2_to_float(b, tensor_scale, s.s0, s.s1);
    return s;
  }
  /// The step's four E4M3 bytes (the row stride K / 16 bytes is a multiple of 4).
  __device__ __forceinline__ static StepScaleBits step_bits(const void* scales, const void*, int k_dim, int row,
                                                            int kt) {
    const long long K = k_dim;
    StepScaleBits r{0u, 0u};
    r.s = __ldg(reinterpret_cast<const unsigned*>(static_cast<const unsigned char*>(scales) + row * (K / 16) + 4 * kt));
    return r;
  }
  /// The four slices' scales times the tensor scale: two exact pair conversions.
  __device__ __forceinline__ static void step_scales(const StepScaleBits& r, float tensor_scale, float (&s)[4]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) e4m3x2_to_float(r.s >> (16 * h), tensor_scale, s[2 * h], s[2 * h + 1]);
  }
};

}  // namespace quant
}  // namespace kt
