// Runs one attention prefill through the installed kerntune API (kerntune/kerntune.hpp, the C ABI's C++ layer) with
// a tuned database and checks it against a float64 reference. Uses nothing of kerntune but its public header and
// libkerntune.so; device memory comes from the CUDA Driver API, loaded with dlopen once the runtime has found a GPU
// (so that the program starts, and reports, on a machine without the driver).
//
//   example_attention_prefill [tuned.db]     (default: $KERNTUNE_DB; neither -> built-in defaults)
//
// Shape: Qwen2.5-7B prefill, B=1, S=2048, 28 query heads / 4 KV heads, head_dim 128, causal, bf16, q/k/v/o
// contiguous [B, S, H, D]. Prints the lookup chain's answer, the error of 64 query rows (every head) against the
// float64 reference and PASS/FAIL; exits 1 on FAIL or error. kt_runtime_create checks the database before it looks
// for a GPU, so a file that is not a readable tuning database exits 1 with the error on any machine; then, without a
// GPU, it exits 0 after "no GPU found: ...".
#include <cuda.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kerntune/kerntune.hpp"

namespace {

constexpr int kB = 1, kS = 2048, kH = 28, kHkv = 4, kD = 128;

// bf16 <-> float: the top 16 bits of an fp32, rounded to nearest even (inputs here are finite).
uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
double from_bf16(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The Driver API entry points this program uses, from libcuda.so.1. cuda.h maps each name to its current ABI version
// (cuMemAlloc -> cuMemAlloc_v2); KT_SYM gives dlsym that versioned name.
#define KT_STR2(x) #x
#define KT_STR(x) KT_STR2(x)
#define KT_SYM(f) reinterpret_cast<decltype(&f)>(symbol(KT_STR(f)))
struct Driver {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void* symbol(const char* name) {
    void* f = lib ? dlsym(lib, name) : nullptr;
    if (!f) throw std::runtime_error(std::string("libcuda.so.1: no ") + name);
    return f;
  }
  decltype(&cuGetErrorString) get_error_string = KT_SYM(cuGetErrorString);
  decltype(&cuMemAlloc) mem_alloc = KT_SYM(cuMemAlloc);
  decltype(&cuMemFree) mem_free = KT_SYM(cuMemFree);
  decltype(&cuMemcpyHtoD) htod = KT_SYM(cuMemcpyHtoD);
  decltype(&cuMemcpyDtoH) dtoh = KT_SYM(cuMemcpyDtoH);
  decltype(&cuMemsetD16) memset16 = KT_SYM(cuMemsetD16);
};
Driver& cu() {
  static Driver d;
  return d;
}

void cu_check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* s = nullptr;
    cu().get_error_string(r, &s);
    throw std::runtime_error(std::string(what) + ": " + (s ? s : "CUDA error"));
  }
}

