// The runner's "skipped" result (tests/main.cpp, kt_test::skip): a skipped test case makes the run exit 77 (ctest's
// SKIP_RETURN_CODE) and is listed with its reason; a failure still wins; [gpu]-only selections without a GPU exit 77.
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "cuda/driver.h"
#include "tests/support.h"

namespace {

struct RunResult {
  int status = -1;
  std::string output;
};

/// Runs this test binary with `args` (shell words), stdout and stderr together.
RunResult run_self(const std::string& args) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  RunResult r;
  std::tie(r.status, r.output) = kt_test::run_command("KT_RUNNER_FIXTURES=1 '" + self + "' " + args);
  return r;
}

// Fixture test cases the runner tests launch in a child process. They exist only when KT_RUNNER_FIXTURES is set
// (Catch2 v2 runs hidden test cases too when a filter only excludes, e.g. "~[gpu]~[nvrtc]").
void fixture_skips() {
  KT_SKIP("the fixture needs a feature this machine lacks");
  FAIL("KT_SKIP returns from the test case");
}
void fixture_passes() { CHECK(1 + 1 == 2); }
void fixture_fails() { CHECK(1 + 1 == 3); }
[[maybe_unused]] const bool kFixturesRegistered = [] {
  if (!std::getenv("KT_RUNNER_FIXTURES")) return false;
  static const Catch::AutoReg skips(Catch::makeTestInvoker(&fixture_skips), CATCH_INTERNAL_LINEINFO, Catch::StringRef(),
                                    Catch::NameAndTags{"runner fixture: skips", "[skip_one]"});
  static const Catch::AutoReg passes(Catch::makeTestInvoker(&fixture_passes), CATCH_INTERNAL_LINEINFO,
                                     Catch::StringRef(), Catch::NameAndTags{"runner fixture: passes", "[pass_one]"});
  static const Catch::AutoReg fails(Catch::makeTestInvoker(&fixture_fails), CATCH_INTERNAL_LINEINFO, Catch::StringRef(),
                                    Catch::NameAndTags{"runner fixture: fails", "[fail_one]"});
  return true;
}();

}  // namespace

TEST_CASE("runner: a skipped test case exits 77 and is listed with its reason, never as passed", "[runner]") {
  const RunResult r = run_self("'[skip_one]'");
  CHECK(r.status == kt_test::kSkipExitCode);
  CHECK(r.output.find("skipped: runner fixture: skips: the fixture needs a feature this machine lacks") !=
        std::string::npos);
  CHECK(r.output.find("1 of 1 test cases skipped") != std::string::npos);
}

TEST_CASE("runner: a skip next to a pass still exits 77, a pass alone exits 0", "[runner]") {
  const RunResult both = run_self("'[skip_one],[pass_one]'");
  CHECK(both.status == kt_test::kSkipExitCode);
  CHECK(both.output.find("1 of 2 test cases skipped") != std::string::npos);
  const RunResult pass = run_self("'[pass_one]'");
  CHECK(pass.status == 0);
  CHECK(pass.output.find("skipped") == std::string::npos);
}

TEST_CASE("runner: a failure next to a skip exits with the failure count, not 77", "[runner]") {
  const RunResult r = run_self("'[skip_one],[fail_one]'");
  CHECK(r.status == 1);
  CHECK(r.output.find("skipped: runner fixture: skips") != std::string::npos);
}

TEST_CASE("runner: [gpu]-only selections exit 77 without a GPU, listing them needs no GPU", "[runner]") {
  // Listing never needs a GPU (catch_discover_tests lists the [gpu] tests on the build machine).
  const RunResult list = run_self("'[gpu]' --list-test-names-only");
  CHECK(list.status > 0);  // Catch2 v2 exits with the number of names listed
  CHECK(list.output.find("no GPU found") == std::string::npos);
  CHECK(list.output.find("device_info reports sane values") != std::string::npos);
  std::string why;
  if (!kt::cuda::gpu_available(&why)) {  // (on a GPU machine "[gpu]" would run every GPU test)
    const RunResult r = run_self("'[gpu]'");
    CHECK(r.status == kt_test::kSkipExitCode);
    CHECK(r.output.find("no GPU found") != std::string::npos);
    CHECK(r.output.find("[gpu] test cases skipped") != std::string::npos);
    CHECK(r.output.find("All tests passed") == std::string::npos);
  }
}

TEST_CASE("runner: no [gpu] test name contains ';', which would split its ctest entry (catch_discover_tests)",
          "[runner]") {
  const RunResult list = run_self("--list-test-names-only '[gpu]~[.]'");  // tests/CMakeLists.txt's TEST_SPEC
  CHECK(list.status > 10);                                                // one name per line
  CHECK(list.output.find(';') == std::string::npos);
}
