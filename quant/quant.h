// Host-side weight quantization for the quantized fused Q/K/V projection: quantizers, exact dequantization,
// layout validation, bit-exact element/scale codecs and importers of third-party 4-bit checkpoints.
//
// The packed layout and the value of every element are defined by templates/qkv_proj/quant_format.h (shared
// with the kernels); this library produces and checks that layout. Sources of the formats:
//   int8  : symmetric per-output-channel absmax (LLM.int8()-style row scale without outliers).
//   int4  : asymmetric min/max per group of 128 along K (GPTQ, Frantar et al. 2022 / AWQ, Lin et al. 2023;
//           rounding-to-nearest, i.e. the GPTQ quantizer grid without the Hessian update).
//   nf4   : NormalFloat4 (Dettmers et al., "QLoRA", 2023, section 2.2; bitsandbytes functional.py).
//   mxfp4 : OCP Microscaling Formats (MX) Specification v1.0 (2023): E2M1 elements, E8M0 scale per 32.
//   nvfp4 : NVIDIA NVFP4 (Blackwell; PTX ISA "e2m1" + "ue4m3" block scale per 16, fp32 tensor scale);
//           E4M3 = OCP 8-bit Floating Point Specification (OFP8) rev 1.0, E4M3 variant.
// Every quantizer rounds to nearest; ties go to even (std::nearbyint in the default rounding mode, as
// torch.round does) unless stated otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv_proj/quant_format.h"

