// CUDA driver wrapper tests that need a GPU (run with the [gpu] tag; tests/main.cpp skips them without one).
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "cuda/driver.h"

using namespace kt::cuda;

namespace {
// BEGIN_PTX
// Hand-written PTX (JIT-compiled by the driver): out[i] = value + i for i < n, one struct parameter by
// value, and a write to the last word of dynamic shared memory (when any) so its size is exercised.
const char* kFillPtx = R"(
.version 7.0
.target sm_80
.address_size 64
.extern .shared .align 16 .b8 dsmem[];
.visible .entry kt_test_fill(.param .align 8 .b8 p[16])
{
  .reg .b64 %rd<6>;
  .reg .b32 %r<8>;
  .reg .pred %pr;
  ld.param.u64 %rd1, [p];
  ld.param.u32 %r1, [p+8];
  ld.param.u32 %r2, [p+12];
  mov.u32 %r3, %ctaid.x;
  mov.u32 %r4, %ntid.x;
  mov.u32 %r5, %tid.x;
  mad.lo.u32 %r6, %r3, %r4, %r5;
  setp.ge.u32 %pr, %r6, %r1;
  @%pr bra DONE;
  mov.u32 %r7, %dynamic_smem_size;
  setp.eq.u32 %pr, %r7, 0;
  @%pr bra NOSMEM;
  sub.u32 %r7, %r7, 4;
  cvt.u64.u32 %rd4, %r7;
  mov.u64 %rd5, dsmem;
  add.u64 %rd5, %rd5, %rd4;
  st.shared.u32 [%rd5], %r6;  // last word of the dynamic allocation
NOSMEM:
  cvta.to.global.u64 %rd1, %rd1;
  mul.wide.u32 %rd2, %r6, 4;
  add.u64 %rd3, %rd1, %rd2;
  add.u32 %r7, %r2, %r6;
  st.global.u32 [%rd3], %r7;
DONE:
  ret;
}
)";
struct FillParams {
  unsigned long long out;
  unsigned n;
  unsigned value;
};
// END_PTX
}  // namespace

