#include "generator/registry.h"

#include <stdexcept>

#include "generator/arch.h"
#include "generator/attention_family.h"
#include "generator/qkv_family.h"

namespace kt {

const std::vector<const Family*>& families() {
  // One line per family.
  static const std::vector<const Family*> f = {
      &attn::family_type(),
      &qkv::family_type(),
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

DeviceModel DeviceModel::for_arch(ArchId arch) {
  DeviceModel d;
  d.sm_count = arch.sm >= 90 ? 132 : arch.sm == 89 ? 128 : arch.sm == 86 ? 82 : 108;
  d.smem_per_block = max_smem_per_block(arch.sm);
  return d;
}

}  // namespace kt
