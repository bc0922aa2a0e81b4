// Bit-exact codecs: E2M1 (OCP MX v1.0 section 5.3.3), E4M3 (OCP OFP8 rev 1.0), E8M0 (OCP MX v1.0 5.4.1).
#include <cmath>
#include <cstdint>

#include "quant/quant.h"
#include "quant/quant_internal.h"

namespace kt::quant {

float e2m1_to_float(uint8_t code4) {
  const float mag = e2m1_magnitude(code4 & 7);
  return (code4 & 8) ? -mag : mag;
}

uint8_t e2m1_nearest(double x) {
  if (std::isnan(x)) return 0;
  const uint8_t sign = std::signbit(x) ? 8 : 0;
  const double a = std::fabs(x);
  if (a >= 6.0) return static_cast<uint8_t>(sign | 7);  // saturate (also +-inf)
  int best = 0;
  double best_d = a;  // distance to code 0
  for (int c = 1; c < 8; ++c) {
    const double d = std::fabs(a - e2m1_magnitude(c));
    // Ties go to the even code (the one whose mantissa bit, bit 0, is clear).
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return static_cast<uint8_t>(sign | best);
}

uint8_t float_to_e2m1(float x) { return e2m1_nearest(static_cast<double>(x)); }

float e4m3_to_float(uint8_t code) {
  const int exp = (code >> 3) & 0xF;
  const int man = code & 7;
  const bool neg = (code & 0x80) != 0;
  float mag;
  if (exp == 15 && man == 7) {
    mag = NAN;
  } else if (exp == 0) {
    mag = std::ldexp(static_cast<float>(man), -9);  // subnormal: man/8 * 2^-6
  } else {
    mag = std::ldexp(static_cast<float>(8 + man), exp - 7 - 3);
  }
  return neg ? -mag : mag;
}

uint8_t e4m3_nearest(double x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return static_cast<uint8_t>(sign | 0x7F);
  const double a = std::fabs(x);
  if (a >= 448.0) return static_cast<uint8_t>(sign | 0x7E);  // saturate (also +-inf)
  if (a < std::ldexp(1.0, -6)) {
    // Subnormal range: multiples of 2^-9; q == 8 is exactly the smallest normal, code 0x08.
    const double q = std::nearbyint(std::ldexp(a, 9));
    return static_cast<uint8_t>(sign | static_cast<int>(q));
  }
  int e2;
  std::frexp(a, &e2);                                          // a = m * 2^e2, m in [0.5, 1)
  int e = e2 - 1;                                              // a in [2^e, 2^(e+1)), e in [-6, 8]
  double q = std::nearbyint((std::ldexp(a, -e) - 1.0) * 8.0);  // exact scaling, RNE
  if (q == 8.0) {
    q = 0;
    ++e;
  }
  // a < 448 guarantees (e, q) <= (8, 6): 464 would be the first tie, and it is >= 448.
  return static_cast<uint8_t>(sign | ((e + 7) << 3) | static_cast<int>(q));
}

uint8_t float_to_e4m3(float x) { return e4m3_nearest(static_cast<double>(x)); }

float e8m0_to_float(uint8_t e) {
  if (e == 255) return NAN;
  return std::ldexp(1.0f, static_cast<int>(e) - 127);
}

}  // namespace kt::quant
