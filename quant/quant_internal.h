// Internals of kt_quant shared by its translation units (not installed, not for other libraries).
#pragma once
#include <cstdint>
#include <string>

#include "quant/quant.h"

namespace kt::quant {

/// Nearest E2M1 code of a float64 value (same rules as float_to_e2m1, without a float rounding step).
uint8_t e2m1_nearest(double x);
/// Nearest E4M3 code of a float64 value (same rules as float_to_e4m3).
uint8_t e4m3_nearest(double x);

/// "PackedWeight(int4, n=4, k=128)": the prefix of validation messages.
std::string describe(const PackedWeight& pw);

}  // namespace kt::quant
