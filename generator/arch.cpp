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

std::string arch_name(ArchId arch) { return "sm_" + std::to_string(arch.sm) + (arch.arch_specific ? "a" : ""); }

bool arch_runs_on(ArchId arch, int cc_major, int cc_minor) {
  int cc = cc_major * 10 + cc_minor;
  if (arch.arch_specific) return cc == arch.sm;
  return cc_major == arch.sm / 10 && cc >= arch.sm;
}

DeviceModel device_model(ArchId arch) {
  const int sms = arch.sm >= 90 ? 132 : arch.sm == 89 ? 142 : arch.sm >= 86 ? 72 : 108;
  return device_model(arch, sms);
}

DeviceModel device_model(ArchId arch, int sm_count) {
  if (sm_count < 1)
    throw std::invalid_argument("device model of " + arch_name(arch) + ": sm_count must be >= 1, got " +
                                std::to_string(sm_count));
  DeviceModel d;
  d.sm_count = sm_count;
  d.smem_per_block = max_smem_per_block(arch.sm);
  d.smem_per_sm = (arch.sm >= 90 ? 228 : arch.sm == 80 || arch.sm == 87 ? 164 : arch.sm >= 86 ? 100 : 64) * 1024;
  return d;
}

}  // namespace kt
