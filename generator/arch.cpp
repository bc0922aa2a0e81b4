#include "generator/arch.h"

#include <stdexcept>

namespace kt {

const std::vector<std::string>& supported_archs() {
  static const std::vector<std::string> archs = {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"};
  return archs;
}

ArchId parse_arch(const std::string& name) {
  for (const auto& a : supported_archs()) {
    if (a == name) {
      bool specific = a.back() == 'a';
      int sm = std::stoi(a.substr(3, 2));
      return ArchId{sm, specific};
    }
  }
  std::string list;
  for (const auto& a : supported_archs()) list += (list.empty() ? "" : ", ") + a;
  throw std::invalid_argument("unknown --arch '" + name + "': supported are " + list);
}

std::string arch_name(ArchId arch) {
  return "sm_" + std::to_string(arch.sm) + (arch.arch_specific ? "a" : "");
}

bool arch_runs_on(ArchId arch, int cc_major, int cc_minor) {
  int cc = cc_major * 10 + cc_minor;
  if (arch.arch_specific) return cc == arch.sm;
  return cc_major == arch.sm / 10 && cc >= arch.sm;
}

}  // namespace kt
