#include "reference/dtype_convert.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "reference/parallel_for.h"

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

namespace {

/// Runs body(first, last, rng) over blocks of kFillBlock elements of [0, n), block j with a std::mt19937_64 seeded by
/// splitmix64(seed + j), on every core (parallel_for): the result depends on (n, seed) alone.
constexpr size_t kFillBlock = size_t(1) << 16;
template <class Body>
void for_random_blocks(size_t n, uint64_t seed, Body body) {
  const size_t blocks = (n + kFillBlock - 1) / kFillBlock;
  auto run = [&](size_t j) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (j + 1);  // splitmix64 of (seed, j)
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    std::mt19937_64 rng(z ^ (z >> 31));
    body(j * kFillBlock, std::min(n, (j + 1) * kFillBlock), rng);
  };
  parallel_for(blocks, run);
}

}  // namespace

void fill_random(DType dtype, uint16_t* dst, size_t n, uint64_t seed, float stddev) {
  if (!(std::isfinite(stddev) && stddev > 0.0f))
    throw std::invalid_argument("fill_random: stddev must be finite and > 0");
  if (dst == nullptr && n > 0) throw std::invalid_argument("fill_random: dst is null");
  for_random_blocks(n, seed, [&](size_t first, size_t last, std::mt19937_64& rng) {
    std::normal_distribution<float> dist(0.0f, stddev);
    for (size_t i = first; i < last; ++i) {
      // Redraw samples that round to +-0; after 64 tries (only when stddev is near the dtype's
      // smallest subnormal) use the smallest nonzero magnitude with the last sample's sign.
      uint16_t bits = 0;
      for (int attempt = 0; attempt < 64 && (bits & 0x7FFFu) == 0; ++attempt) bits = float_to_dtype(dtype, dist(rng));
      if ((bits & 0x7FFFu) == 0) bits = static_cast<uint16_t>((bits & 0x8000u) | 0x0001u);
      dst[i] = bits;
    }
  });
}

void fill_normal(float* dst, size_t n, uint64_t seed, float stddev) {
  if (!(std::isfinite(stddev) && stddev > 0.0f))
    throw std::invalid_argument("fill_normal: stddev must be finite and > 0");
  if (dst == nullptr && n > 0) throw std::invalid_argument("fill_normal: dst is null");
  for_random_blocks(n, seed, [&](size_t first, size_t last, std::mt19937_64& rng) {
    std::normal_distribution<float> dist(0.0f, stddev);
    for (size_t i = first; i < last; ++i) dst[i] = dist(rng);
  });
}

bool dtype_bits_finite(DType dtype, uint16_t bits) {
  return dtype == DType::f16 ? (bits & 0x7C00u) != 0x7C00u : (bits & 0x7F80u) != 0x7F80u;
}

size_t count_nonfinite(DType dtype, const uint16_t* data, size_t n) {
  const uint16_t mask = dtype == DType::f16 ? 0x7C00u : 0x7F80u;
  constexpr size_t kBlock = size_t(1) << 20;
  const size_t blocks = (n + kBlock - 1) / kBlock;
  std::atomic<size_t> count{0};
  parallel_for(blocks, [&](size_t j) {
    size_t mine = 0;
    for (size_t i = j * kBlock, end = std::min(n, i + kBlock); i < end; ++i) mine += (data[i] & mask) == mask;
    count += mine;
  });
  return count;
}

}  // namespace kt