/// A device buffer of n bf16 values, freed on scope exit.
struct DeviceBuffer {
  CUdeviceptr p = 0;
  explicit DeviceBuffer(size_t n) { cu_check(cu().mem_alloc(&p, n * 2), "cuMemAlloc"); }
  ~DeviceBuffer() { cu().mem_free(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

/// o[row, h, :] of causal GQA attention in float64 for query row `row` (bottom-right aligned; S_q == S_k here).
std::vector<double> reference_row(const std::vector<uint16_t>& q, const std::vector<uint16_t>& k,
                                  const std::vector<uint16_t>& v, int row, int h, double scale) {
  const int g = h / (kH / kHkv);
  std::vector<double> s(size_t(row) + 1);
  double mx = -INFINITY;
  for (int j = 0; j <= row; ++j) {
    double dot = 0;
    for (int d = 0; d < kD; ++d)
      dot += from_bf16(q[(size_t(row) * kH + h) * kD + d]) * from_bf16(k[(size_t(j) * kHkv + g) * kD + d]);
    s[j] = dot * scale;
    mx = std::max(mx, s[j]);
  }
  double sum = 0;
  for (auto& x : s) sum += (x = std::exp(x - mx));
  std::vector<double> o(kD, 0.0);
  for (int j = 0; j <= row; ++j)
    for (int d = 0; d < kD; ++d) o[d] += s[j] / sum * from_bf16(v[(size_t(j) * kHkv + g) * kD + d]);
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  std::string db_path = argc > 1 ? argv[1] : "";
  if (db_path.empty())
    if (const char* env = std::getenv("KERNTUNE_DB"); env && *env) db_path = env;
  try {
    kerntune::Runtime rt(db_path);  // "" -> built-in defaults; makes device 0's primary context current
    const kt_attention_problem p{KT_DTYPE_BF16, kB, kS, kS, kH, kHkv, kD, /*causal=*/1};
    std::printf("kerntune %s, database: %s\n%s\n", kerntune::version().c_str(),
                db_path.empty() ? "(none: built-in defaults)" : db_path.c_str(), rt.explain_attention(p).c_str());

    // Random inputs in [-1, 1), rounded to bf16 on the host.
    std::mt19937 rng(2024);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    auto random_bf16 = [&](size_t n) {
      std::vector<uint16_t> x(n);
      for (auto& e : x) e = to_bf16(u(rng));
      return x;
    };
    const size_t nq = size_t(kB) * kS * kH * kD, nkv = size_t(kB) * kS * kHkv * kD;
    const std::vector<uint16_t> q = random_bf16(nq), k = random_bf16(nkv), v = random_bf16(nkv);
    DeviceBuffer dq(nq), dk(nkv), dv(nkv), dout(nq);
    cu_check(cu().htod(dq.p, q.data(), nq * 2), "cuMemcpyHtoD q");
    cu_check(cu().htod(dk.p, k.data(), nkv * 2), "cuMemcpyHtoD k");
    cu_check(cu().htod(dv.p, v.data(), nkv * 2), "cuMemcpyHtoD v");
    cu_check(cu().memset16(dout.p, 0x7fc0, nq), "cuMemsetD16");  // every output element poisoned with a bf16 NaN

    const int64_t qr = int64_t(kH) * kD, kr = int64_t(kHkv) * kD;
    const kt_attention_args a{reinterpret_cast<const void*>(dq.p),
                              reinterpret_cast<const void*>(dk.p),
                              reinterpret_cast<const void*>(dv.p),
                              reinterpret_cast<void*>(dout.p),
                              nullptr,
                              kS * qr,
                              qr,
                              kD,
                              kS * kr,
                              kr,
                              kD,
                              kS * kr,
                              kr,
                              kD,
                              kS * qr,
                              qr,
                              kD,
                              0.f};  // <= 0: 1 / sqrt(head_dim)
    rt.attention_prefill(p, a, nullptr);
    std::vector<uint16_t> out(nq);
    cu_check(cu().dtoh(out.data(), dout.p, nq * 2), "cuMemcpyDtoH o");  // synchronizes the legacy stream

    // 64 query rows spread over the sequence (the first and the last among them), every head.
    const double scale = 1.0 / std::sqrt(double(kD));
    double err2 = 0, ref2 = 0;
    int rows = 0;
    for (int i = 0; i < 64; ++i) {
      const int row = int((int64_t(i) * (kS - 1)) / 63);
      for (int h = 0; h < kH; ++h) {
        const std::vector<double> o = reference_row(q, k, v, row, h, scale);
        for (int d = 0; d < kD; ++d) {
          const double got = from_bf16(out[(size_t(row) * kH + h) * kD + d]);
          err2 += std::isfinite(got) ? (got - o[d]) * (got - o[d]) : INFINITY;
          ref2 += o[d] * o[d];
        }
      }
      ++rows;
    }
    const double rel = std::sqrt(err2 / ref2), tol = 1e-2;  // bf16 output: 2^-8 relative rounding
    std::printf("rel L2 error %.3e over %d rows x %d heads (tolerance %.0e)\n", rel, rows, kH, tol);
    if (!(rel <= tol)) {
      std::printf("FAIL\n");
      return 1;
    }
    std::printf("PASS\n");
    return 0;
  } catch (const kerntune::Error& e) {
    if (e.status() == KT_ERROR_CUDA && std::string(e.what()).find("no usable GPU") != std::string::npos) {
      std::printf("no GPU found: %s\n", e.what());
      return 0;
    }
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
