// Helpers shared by test files.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace kt_test {

/// The autotune binary: $KT_AUTOTUNE, else the build's (KT_AUTOTUNE_PATH), else next to this test binary
/// (how scripts/stage_gpu.sh lays binaries out for the GPU machine).
inline std::string autotune_path() {
  if (const char* e = std::getenv("KT_AUTOTUNE"); e && *e) return e;
  if (std::filesystem::exists(KT_AUTOTUNE_PATH)) return KT_AUTOTUNE_PATH;
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "autotune").string();
}

}  // namespace kt_test
