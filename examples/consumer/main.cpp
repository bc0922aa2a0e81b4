// Uses kerntune through its installed public headers only (examples/consumer/CMakeLists.txt): prints the version,
// quantizes a weight to NF4 on the host and checks it against its own round trip, then opens a runtime on the
// database given as argv[1] (when there is one) and explains the kernel it would pick for a Qwen2.5-7B prefill.
// Exit status 0 when every step that this machine can run worked.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kerntune/kerntune.hpp"

int main(int argc, char** argv) {
  std::printf("kerntune %s\n", kerntune::version().c_str());
  const int n = 64, k = 128;
  std::vector<float> w(size_t(n) * k);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (auto& x : w) x = normal(rng);
  try {
    const kerntune::QuantizedWeight q = kerntune::quantize(KT_WEIGHT_NF4_KB128, w, n, k);
    const std::vector<double> back = kerntune::dequantize(KT_WEIGHT_NF4_KB128, q, n, k);
    double err = 0, ref = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      err += (back[i] - w[i]) * (back[i] - w[i]);
      ref += double(w[i]) * w[i];
    }
    std::printf("nf4_kb128 [%d x %d]: %zu data bytes, %zu scale bytes, relative L2 error %.3f\n", n, k, q.data.size(),
                q.scales.size(), std::sqrt(err / ref));
    if (!(std::sqrt(err / ref) < 0.15)) return 1;        // 4-bit NF4 of normal data: about 0.1
    kerntune::quantize(KT_WEIGHT_NF4_KB128, w, n, 100);  // k not a multiple of 64: throws
    std::printf("error: a bad shape was accepted\n");
    return 1;
  } catch (const kerntune::Error& e) {
    std::printf("refused as expected: %s\n", e.what());
  }
  if (argc < 2) return 0;
  try {
    kerntune::Runtime rt(argv[1]);
    kt_attention_problem p{};
    p.dtype = KT_DTYPE_BF16;
    p.batch = 1;
    p.seqlen_q = p.seqlen_k = 2048;
    p.num_heads = 28;
    p.num_kv_heads = 4;
    p.head_dim = 128;
    p.causal = 1;
    std::printf("%s\n", rt.explain_attention(p).c_str());
  } catch (const kerntune::Error& e) {
    std::printf("runtime: %s\n", e.what());
    return e.status() == KT_ERROR_CUDA ? 0 : 1;  // no GPU on this machine: the runtime says so
  }
  return 0;
}
