#include "reference/dtype_convert.h"

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

namespace kt {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

uint16_t float_to_half(float f) {
  const uint32_t x = bits_of(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t exp = (x >> 23) & 0xFFu;
  uint32_t mant = x & 0x7FFFFFu;

  if (exp == 0xFFu) {  // inf or NaN
    if (mant == 0) return static_cast<uint16_t>(sign | 0x7C00u);
    // Quiet NaN: keep the top 9 payload bits, force the quiet bit.
    return static_cast<uint16_t>(sign | 0x7E00u | (mant >> 13));
  }
  // Unbiased exponent of the binary32 value.
  const int e = static_cast<int>(exp) - 127;
  if (e > 15) return static_cast<uint16_t>(sign | 0x7C00u);  // |f| >= 2^16: overflow
  if (e >= -14) {
    // Normal binary16 range (before rounding). Keep 10 mantissa bits, round on the 13 dropped ones.
    uint32_t h = (static_cast<uint32_t>(e + 15) << 10) | (mant >> 13);
    const uint32_t rest = mant & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carry may reach inf: correct
    return static_cast<uint16_t>(sign | h);
  }
  if (e < -25) return sign;  // below half of the smallest subnormal (2^-25): rounds to zero
  // Subnormal binary16: value = m * 2^-24 with m = (1.mant) * 2^(e+24).
  if (exp != 0) mant |= 0x800000u;  // implicit bit (binary32 subnormals have e = -127, handled above)
  const int shift = -e - 1;         // 13 + (-14 - e): bits to drop from the 24-bit significand
  uint32_t h = mant >> shift;
  const uint32_t rest = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (h & 1u))) ++h;  // may round up to the smallest normal: correct
  return static_cast<uint16_t>(sign | h);
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1Fu) return float_of(sign | 0x7F800000u | (mant << 13));  // inf / NaN (payload kept)
  if (exp != 0) return float_of(sign | ((exp - 15 + 127) << 23) | (mant << 13));
  if (mant == 0) return float_of(sign);
  // Subnormal: normalise.
  int e = -14;
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  mant &= 0x3FFu;
  return float_of(sign | (static_cast<uint32_t>(e + 127) << 23) | (mant << 13));
}

uint16_t float_to_bf16(float f) {
  const uint32_t x = bits_of(f);
  if ((x & 0x7F800000u) == 0x7F800000u && (x & 0x7FFFFFu) != 0)
    return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN, sign and top payload kept
  const uint32_t rounding = 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

float bf16_to_float(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }

uint16_t float_to_dtype(DType dtype, float f) { return dtype == DType::bf16 ? float_to_bf16(f) : float_to_half(f); }

float dtype_to_float(DType dtype, uint16_t bits) {
  return dtype == DType::bf16 ? bf16_to_float(bits) : half_to_float(bits);
}

const char* dtype_name(DType dtype) { return dtype == DType::bf16 ? "bf16" : "fp16"; }

DType parse_dtype(const std::string& name) {
  if (name == "fp16" || name == "f16" || name == "float16" || name == "half") return DType::f16;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  throw std::invalid_argument("unknown dtype '" + name + "' (expected fp16 or bf16)");
}

void fill_random(DType dtype, uint16_t* dst, size_t n, uint64_t seed, float stddev) {
  if (!(std::isfinite(stddev) && stddev > 0.0f))
    throw std::invalid_argument("fill_random: stddev must be finite and > 0");
  if (dst == nullptr && n > 0) throw std::invalid_argument("fill_random: dst is null");
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  for (size_t i = 0; i < n; ++i) {
    // Redraw samples that round to +-0; after 64 tries (only when stddev is near the dtype's
    // smallest subnormal) use the smallest nonzero magnitude with the last sample's sign.
    uint16_t bits = 0;
    for (int attempt = 0; attempt < 64 && (bits & 0x7FFFu) == 0; ++attempt) bits = float_to_dtype(dtype, dist(rng));
    if ((bits & 0x7FFFu) == 0) bits = static_cast<uint16_t>((bits & 0x8000u) | 0x0001u);
    dst[i] = bits;
  }
}

}  // namespace kt
