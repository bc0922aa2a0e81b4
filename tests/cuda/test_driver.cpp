// CUDA driver wrapper tests that run on any machine (no GPU or driver needed). [gpu] ones are in tests/gpu/.
#include <catch2/catch.hpp>

#include <string>

#include "cuda/driver.h"

using namespace kt::cuda;

namespace {
// Whether this machine has a working driver with a device (the tests below adapt to both cases).
bool have_gpu() {
  static const bool v = gpu_available();
  return v;
}
}  // namespace

TEST_CASE("gpu_available never throws and explains a negative answer", "[cuda]") {
  std::string why = "sentinel";
  bool ok = false;
  REQUIRE_NOTHROW(ok = gpu_available(&why));
  REQUIRE_NOTHROW(gpu_available(nullptr));
  // The answer is stable across calls.
  std::string why2;
  REQUIRE(gpu_available(&why2) == ok);
  if (ok) {
    CHECK(why.empty());
  } else {
    CHECK(!why.empty());
    CHECK(why != "sentinel");
    CHECK(why2 == why);
  }
}

TEST_CASE("without a GPU, api() and device calls throw with the loader's reason", "[cuda]") {
  if (have_gpu()) return;  // covered by the [gpu] tests on a GPU machine
  std::string why;
  REQUIRE_FALSE(gpu_available(&why));
  // api() throws the same message every time (failure is remembered, not retried).
  std::string msg1, msg2;
  try {
    api();
    FAIL("api() should throw without a usable driver");
  } catch (const std::exception& e) {
    msg1 = e.what();
  }
  try {
    api();
  } catch (const std::exception& e) {
    msg2 = e.what();
  }
  CHECK(msg1 == msg2);
  CHECK(!msg1.empty());
  CHECK(why.find(msg1) != std::string::npos);
  // Either the library is missing, or it loaded and cuInit/symbol lookup failed: each says so.
  bool named = msg1.find("libcuda.so.1 not found: no NVIDIA driver on this machine") == 0 ||
               msg1.find("cuInit failed: CUDA_ERROR_") == 0 || msg1.find("symbol ") == 0;
  CHECK(named);
  CHECK_THROWS(device_info(0));
  CHECK_THROWS(Context(0));
  CHECK_THROWS(DeviceBuffer(1024));
}

TEST_CASE("CudaError message names the call, the code and its description", "[cuda]") {
  CudaError e(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc");
  CHECK(e.code == CUDA_ERROR_INVALID_VALUE);
  CHECK(std::string(e.what()) == "cuMemAlloc failed: CUDA_ERROR_INVALID_VALUE (invalid argument)");

  CudaError oom(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc(1024 bytes)");
  CHECK(std::string(oom.what()) == "cuMemAlloc(1024 bytes) failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");

  CudaError nf(CUDA_ERROR_NOT_FOUND, "cuModuleGetFunction(_Z3foov)");
  std::string m = nf.what();
  CHECK(m.rfind("cuModuleGetFunction(_Z3foov) failed: CUDA_ERROR_NOT_FOUND (", 0) == 0);
  CHECK(m.back() == ')');

  // It is a std::runtime_error, catchable as such.
  CHECK_THROWS_AS(check(CUDA_ERROR_ILLEGAL_ADDRESS, "cuCtxSynchronize"), std::runtime_error);
  CHECK_THROWS_WITH(check(CUDA_ERROR_ILLEGAL_ADDRESS, "cuCtxSynchronize"),
                    Catch::StartsWith("cuCtxSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS ("));
  try {
    check(CUDA_ERROR_NO_BINARY_FOR_GPU, "cuModuleLoadData");
    FAIL("check should throw");
  } catch (const CudaError& err) {
    CHECK(err.code == CUDA_ERROR_NO_BINARY_FOR_GPU);
  }
  CHECK_NOTHROW(check(CUDA_SUCCESS, "cuInit"));
}

TEST_CASE("error_name/error_string handle unknown codes without throwing", "[cuda]") {
  CHECK(error_name(CUDA_ERROR_OUT_OF_MEMORY) == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(error_string(CUDA_ERROR_OUT_OF_MEMORY) == "out of memory");
  auto weird = static_cast<CUresult>(123456);
  std::string n, s;
  REQUIRE_NOTHROW(n = error_name(weird));
  REQUIRE_NOTHROW(s = error_string(weird));
  CHECK(n.rfind("CUDA_ERROR_", 0) == 0);
  CHECK(!s.empty());
  CudaError e(weird, "cuFoo");
  CHECK(std::string(e.what()).rfind("cuFoo failed: CUDA_ERROR_", 0) == 0);
}

TEST_CASE("DeviceBuffer default/zero-size needs no driver", "[cuda]") {
  DeviceBuffer b;
  CHECK(b.ptr() == 0);
  CHECK(b.bytes() == 0);
  DeviceBuffer m(std::move(b));
  CHECK(m.bytes() == 0);
  // Size checks happen before any driver call.
  char host[4] = {1, 2, 3, 4};
  CHECK_THROWS_AS(m.upload(host, 4), std::invalid_argument);
  CHECK_THROWS_AS(m.download(host, 4), std::invalid_argument);
  CHECK_NOTHROW(m.upload(host, 0));
}
