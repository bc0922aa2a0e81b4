#include "tuner/tuner_registry.h"

#include <stdexcept>

#include "generator/registry.h"
#include "tuner/attention_session.h"
#include "tuner/decode_session.h"
#include "tuner/qkv_session.h"

namespace kt {

const std::vector<TunerFamily>& tuner_families() {
  // One line per family.
  static const std::vector<TunerFamily> f = {
      attn::tuner_family(),
      qkv::tuner_family(),
      decode::tuner_family(),
  };
  return f;
}

const TunerFamily& find_tuner_family(const std::string& name) {
  for (const auto& f : tuner_families())
    if (f.family->name() == name) return f;
  find_family(name);  // throws naming the known families when the name is not registered at all
  throw std::invalid_argument("family '" + name + "' has no tuner registration (tuner/tuner_registry.cpp)");
}

}  // namespace kt
