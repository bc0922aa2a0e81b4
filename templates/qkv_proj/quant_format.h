// Weight formats of the quantized fused Q/K/V projection: the packed layout kerntune's kernels read.
// Shared by host (quant/, generator) and device (NVRTC). No standard headers.
//
// W is [N, K] row-major in meaning: N = output features ((Hq + 2 Hkv) * head_dim), K = input features
// (hidden size); Y = X W^T. Every format stores, for each row n:
//   data   [N, K * bits / 8] bytes, elements in K order. 4-bit: element k in byte k / 2, the LOW nibble
//          for even k and the HIGH nibble for odd k. 8-bit: one two's-complement byte per element.
//          16-bit: little-endian fp16 / bf16.
//   fp16_kb64 / bf16_kb64 (K-blocked 16-bit): the same values, stored as [K / 64][N][64]: element (n, k) at
//          element offset ((k / 64) N + n) 64 + k % 64. Each 64-wide K slice of all N rows is one contiguous
//          N x 128-byte block, so a TMA box of a K step over consecutive rows is one contiguous run (kerntune's
//          own layout, for the TMA mainloops wgmma_ws and wgmma_pairs; the cp.async / register kernels read the
//          row-major formats only). Same bytes in all, N x K x 2. Measured on the H100: the
//          weight streams faster than row-major in CUDA graphs and after a clean L2 flush at every M; after a flush
//          that leaves the L2 dirty (do_bench's) it is 2-3% slower from M = 256.
//   int8_kb64 / int4_kb128 / nf4_kb128 / mxfp4_kb128 / nvfp4_kb128 (K-blocked packed): the same bytes as the
//          row-major format, stored as [K bytes / 64][N][64 bytes]: byte b of row n (b in [0, K * bits / 8)) at
//          ((b / 64) N + n) 64 + b % 64, i.e. blocks of 64 elements (8-bit) or 128 elements (4-bit) along K. Scales
//          and zero points stay row-major. A TMA box of a 64-byte K step over 8 consecutive rows is one contiguous
//          512-byte run instead of 8 pieces of 64 bytes K * bits / 8 apart (kerntune's own layout, read by gemv stages
//          0 (by address), 2 and 3 and wgmma_ws). Measured on the H100 with int4: about 0.9
//          us faster per M = 1 call after do_bench's dirty L2 flush, 0.3 us in CUDA graphs, unchanged at M >= 1024.
//   scales [N, K / group] of the format's scale encoding, row-major (int8: [N], one per row).
//   zeros  [N, K / group] bytes, int4 only (zero point 0..15, one per byte).
// Row strides are the natural ones (K * bits / 8 bytes, K / group scales). K must be a multiple of the
// group size (and of 64, the kernels' k step); pointers must be 16-byte aligned.
//
// Element value w[n, k] = decode(q) * scale(group) per format:
//   fp16 / bf16 (and their K-blocked twins) : w = the stored value (no scale).
//   int8  : symmetric per output channel, w = q * s, q in [-127, 127], s fp32 per row.
//   int4  : asymmetric, group 128 along K (GPTQ/AWQ style), w = (q - z) * s, q, z in [0, 15], s fp16.
//   nf4   : NormalFloat4 (Dettmers et al., "QLoRA", 2023; bitsandbytes), w = NF4[q] * absmax, absmax fp32 per
//           block of 64 along K. NF4 code table: kNf4Code below (bitsandbytes' values, in code order).
//   mxfp4 : OCP Microscaling Formats (MX) v1.0: E2M1 elements (sign, 2-bit exponent bias 1, 1-bit mantissa:
//           +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}), one E8M0 scale per 32 elements: 2^(e - 127), e = 255 is NaN.
//   nvfp4 : NVIDIA NVFP4: E2M1 elements, one FP8 E4M3 scale (bias 7, max 448, no inf) per 16 elements, and
//           one fp32 per-tensor scale: w = e2m1 * e4m3 * tensor_scale. tensor_scale is a normal fp32 (>= 2^-126):
//           quantize raises a smaller absmax / 2688 to 2^-126 and validate refuses a subnormal one.
#pragma once
#include "common/kt_types.h"

