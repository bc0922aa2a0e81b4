// Helpers shared by test files.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace kt_test {

/// The autotune binary: $KT_AUTOTUNE, else the build's (KT_AUTOTUNE_PATH), else next to this test binary
/// (how scripts/stage_gpu.sh lays binaries out for the GPU machine).
inline std::string autotune_path() {
  if (const char* e = std::getenv("KT_AUTOTUNE"); e && *e) return e;
  if (std::filesystem::exists(KT_AUTOTUNE_PATH)) return KT_AUTOTUNE_PATH;
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "autotune").string();
}

/// Exit status of kerntune_tests when nothing failed and at least one selected test case was skipped (or every
/// selected one needs a GPU and there is none); ctest's SKIP_RETURN_CODE.
constexpr int kSkipExitCode = 77;

struct Skip {
  std::string test;    ///< the test case's name
  std::string reason;  ///< why it could not run here, e.g. "the wgmma mainloop needs sm_90a; this GPU is sm_86"
};

/// Test cases skipped so far in this process, in order.
inline std::vector<Skip>& skipped_tests() {
  static std::vector<Skip> s;
  return s;
}

/// Marks the running test case skipped: it cannot run on this machine (a GPU feature it needs is missing). Call it
/// before any check and return from the test case right after (or use KT_SKIP). The runner (tests/main.cpp) lists
/// the skip with its reason and exits kSkipExitCode instead of 0, so the test is never reported as passed.
inline void skip(const std::string& reason) {
  skipped_tests().push_back({Catch::getResultCapture().getCurrentTestName(), reason});
  WARN("skipped: " << reason);
}

}  // namespace kt_test

/// Skips the running test case (kt_test::skip) and returns from it.
#define KT_SKIP(reason)      \
  do {                       \
    ::kt_test::skip(reason); \
    return;                  \
  } while (0)
