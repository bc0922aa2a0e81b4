// GPU architecture names accepted by kerntune.
#pragma once
#include <string>
#include <vector>

#include "common/kt_types.h"

namespace kt {

/// Supported --arch values: sm_80, sm_86, sm_89, sm_90, sm_90a.
const std::vector<std::string>& supported_archs();

/// "sm_90a" -> {90, true}. Throws std::invalid_argument("unknown --arch 'x': supported are sm_80, ...").
ArchId parse_arch(const std::string& name);

/// {90, true} -> "sm_90a".
std::string arch_name(ArchId arch);

/// Whether a cubin built for `arch` loads on a device of compute capability cc_major.cc_minor:
/// an arch-specific ("a") cubin only on exactly that capability; otherwise on the same major
/// version with an equal or higher minor (cubin compatibility, CUDA C++ Programming Guide 6.1.5).
bool arch_runs_on(ArchId arch, int cc_major, int cc_minor);

}  // namespace kt
