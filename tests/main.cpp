// Catch2 v2 runner. When the test spec selects [gpu] tests and no usable GPU is found, prints one line
// saying so and exits 77, which ctest reports as "Skipped" (SKIP_RETURN_CODE). CPU and NVRTC tests
// never need a GPU.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstring>
#include <iostream>
#include <string>

#include "cuda/driver.h"

int main(int argc, char** argv) {
  bool gpu_only = false;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "[gpu]") == 0) gpu_only = true;
  if (gpu_only) {
    std::string why;
    if (!kt::cuda::gpu_available(&why)) {
      std::cout << "kerntune_tests: no GPU found (" << why << "): all [gpu] tests skipped" << std::endl;
      return 77;
    }
  }
  return Catch::Session().run(argc, argv);
}