namespace kt::quant {

/// A packed weight in kerntune's layout (quant_format.h). n = output features, k = input features.
///   data   : [n, k * format_bits(format) / 8] bytes. 4-bit: element k in byte k/2, LOW nibble for even k.
///            int8: two's complement bytes. fp16/bf16: little-endian 16-bit values. fp16_kb64 / bf16_kb64: the
///            same n x k 16-bit values K-blocked, [k/64][n][64] (element (r, c) at ((c/64) n + r) 64 + c % 64).
///            int8_kb64 / int4_kb128 / nf4_kb128 / mxfp4_kb128 / nvfp4_kb128: the row-major format's data bytes
///            K-blocked, [k bytes/64][n][64 bytes] (byte b of row r at ((b/64) n + r) 64 + b % 64); scales and zeros
///            as the row-major format's.
///   scales : [n, k / format_group(format)] entries of scale_bytes(format) bytes, little-endian, row-major:
///            int4 fp16, nf4 fp32 absmax, mxfp4 E8M0, nvfp4 E4M3; int8: [n] fp32 (one per row);
///            16-bit formats: empty.
///   zeros  : int4 only, [n, k / 128] bytes, each a zero point in 0..15; empty for every other format.
///   tensor_scale : nvfp4 per-tensor fp32 scale; 1 for every other format.
struct PackedWeight {
  Format format = Format::fp16;
  int n = 0, k = 0;
  std::vector<uint8_t> data;
  std::vector<uint8_t> scales;
  std::vector<uint8_t> zeros;
  float tensor_scale = 1.f;
};

/// True for the K-blocked packed formats (int8_kb64, int4_kb128, nf4_kb128, mxfp4_kb128, nvfp4_kb128; quant_format.h).
constexpr bool format_packed_k_blocked(Format f) { return format_k_blocked(f) && format_bits(f) < 16; }
/// K elements per 64-byte block of a K-blocked packed format (64 for int8_kb64, 128 for the 4-bit ones; k must be a
/// multiple of it), 0 for every other format.
constexpr int k_block_elems(Format f) { return format_packed_k_blocked(f) ? 512 / format_bits(f) : 0; }
/// The K-blocked packed layout's rule on k, in one place for every layer that checks it (quant, the C ABI, the
/// tuner's problems; each prefixes the format's name): "" when k tiles into f's 64-byte blocks (or f is not a
/// K-blocked packed format), else e.g. "k must be a multiple of 128 (K-blocked in 64-byte blocks; got 3648)".
inline std::string k_block_error(Format f, long long k) {
  const int e = k_block_elems(f);
  if (e == 0 || k % e == 0) return std::string();
  return "k must be a multiple of " + std::to_string(e) + " (K-blocked in 64-byte blocks; got " + std::to_string(k) +
         ")";
}
/// The K-blocked twin of a row-major packed format (int8 -> int8_kb64, int4 -> int4_kb128, ...); f itself otherwise.
constexpr Format packed_k_blocked_twin(Format f) {
  return f == Format::int8    ? Format::int8_kb64
         : f == Format::int4  ? Format::int4_kb128
         : f == Format::nf4   ? Format::nf4_kb128
         : f == Format::mxfp4 ? Format::mxfp4_kb128
         : f == Format::nvfp4 ? Format::nvfp4_kb128
                              : f;
}

/// Canonical name: "fp16", "bf16", "int8", "int4", "nf4", "mxfp4", "nvfp4", "fp16_kb64", "bf16_kb64", "int8_kb64",
/// "int4_kb128", "nf4_kb128", "mxfp4_kb128", "nvfp4_kb128" (shape files, variant names, DB).
/// Throws std::invalid_argument for a value outside the enum.
const char* format_name(Format f);

/// Inverse of format_name (exact, case-sensitive). Throws std::invalid_argument
/// "unknown weight format 'x' (expected fp16, bf16, int8, int4, nf4, mxfp4, nvfp4, fp16_kb64, ... or nvfp4_kb128)".
Format parse_format(const std::string& name);

/// Quantizes a float weight w [n, k] (row-major, n = output features, k = input features) with
/// round-to-nearest into kerntune's packed layout:
///   fp16 / bf16 : round-to-nearest-even conversion (throws if an element overflows fp16 to inf); fp16_kb64 /
///           bf16_kb64: the same values in the K-blocked layout. The K-blocked packed formats (int8_kb64, int4_kb128,
///           ...): the row-major format's quantization, its data bytes K-blocked (to_k_blocked); k must then also be
///           a multiple of 64 (int8) or 128 (4-bit).
///   int8  : s = absmax(row) / 127 (fp32), q = clamp(round(w / s), -127, 127); an all-zero row gets s = 0, q = 0.
///   int4  : per group of 128 along K: min/max widened to include 0 (as the GPTQ quantizer does, so 0 is exact
///           and the zero point never clamps), s = (max - min) / 15 rounded to fp16 (rounded up one fp16 step
///           when nearest rounding shrank it, so the grid covers [min, max]), z = clamp(round(-min / s), 0, 15),
///           q = clamp(round(w / s) + z, 0, 15). An all-zero group gets s = 1, z = 0, q = 0. Throws if s
///           overflows fp16 (group range above 15 * 65504).
///   nf4   : absmax per block of 64 along K (fp32), q = the code of kNf4 (KT_NF4_CODE) nearest to
///           float(w / absmax) (ties to the lower code); an all-zero block gets absmax 0 and the zero code 7.
///   mxfp4 : per block of 32: shared exponent e = floor(log2(absmax)) - 2 (OCP MX v1.0 section 6.3: the largest
///           E2M1 exponent is 2), clamped to [-127, 127], stored as the E8M0 byte e + 127 (an all-zero block
///           stores 127); elements = float_to_e2m1(w / 2^e) (round to nearest even, saturating to +-6).
///   nvfp4 : tensor_scale = absmax(all) / (448 * 6) (fp32; 1 when the whole tensor is zero), raised to 2^-126
///           (FLT_MIN) when smaller, so it is never a subnormal (validate refuses one; flush-to-zero arithmetic would
///           zero the weight): a tensor of absmax below 2688 * 2^-126 (about 3.2e-35) is quantized on that grid, and
///           its blocks of absmax below about 7e-41 (6 * 2^-136) store zero. Per block of 16:
///           scale = float_to_e4m3(absmax(block) / (6 * tensor_scale)); elements = float_to_e2m1(w / (scale *
///           tensor_scale)) (RNE, saturating); a block whose scale rounds to E4M3 zero stores zero elements.
/// Throws std::invalid_argument naming the problem: w null, n or k < 1, k not a multiple of 64 or of the
/// format's group, a non-finite element ("w[r, c] is not finite").
PackedWeight quantize(Format f, const float* w, int n, int k);

/// Exact values of the packed weight, out [n, k] row-major in float64: decode(q) * scale [* tensor_scale]
/// evaluated exactly (every product of the stored fp32/fp16/E4M3/E8M0/E2M1 factors is representable in
/// float64). This is the value the kernel decodes before it rounds to the fp16/bf16 MMA operand. Calls
/// validate() first (throws std::invalid_argument); out must hold n * k doubles.
void dequantize(const PackedWeight& pw, double* out);

/// Checks a PackedWeight against (format, n, k): n, k >= 1, k a multiple of 64 and of the group, the byte
/// sizes of data / scales / zeros, fp16 / bf16 data finite (no NaN or infinity, which quantize never writes),
/// zero points <= 15, scales not NaN/inf (fp32/fp16 scales finite, no E8M0 255, no E4M3 0x7F/0xFF), int8 and nf4
/// scales >= 0 (they are absmax values), tensor_scale finite and >= 2^-126 (a normal fp32) for nvfp4 and exactly 1
/// otherwise. Every weight quantize returns passes.
/// Throws std::invalid_argument whose message names the field, e.g.
/// "PackedWeight(int4, n=4, k=128): scales has 6 bytes, expected 8 ([n, k/128] x 2 bytes)".
void validate(const PackedWeight& pw);

/// The K-blocked twin of a row-major packed weight (int8 -> int8_kb64, int4 -> int4_kb128, nf4 -> nf4_kb128, mxfp4
/// -> mxfp4_kb128, nvfp4 -> nvfp4_kb128): the same scales, zeros and tensor_scale, data bytes rearranged as
/// [k bytes / 64][n][64 bytes] (quant_format.h). For weights imported in another layout (import_gptq, ...).
/// Throws std::invalid_argument if pw is invalid (validate), not a row-major packed format, or k * bits / 8 is not a
/// multiple of 64.
PackedWeight to_k_blocked(const PackedWeight& pw);
/// The inverse of to_k_blocked (a K-blocked packed weight back to its row-major format). Throws
/// std::invalid_argument if pw is invalid or not a K-blocked packed format.
PackedWeight from_k_blocked(const PackedWeight& pw);

// ---- Codecs (bit exact; OCP MX v1.0 for E2M1 / E8M0, OCP OFP8 rev 1.0 for E4M3) ---------------------------

/// E2M1 4-bit code -> float: bit 3 sign, bits 2..1 exponent (bias 1), bit 0 mantissa:
/// 0x0..0x7 = 0, 0.5, 1, 1.5, 2, 3, 4, 6; 0x8..0xF the negatives (0x8 = -0). Only the low 4 bits are read.
float e2m1_to_float(uint8_t code4);
/// float -> E2M1 code: round to nearest, ties to even code (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2,
/// 2.5 -> 2, 3.5 -> 4, 5 -> 4), magnitudes above 6 (and +-inf) saturate to +-6; the sign bit is kept (a
/// negative value that rounds to 0 gives 0x8). NaN (no E2M1 encoding) gives 0x0.
uint8_t float_to_e2m1(float x);

/// E4M3 (OCP OFP8 E4M3: bias 7, no infinities, S.1111.111 = NaN, max 448, min normal 2^-6, min subnormal
/// 2^-9) byte -> float. Exact.
float e4m3_to_float(uint8_t code);
/// float -> E4M3 byte: round to nearest, ties to even; magnitudes >= 448 (and +-inf) saturate to +-448
/// (0x7E / 0xFE) as PTX cvt.rn.satfinite does; NaN gives 0x7F (0xFF with the sign set); the sign of zero is kept.
uint8_t float_to_e4m3(float x);

/// E8M0 (OCP MX v1.0 section 5.4.1: unsigned exponent, bias 127) byte -> float: 2^(e - 127), 0 -> 2^-127,
/// 255 -> NaN.
float e8m0_to_float(uint8_t e);

// ---- NF4 double quantization ---------------------------------------------------------------------------

/// Double-quantized NF4 absmax (QLoRA section 2.2): offset = mean of all absmax values; per block of 256
/// values, block_scale = max |absmax - offset| / 127 (fp32) and q = clamp(round((absmax - offset) /
/// block_scale), -127, 127). This is a LINEAR symmetric int8 code; bitsandbytes quantizes the centred absmax
/// with its dynamic 8-bit map (create_dynamic_map) instead, so the bytes are not bnb-compatible. Storage:
/// 1 byte per value + 4 bytes per 256 values + 4 bytes, instead of 4 bytes per value.
struct Nf4DoubleQuant {
  std::vector<int8_t> q;           // one per absmax value
  std::vector<float> block_scale;  // one per block of 256 values (ceil(size / 256))
  float offset = 0;                // mean of the absmax values
};
/// Throws std::invalid_argument when a value is not finite.
Nf4DoubleQuant double_quantize_absmax(const std::vector<float>& absmax);
/// Expands back to fp32: float(q * block_scale + offset), |result - absmax| <= block_scale / 2 (+ fp32
/// rounding). Throws std::invalid_argument when block_scale has the wrong size for q.
std::vector<float> expand_absmax(const Nf4DoubleQuant& dq);

// ---- Importers ------------------------------------------------------------------------------------------

/// Zero-point convention of GPTQ qzeros. AutoGPTQ's original ("gptq", v1) checkpoints store z - 1 (and
/// add 1 back when dequantizing); "gptq_v2" checkpoints and AWQ-style int4 (after AWQ's own unpacking)
/// store z.
enum class GptqZeros { v1_minus_one, v2_exact };

/// GPTQ int4 (AutoGPTQ / Transformers QuantLinear layout, no act-order g_idx) -> PackedWeight int4:
///   qweight int32 [k/8, n]   : element (kk, nn) in word [kk/8, nn], bits 4*(kk%8) .. +3 (low nibble first).
///   qzeros  int32 [k/g, n/8] : zero of (group, nn) in word [group, nn/8], bits 4*(nn%8) .. +3; the stored
///                              value is z - 1 (mod 16) for GptqZeros::v1_minus_one (default), z for v2_exact.
///   scales  fp16 bits [k/g, n].
/// w = (q - z) * s. Requires group == 128 (the kernel's group), n % 8 == 0, k % 128 == 0, non-null pointers;
/// throws std::invalid_argument otherwise. (v1 stores z = 0 as 15; AutoGPTQ's kernels then use 16, the
/// known wrap-around bug; this importer recovers z = 0.)
PackedWeight import_gptq_int4(const int32_t* qweight, const int32_t* qzeros, const uint16_t* scales_fp16, int n, int k,
                              int group, GptqZeros zeros = GptqZeros::v1_minus_one);

/// AWQ int4 (AutoAWQ / llm-awq "GEMM" WQLinear layout) -> PackedWeight int4:
///   qweight int32 [k, n/8]   : element (kk, nn) in word [kk, nn/8] at nibble i where kAwqOrder[i] == nn % 8,
///                              kAwqOrder = {0, 2, 4, 6, 1, 3, 5, 7} (AWQ packs columns in this interleaved order).
///   qzeros  int32 [k/g, n/8] : zero of (group, nn), packed along N in the same interleaved order; exact z.
///   scales  fp16 bits [k/g, n].
/// w = (q - z) * s. Requires group == 128, n % 8 == 0, k % 128 == 0, non-null pointers; throws
/// std::invalid_argument otherwise.
PackedWeight import_awq_int4(const int32_t* qweight, const int32_t* qzeros, const uint16_t* scales_fp16, int n, int k,
                             int group);

/// bitsandbytes NF4 (Linear4bit, quant_type="nf4", blocksize 64) -> PackedWeight nf4:
///   packed uint8 [n*k/2] : the row-major [n, k] weight flattened, element 2j in the HIGH nibble of byte j,
///                          element 2j+1 in the low nibble (the opposite of kerntune's order).
///   absmax fp32 [n*k/64] : one per 64 consecutive flattened elements. Double-quantized checkpoints
///                          (compress_statistics=True) must have their absmax dequantized first.
/// Requires k % 64 == 0 and non-null pointers; throws std::invalid_argument otherwise.
PackedWeight import_bnb_nf4(const uint8_t* packed, const float* absmax, int n, int k);

}  // namespace kt::quant