namespace kt {
namespace quant {

enum class Format : int {
  fp16 = 0,
  bf16 = 1,
  int8 = 2,
  int4 = 3,
  nf4 = 4,
  mxfp4 = 5,
  nvfp4 = 6,
  fp16_kb64 = 7,
  bf16_kb64 = 8,
  int8_kb64 = 9,
  int4_kb128 = 10,
  nf4_kb128 = 11,
  mxfp4_kb128 = 12,
  nvfp4_kb128 = 13
};
/// Number of Format values (0 .. kFormatCount - 1).
constexpr int kFormatCount = 14;

/// True for the K-blocked layouts: 16-bit [K / 64][N][64] and packed [K bytes / 64][N][64 bytes].
KT_HD constexpr bool format_k_blocked(Format f) { return int(f) >= int(Format::fp16_kb64); }
/// The element encoding of f: the row-major format whose bytes a K-blocked format rearranges (fp16 for fp16_kb64,
/// int4 for int4_kb128, ...), f itself otherwise. The kernels are instantiated with it (the layout lives only in the
/// host's tensor maps, runtime/qkv.cpp).
KT_HD constexpr Format format_element(Format f) {
  return f == Format::fp16_kb64     ? Format::fp16
         : f == Format::bf16_kb64   ? Format::bf16
         : f == Format::int8_kb64   ? Format::int8
         : f == Format::int4_kb128  ? Format::int4
         : f == Format::nf4_kb128   ? Format::nf4
         : f == Format::mxfp4_kb128 ? Format::mxfp4
         : f == Format::nvfp4_kb128 ? Format::nvfp4
                                    : f;
}

/// A weight format is an element encoding and a layout. Format names the pairs kerntune supports (the public
/// identifiers: the C ABI's KT_WEIGHT_*, Python's "int4_kb128", the database keys); Element and Layout are its two axes.
/// Element's values are those of the row-major Format of the same encoding (the kernels' template argument).
enum class Element : int { fp16 = 0, bf16 = 1, int8 = 2, int4 = 3, nf4 = 4, mxfp4 = 5, nvfp4 = 6 };
/// row_major: [N][K] elements; k_blocked: [K / 64][N][64] (16-bit) or [K bytes / 64][N][64 bytes] (packed).
enum class Layout : int { row_major = 0, k_blocked = 1 };
struct WeightFormat {
  Element element;
  Layout layout;
};
KT_HD constexpr Element element_of(Format f) { return Element(int(format_element(f))); }
KT_HD constexpr Layout layout_of(Format f) { return format_k_blocked(f) ? Layout::k_blocked : Layout::row_major; }
KT_HD constexpr WeightFormat weight_format(Format f) { return WeightFormat{element_of(f), layout_of(f)}; }
/// The Format of (element, layout): every element has both layouts (16-bit elements block K by 64 elements, int8 by
/// 64 bytes, 4-bit by 128 elements).
KT_HD constexpr Format format_of(WeightFormat w) {
  return w.layout == Layout::row_major ? Format(int(w.element))
         : w.element == Element::fp16  ? Format::fp16_kb64
         : w.element == Element::bf16  ? Format::bf16_kb64
         : w.element == Element::int8  ? Format::int8_kb64
         : w.element == Element::int4  ? Format::int4_kb128
         : w.element == Element::nf4   ? Format::nf4_kb128
         : w.element == Element::mxfp4 ? Format::mxfp4_kb128
                                       : Format::nvfp4_kb128;
}

/// Bits per stored element.
KT_HD constexpr int format_bits(Format f) {
  return format_element(f) == Format::fp16 || format_element(f) == Format::bf16 ? 16
         : format_element(f) == Format::int8                                    ? 8
                                                                                : 4;
}

/// Elements per scale along K (0: no scale; -1: one scale per row).
KT_HD constexpr int format_group(Format f) {
  return format_element(f) != f ? format_group(format_element(f))
         : f == Format::int8    ? -1
         : f == Format::int4    ? 128
         : f == Format::nf4     ? 64
         : f == Format::mxfp4   ? 32
         : f == Format::nvfp4   ? 16
                                : 0;
}

/// Bytes of one scale entry.
KT_HD constexpr int scale_bytes(Format f) {
  return format_element(f) != f                     ? scale_bytes(format_element(f))
         : f == Format::int8 || f == Format::nf4    ? 4
         : f == Format::int4                        ? 2
         : f == Format::mxfp4 || f == Format::nvfp4 ? 1
                                                    : 0;
}

/// The 16 NF4 code values, indexed by the 4-bit code (bitsandbytes functional.py, "NF4" data type,
/// QLoRA appendix E): quantiles of N(0, 1) normalized to [-1, 1], with an exact zero at code 7.
#define KT_NF4_CODE                                                                                                 \
  {                                                                                                                 \
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,                \
        -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,             \
        0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, \
        1.0f                                                                                                        \
  }

/// KT_NF4_CODE[i] as a switch: device code indexes it with a run-time i without a local-memory copy of the table.
/// tests/quant checks it against KT_NF4_CODE entry by entry.
KT_HD constexpr float nf4_code(int i) {
  switch (i) {
    case 0: return -1.0f;
    case 1: return -0.6961928009986877f;
    case 2: return -0.5250730514526367f;
    case 3: return -0.39491748809814453f;
    case 4: return -0.28444138169288635f;
    case 5: return -0.18477343022823334f;
    case 6: return -0.09105003625154495f;
    case 7: return 0.0f;
    case 8: return 0.07958029955625534f;
    case 9: return 0.16093020141124725f;
    case 10: return 0.24611230194568634f;
    case 11: return 0.33791524171829224f;
    case 12: return 0.44070982933044434f;
    case 13: return 0.5626170039176941f;
    case 14: return 0.7229568362236023f;
    default: return 1.0f;
  }
}

/// E2M1 magnitude of the low 3 bits (exponent 2 bits, mantissa 1 bit); bit 3 is the sign.
KT_HD constexpr float e2m1_magnitude(int bits3) {
  return bits3 == 0   ? 0.f
         : bits3 == 1 ? 0.5f
         : bits3 == 2 ? 1.f
         : bits3 == 3 ? 1.5f
         : bits3 == 4 ? 2.f
         : bits3 == 5 ? 3.f
         : bits3 == 6 ? 4.f
                      : 6.f;
}

}  // namespace quant
}  // namespace kt
