#include "generator/registry.h"

#include <stdexcept>

#include "generator/arch.h"
#include "generator/attention_family.h"
#include "generator/decode_family.h"
#include "generator/qkv_family.h"

namespace kt {

const std::vector<const Family*>& families() {
  // One line per family.
  static const std::vector<const Family*> f = {
      &attn::family_type(),
      &qkv::family_type(),
      &decode::family_type(),
  };
  return f;
}

int family_index(const std::string& name) {
  const auto& fs = families();
  for (size_t i = 0; i < fs.size(); ++i)
    if (fs[i]->name() == name) return int(i);
  std::string known;
  for (const auto* f : fs) known += (known.empty() ? "" : ", ") + f->name();
  throw std::invalid_argument("unknown family '" + name + "': known are " + known);
}

const Family& find_family(const std::string& name) { return *families()[size_t(family_index(name))]; }

}  // namespace kt
