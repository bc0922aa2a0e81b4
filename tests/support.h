// Helpers shared by test files.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <system_error>
#include <utility>
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

/// Runs `cmd` through /bin/sh with stderr merged into stdout. Returns the exit status (128 + the signal number when a
/// signal ended it) and the output. Fails the running test case when the shell cannot be started.
inline std::pair<int, std::string> run_command(const std::string& cmd) {
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(f != nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), f)) out.append(buf.data(), n);
  const int st = pclose(f);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

/// Runs the autotune binary (autotune_path()) with `args` (shell words): exit status and stdout + stderr.
inline std::pair<int, std::string> run_autotune(const std::string& args) {
  return run_command(autotune_path() + " " + args);
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

/// A fresh folder under the system temp folder (mode 0755, a name unique to the process, the call and a random
/// draw: "<prefix>_<pid>_<n>_<random>"), removed with everything in it at the end of the scope, also where a test
/// made a sub-folder read-only.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "kt_test") {
    namespace fs = std::filesystem;
    static std::atomic<int> n{0};
    std::random_device rd;
    path = fs::temp_directory_path() /
           (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(n++) + "_" + std::to_string(rd()));
    fs::create_directories(path);
    fs::permissions(path, fs::perms(0755));
  }
  ~TempDir() {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::permissions(path, fs::perms(0755), ec);
    for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec))
      if (it->is_directory(ec)) fs::permissions(it->path(), fs::perms(0755), ec);
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  /// The path of `name` inside the folder (nothing is created).
  std::string at(const std::string& name) const { return (path / name).string(); }
  /// Writes `text` to `name` inside the folder and returns the file's path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::string p = (path / name).string();
    std::ofstream(p) << text;
    return p;
  }
};

/// Sets an environment variable for a scope, restoring (or removing) it at the end.
struct ScopedEnv {
  std::string name, old;
  bool had;
  ScopedEnv(const char* n, const std::string& v) : name(n) {
    const char* o = std::getenv(n);
    had = o != nullptr;
    if (had) old = o;
    setenv(n, v.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had) setenv(name.c_str(), old.c_str(), 1);
    else unsetenv(name.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

/// Regular files below `dir` (0 when it does not exist).
inline size_t count_files(const std::filesystem::path& dir) {
  size_t n = 0;
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) ++n;
  return n;
}

}  // namespace kt_test

/// Skips the running test case (kt_test::skip) and returns from it.
#define KT_SKIP(reason)      \
  do {                       \
    ::kt_test::skip(reason); \
    return;                  \
  } while (0)
