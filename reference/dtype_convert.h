// Host-side conversions between float32 and the 16-bit activation dtypes (fp16, bf16), bit-exact.
//
// fp16 = IEEE 754-2008 binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; max finite 65504,
//        smallest subnormal 2^-24.
// bf16 = bfloat16: the upper 16 bits of an IEEE binary32 (1 sign, 8 exponent, 7 mantissa bits).
// Float -> 16-bit conversions round to nearest, ties to even (IEEE 754 default rounding), as
// __float2half_rn / __float2bfloat16_rn do on the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "templates/common/kt_types.h"

namespace kt {

/// float32 -> IEEE binary16 bits. Round-to-nearest-even; values whose rounded magnitude exceeds 65504
/// become +-inf (0x7C00 / 0xFC00); results below 2^-14 become subnormals (or +-0); infinities stay
/// infinities; NaN becomes a quiet NaN (mantissa MSB set) keeping the sign and the top payload bits.
uint16_t float_to_half(float f);

/// IEEE binary16 bits -> float32. Exact (every binary16 value is representable in binary32),
/// subnormals included; NaN stays NaN.
float half_to_float(uint16_t h);

/// float32 -> bfloat16 bits. Round-to-nearest-even on the low 16 bits of the binary32 pattern
/// (overflow rounds to +-inf as in IEEE); NaN becomes a quiet NaN keeping the sign.
uint16_t float_to_bf16(float f);

/// bfloat16 bits -> float32. Exact (shift left by 16 bits).
float bf16_to_float(uint16_t h);

/// float32 -> bits of `dtype` (float_to_half or float_to_bf16).
uint16_t float_to_dtype(DType dtype, float f);

/// Bits of `dtype` -> float32 (half_to_float or bf16_to_float). Exact.
float dtype_to_float(DType dtype, uint16_t bits);

/// Canonical name of a dtype: "fp16" or "bf16" (the spelling used in shape files, variant names and
/// the database).
const char* dtype_name(DType dtype);

/// Parses a dtype name. Accepts "fp16", "f16", "float16", "half" -> DType::f16 and "bf16",
/// "bfloat16" -> DType::bf16 (case-sensitive).
/// Throws std::invalid_argument("unknown dtype 'x' (expected fp16 or bf16)") for anything else.
DType parse_dtype(const std::string& name);

/// Fills dst[0..n) with samples of N(0, stddev^2) (std::normal_distribution<float> over blocks of 65536 elements,
/// block j drawn by a std::mt19937_64 seeded with splitmix64 of (seed, j), the blocks spread over the machine's cores)
/// rounded to `dtype` (round-to-nearest-even). Deterministic for a given (dtype, n, seed, stddev), whatever the
/// number of cores. Every element is nonzero: a sample that rounds to +-0 is redrawn
/// (up to 64 times; then the smallest subnormal with the sample's sign is stored, which only happens
/// when stddev is close to the dtype's smallest subnormal, 2^-24 for fp16). Throws std::invalid_argument when stddev is not finite and > 0, or when dst is
/// null and n > 0.
void fill_random(DType dtype, uint16_t* dst, size_t n, uint64_t seed, float stddev = 1.0f);

/// Fills dst[0..n) with float samples of N(0, stddev^2), drawn as fill_random draws them (blocks, every core), no
/// rounding and no redraw of zeros. Throws std::invalid_argument when stddev is not finite and > 0, or when dst is
/// null and n > 0.
void fill_normal(float* dst, size_t n, uint64_t seed, float stddev = 1.0f);

/// Whether a value's bits are finite in `dtype` (not Inf or NaN): an exponent field below all ones (fp16 5 bits,
/// bf16 8 bits; IEEE 754-2008 binary16 and bfloat16).
bool dtype_bits_finite(DType dtype, uint16_t bits);

/// How many of data[0..n) are not finite in `dtype` (dtype_bits_finite), counted on every core.
size_t count_nonfinite(DType dtype, const uint16_t* data, size_t n);

}  // namespace kt
