// Catch2 v2 runner with "skipped" as a result (Catch2 v2 has no SKIP; tests/README.md gives the rule):
//  - When every selected test case is tagged [gpu] and no usable GPU is found, prints one line saying so and
//    exits 77 without running them.
//  - A test case that cannot run on the GPU it finds calls kt_test::skip(reason) (tests/support.h) and returns.
//    After the run, each skipped test case is listed with its reason, and when nothing failed the exit status is
//    77 (not 0): ctest reports the test "Skipped" (SKIP_RETURN_CODE), never "Passed".
// CPU and NVRTC tests never need a GPU.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <algorithm>
#include <iostream>
#include <string>

#include "cuda/driver.h"
#include "tests/support.h"

namespace {

/// Counts the test cases that ran to the end, for the summary.
struct CountingListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  static inline int ended = 0;
  void testCaseEnded(Catch::TestCaseStats const& stats) override {
    ++ended;
    TestEventListenerBase::testCaseEnded(stats);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(CountingListener)

int main(int argc, char** argv) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  const Catch::Config& cfg = session.config();
  const bool listing = cfg.listTests() || cfg.listTestNamesOnly() || cfg.listTags() || cfg.listReporters();
  if (!listing) {
    const auto selected = Catch::filterTests(Catch::getAllTestCasesSorted(cfg), cfg.testSpec(), cfg);
    const auto n_gpu = std::count_if(selected.begin(), selected.end(), [](const Catch::TestCase& t) {
      return std::find(t.lcaseTags.begin(), t.lcaseTags.end(), "gpu") != t.lcaseTags.end();
    });
    std::string why;
    if (n_gpu > 0 && !kt::cuda::gpu_available(&why)) {
      if (n_gpu == static_cast<long>(selected.size())) {
        std::cout << "kerntune_tests: no GPU found (" << why << "): " << n_gpu << " [gpu] test case"
                  << (n_gpu == 1 ? "" : "s") << " skipped" << std::endl;
        return kt_test::kSkipExitCode;
      }
      std::cout << "kerntune_tests: no GPU found (" << why << "): the " << n_gpu
                << " selected [gpu] test cases will fail; select \"~[gpu]\" to leave them out" << std::endl;
    }
  }
  const int failed = session.run();
  const auto& skipped = kt_test::skipped_tests();
  if (skipped.empty() || listing) return failed;
  std::cout << "kerntune_tests: " << skipped.size() << " of " << CountingListener::ended
            << " test cases skipped (they ran no check that counts as a pass):" << std::endl;
  for (const auto& s : skipped) std::cout << "  skipped: " << s.test << ": " << s.reason << std::endl;
  return failed != 0 ? failed : kt_test::kSkipExitCode;
}
