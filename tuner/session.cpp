#include "tuner/session.h"

#include "tuner/tuner_registry.h"

namespace kt {

std::unique_ptr<MeasureSession> make_session(const std::string& family, const nlohmann::json& problem, uint64_t seed,
                                             size_t ref_rows, size_t l2_bytes) {
  return find_tuner_family(family).session(problem, seed, ref_rows, l2_bytes);
}

}  // namespace kt
