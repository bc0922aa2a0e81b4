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

/// The GPU a candidate order is made for: what the heuristics read to count waves and fit blocks.
struct DeviceModel {
  int sm_count = 0;         ///< streaming multiprocessors
  int smem_per_block = 0;   ///< shared memory one block may use (the opt-in maximum), bytes
  int smem_per_sm = 0;      ///< shared memory of one SM, bytes
  int regs_per_sm = 65536;  ///< 32-bit registers of one SM
};

/// A representative GPU of `arch`, for orders made without the GPU at hand (compile-only sweeps, tests): sm_80 the
/// A100 (108 SMs, 164 KB per SM), sm_86 the A10 (72, 100 KB), sm_89 the L40S (142, 100 KB), sm_90 / sm_90a the H100
/// SXM (132, 228 KB); shared memory per block max_smem_per_block(arch.sm).
DeviceModel device_model(ArchId arch);
/// The GPU being tuned: its SM count, the shared memory and registers of `arch`. Throws std::invalid_argument when
/// sm_count < 1.
DeviceModel device_model(ArchId arch, int sm_count);

}  // namespace kt