TEST_CASE("device_info reports sane values", "[gpu]") {
  std::string why;
  REQUIRE(gpu_available(&why));
  DeviceInfo d = device_info(0);
  CHECK(d.ordinal == 0);
  CHECK(!d.name.empty());
  REQUIRE(d.uuid.size() == 32);
  CHECK(d.uuid.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(d.uuid != std::string(32, '0'));
  CHECK(d.cc_major * 10 + d.cc_minor >= 80);
  CHECK(d.sm_count > 0);
  CHECK(d.l2_bytes > 0);
  CHECK(d.max_smem_per_block_optin >= 48 * 1024);
  CHECK((d.clock_khz == -1 || d.clock_khz > 0));
  CHECK((d.mem_clock_khz == -1 || d.mem_clock_khz > 0));
  CHECK(d.total_mem_bytes > (1LL << 30));
  CHECK(d.driver_version >= 11000);
  CHECK_THROWS_AS(device_info(100000), CudaError);
}

TEST_CASE("DeviceBuffer upload/download round trip of random data", "[gpu]") {
  Context ctx(0);
  CUcontext cur = nullptr;
  REQUIRE(api().cuCtxGetCurrent(&cur) == CUDA_SUCCESS);
  CHECK(cur == ctx.get());
  std::mt19937_64 rng(12345);
  for (size_t n : {size_t(1), size_t(37), size_t(577), size_t(1000), size_t(3) << 20}) {
    std::vector<uint8_t> host(n), back(n, 0);
    for (auto& b : host) b = static_cast<uint8_t>(rng());
    DeviceBuffer buf(n);
    REQUIRE(buf.bytes() == n);
    REQUIRE(buf.ptr() != 0);
    buf.upload(host.data(), n);
    buf.download(back.data(), n);
    CHECK(back == host);
    CHECK_THROWS_AS(buf.upload(host.data(), n + 1), std::invalid_argument);
  }
  // Move keeps the allocation and its contents.
  std::vector<uint32_t> h(1000);
  for (auto& v : h) v = static_cast<uint32_t>(rng());
  DeviceBuffer a(h.size() * 4);
  a.upload(h.data(), h.size() * 4);
  CUdeviceptr p = a.ptr();
  DeviceBuffer b(std::move(a));
  CHECK(a.ptr() == 0);
  CHECK(b.ptr() == p);
  std::vector<uint32_t> back(h.size());
  b.download(back.data(), back.size() * 4);
  CHECK(back == h);
  ctx.synchronize();
}

TEST_CASE("fill_u16 / fill_u32 write the pattern", "[gpu]") {
  Context ctx(0);
  {
    const size_t n = 577;  // odd element count
    DeviceBuffer buf(n * 2);
    std::vector<uint16_t> junk(n, 0x1111);
    buf.upload(junk.data(), n * 2);
    buf.fill_u16(0xBEEF);
    std::vector<uint16_t> back(n, 0);
    buf.download(back.data(), n * 2);
    CHECK(back == std::vector<uint16_t>(n, 0xBEEF));
  }
  {
    const size_t n = 1000;
    DeviceBuffer buf(n * 4);
    buf.fill_u32(0xDEADBEEFu);
    std::vector<uint32_t> back(n, 0);
    buf.download(back.data(), n * 4);
    CHECK(back == std::vector<uint32_t>(n, 0xDEADBEEFu));
  }
  DeviceBuffer odd(37);
  CHECK_THROWS_AS(odd.fill_u16(1), std::invalid_argument);
  CHECK_THROWS_AS(odd.fill_u32(1), std::invalid_argument);
}

TEST_CASE("Events time a stream and bad module images are rejected", "[gpu]") {
  Context ctx(0);
  Stream s;
  Event a, b;
  DeviceBuffer buf(64 << 20);
  a.record(s.get());
  CHECK(api().cuMemsetD8Async(buf.ptr(), 7, buf.bytes(), s.get()) == CUDA_SUCCESS);
  b.record(s.get());
  b.synchronize();
  s.synchronize();
  float ms = Event::elapsed_ms(a, b);
  CHECK(ms >= 0.0f);
  CHECK(ms < 10000.0f);
  const char garbage[64] = "this is not a cubin";
  CHECK_THROWS_AS(Module(garbage), CudaError);
}

TEST_CASE("launch passes one struct by value and opts in to > 48 KiB dynamic smem", "[gpu]") {
  Context ctx(0);
  Module mod(kFillPtx);
  CUfunction f = mod.function("kt_test_fill");
  CHECK_THROWS_AS(mod.function("no_such_kernel"), CudaError);
  Stream s;
  for (unsigned smem : {0u, 1024u, 100u * 1024u}) {  // the last needs the MAX_DYNAMIC_SHARED_SIZE opt-in
    const unsigned n = 1000, block = 128;
    DeviceBuffer out((n + 37) * 4);
    out.fill_u32(0xFFFFFFFFu);
    FillParams p{out.ptr(), n, 12345u + smem};
    launch(f, (n + block - 1) / block, 1, 1, block, smem, s.get(), &p);
    s.synchronize();
    std::vector<uint32_t> back(n + 37);
    out.download(back.data(), back.size() * 4);
    bool ok = true;
    for (unsigned i = 0; i < n; ++i) ok = ok && back[i] == 12345u + smem + i;
    for (unsigned i = n; i < n + 37; ++i) ok = ok && back[i] == 0xFFFFFFFFu;  // bounds respected
    INFO("smem " << smem);
    CHECK(ok);
  }
  // More dynamic smem than the device allows fails at launch with a CudaError.
  DeviceInfo d = device_info(0);
  FillParams p{0, 0, 0};
  CHECK_THROWS_AS(launch(f, 1, 1, 1, 32, static_cast<unsigned>(d.max_smem_per_block_optin) + 1024, s.get(), &p),
                  CudaError);
}
