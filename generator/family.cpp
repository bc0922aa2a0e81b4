// The family-neutral helpers of generator/family.h: the power-of-two size buckets of the runtime's nearest step.
#include "generator/family.h"

#include <stdexcept>

namespace kt {

int size_bucket(long long x) {
  if (x < 1 || x >= (1ll << 31))
    throw std::invalid_argument("size_bucket: size " + std::to_string(x) + " is outside [1, 2^31)");
  int k = 0;
  while ((2ll << k) <= x) ++k;  // 2^k <= x < 2^(k+1)
  // x^2 < 2^62: compare with 2^(2k+1), the square of the geometric midpoint 2^(k+1/2).
  const unsigned long long sq = static_cast<unsigned long long>(x) * static_cast<unsigned long long>(x);
  return sq >= (1ull << (2 * k + 1)) ? k + 1 : k;
}

std::string bucket_key(const Family& family, const nlohmann::json& problem) {
  std::string key = family.class_key(problem);
  for (const auto& [name, size] : family.bucket_sizes(problem))
    key += "/" + name + "~" + std::to_string(1ll << size_bucket(size));
  return key;
}

}  // namespace kt
