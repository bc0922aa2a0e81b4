// [gpu] correctness of attention_prefill variants against the float64 reference.
// Every output (and LSE) element is poisoned with NaN before each launch; inputs are random normal.
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <sstream>

#include "cuda/driver.h"
#include "generator/arch.h"
#include "generator/attention_family.h"
#include "reference/attention_ref.h"
#include "reference/dtype_convert.h"
#include "runtime/attention.h"
#include "tuner/attention_harness.h"

using namespace kt;
using namespace kt::attn;

namespace {

/// Context, stream, arch and a compiler with the default cubin cache, shared by the [gpu] tests.
struct GpuEnv {
  cuda::Context ctx{0};
  cuda::Stream stream;
  ArchId arch{};
  CubinCache cache{CubinCache::default_dir()};
  Compiler compiler{&cache};
  GpuEnv() {
    const auto d = cuda::device_info(0);
    arch = ArchId{d.cc_major * 10 + d.cc_minor, d.cc_major == 9};
  }
  static GpuEnv& get() {
    static GpuEnv env;
    return env;
  }
};

struct Variant {
  Config config;
  std::shared_ptr<LoadedKernel> kernel;
  std::string name;
};

/// Compiles (in parallel) and loads `configs` for the problem class of p.
std::vector<Variant> load_variants(const Problem& p, const std::vector<Config>& configs) {
  auto& env = GpuEnv::get();
  std::vector<KernelSource> src;
  for (const auto& c : configs) src.push_back(kernel_source(p, c, env.arch));
  auto res = env.compiler.compile_all(src);
  std::vector<Variant> out;
  for (size_t i = 0; i < res.size(); ++i) {
    INFO(res[i].kernel.variant_name << "\n" << res[i].error);
    REQUIRE(res[i].ok);
    out.push_back({configs[i],
                   std::make_shared<LoadedKernel>(res[i].cubin, res[i].report.lowered_name,
                                                  unsigned(smem_bytes(configs[i], p.head_dim))),
                   res[i].kernel.variant_name});
  }
  return out;
}

std::string describe(const Problem& p) { return p.key(); }

/// A few wgmma_ws configs (one consumer; two with overlap; two in pingpong, one block per tile and persistent; the
/// 176-key tile in pingpong; three consumers in pingpong; two consumers with GQA packing) where the GPU runs them
/// (sm_90a), else none.
std::vector<Config> ws_configs(ArchId arch) {
  if (!(arch.sm == 90 && arch.arch_specific)) return {};
  return {Config{64, 64, 4, 3, kWgmmaWs, 0, 0, 0, 0},     Config{128, 128, 8, 2, kWgmmaWs, 0, 1, 0, 0},
          Config{128, 128, 8, 2, kWgmmaWs, 1, 1, 1, 0},   Config{128, 128, 8, 2, kWgmmaWs, 1, 1, 1, 1},
          Config{128, 176, 8, 2, kWgmmaWs, 1, 1, 1, 0},   Config{192, 64, 12, 2, kWgmmaWs, 1, 1, 1, 0},
          Config{128, 128, 8, 2, kWgmmaWs, 0, 1, 1, 0, 1}};
}

/// Runs every variant that can run p (same inputs, one reference) and checks each; a GQA-packed variant runs only
/// problems with 2 to 64 query heads per KV head (pack_gqa_reason).
void check_variants(const Problem& p, const std::vector<Variant>& variants, size_t max_ref_rows, uint64_t seed) {
  auto& env = GpuEnv::get();
  const HostInputs in = make_inputs(p, seed);
  const float scale = contiguous_params(p, nullptr, nullptr, nullptr, nullptr, nullptr).softmax_scale;
  const RefRows ref = reference_rows(in, scale, max_ref_rows, seed + 1);
  DeviceProblem dev(in, 1, true);
  for (const auto& v : variants) {
    if (pack_gqa_reason(p.num_heads, p.num_kv_heads, v.config) != nullptr) {
      CHECK_THROWS_AS(launch(*v.kernel, p, v.config, dev.params(0, 0.f), env.stream.get()), ProblemError);
      continue;
    }
    dev.poison();
    launch(*v.kernel, p, v.config, dev.params(0, 0.f), env.stream.get());
    env.stream.synchronize();
    std::vector<uint16_t> out;
    std::vector<float> lse;
    dev.download(0, out, lse);
    const Verdict verdict = verify(in, ref, out, lse);
    INFO(describe(p) << " with " << v.name << ": rel_l2 " << verdict.rel_l2 << ", lse err " << verdict.lse_max_err
                     << ", " << verdict.message);
    CHECK(verdict.pass);
    CHECK(verdict.unwritten == 0);
    CHECK(verdict.rel_l2 <= tolerance(p.dtype));
  }
}

Problem make(DType dt, int b, int sq, int sk, int hq, int hkv, int d, bool causal) {
  Problem p;
  p.dtype = dt;
  p.batch = b;
  p.seqlen_q = sq;
  p.seqlen_k = sk;
  p.num_heads = hq;
  p.num_kv_heads = hkv;
  p.head_dim = d;
  p.causal = causal;
  return p;
}

}  // namespace

TEST_CASE("every valid variant matches the float64 reference on edge-case problems", "[gpu][attention]") {
  auto& env = GpuEnv::get();
  for (DType dt : {DType::f16, DType::bf16})
    for (int d : {64, 128})
      for (bool causal : {false, true}) {
        const Problem cls = make(dt, 1, 37, 37, 7, 1, d, causal);
        const auto configs = valid_configs(cls, env.arch);
        REQUIRE(configs.size() >= 10);
        const auto variants = load_variants(cls, configs);
        // odd lengths, GQA ratio 7; decode-like single query; Sq > Sk (rows without keys when causal);
        // Sq < Sk; MQA with 2 batches. Every group is 2..64, so the packed variants run each problem.
        for (const Problem& p : {make(dt, 1, 37, 37, 7, 1, d, causal), make(dt, 2, 1, 577, 8, 1, d, causal),
                                 make(dt, 1, 577, 37, 4, 1, d, causal), make(dt, 1, 100, 1000, 7, 1, d, causal),
                                 make(dt, 2, 129, 255, 14, 2, d, causal)})
          check_variants(p, variants, 1 << 14, 17);
      }
}

TEST_CASE("broad problem sweep with a few variants", "[gpu][attention]") {
  auto& env = GpuEnv::get();
  const int ratios[][2] = {{4, 4}, {8, 2}, {28, 4}, {32, 4}};  // Hq/Hkv = 1, 4, 7, 8
  int idx = 0;
  std::map<std::string, std::vector<Variant>> cache;
  auto variants_for = [&](const Problem& p) -> const std::vector<Variant>& {
    const std::string key = variant_name(p, Config{}, env.arch);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    std::vector<Config> cs = {default_config(env.arch, p), Config{64, 64, 4, 2, kMmaSync, 0},
                              Config{128, 64, 8, 3, kMmaSync, 1}};
    for (const Config& c : ws_configs(env.arch)) cs.push_back(c);
    return cache.emplace(key, load_variants(p, cs)).first->second;
  };
  std::vector<Problem> problems;
  for (DType dt : {DType::f16, DType::bf16})
    for (bool causal : {false, true}) {
      for (int s : {1, 37, 577, 1000, 2048})
        for (const auto& r : ratios) {
          const int b = 1 + idx % 2;
          const int d = idx % 3 == 0 ? 64 : 128;
          ++idx;
          problems.push_back(make(dt, b, s, s, r[0], r[1], d, causal));
        }
      for (auto [sq, sk] : {std::pair{1, 2048}, {37, 1000}, {577, 2048}, {1000, 577}, {2048, 37}})
        problems.push_back(make(dt, 1 + idx++ % 2, sq, sk, 28, 4, 128, causal));
    }
  for (const auto& p : problems) check_variants(p, variants_for(p), 768, 1000 + idx++);
}

TEST_CASE("strided Q/K/V views into one fused QKV buffer, no LSE", "[gpu][attention]") {
  auto& env = GpuEnv::get();
  for (DType dt : {DType::f16, DType::bf16}) {
    const Problem p = make(dt, 2, 333, 333, 28, 4, 128, true);
    const int H = p.num_heads + 2 * p.num_kv_heads;
    // Fused buffer [B, S, Hq + 2 Hkv, D]; contiguous copies of its Q, K, V parts for the reference.
    const HostInputs in = make_inputs(p, 5);
    std::vector<uint16_t> fused(size_t(p.batch) * p.seqlen_q * H * p.head_dim);
    for (int b = 0; b < p.batch; ++b)
      for (int s = 0; s < p.seqlen_q; ++s)
        for (int h = 0; h < H; ++h)
          for (int x = 0; x < p.head_dim; ++x) {
            const size_t dst = ((size_t(b) * p.seqlen_q + s) * H + h) * p.head_dim + x;
            if (h < p.num_heads) fused[dst] = in.q[((size_t(b) * p.seqlen_q + s) * p.num_heads + h) * p.head_dim + x];
            else if (h < p.num_heads + p.num_kv_heads)
              fused[dst] = in.k[((size_t(b) * p.seqlen_k + s) * p.num_kv_heads + h - p.num_heads) * p.head_dim + x];
            else
              fused[dst] =
                  in.v[((size_t(b) * p.seqlen_k + s) * p.num_kv_heads + h - p.num_heads - p.num_kv_heads) * p.head_dim +
                       x];
          }
    cuda::DeviceBuffer dfused(fused.size() * 2), dout(in.q.size() * 2);
    dfused.upload(fused.data(), fused.size() * 2);
    dout.fill_u16(0xFFFF);
    const auto base = reinterpret_cast<const uint16_t*>(dfused.ptr());
    FwdParams a =
        contiguous_params(p, base, base + p.num_heads * p.head_dim, base + (p.num_heads + p.num_kv_heads) * p.head_dim,
                          reinterpret_cast<void*>(dout.ptr()), nullptr);
    a.q_row_stride = a.k_row_stride = a.v_row_stride = (long long)H * p.head_dim;
    a.q_batch_stride = a.k_batch_stride = a.v_batch_stride = a.q_row_stride * p.seqlen_q;
    std::vector<Config> cs = {default_config(env.arch, p), Config{128, 64, 8, 2, kMmaSync, 1}};
    for (const Config& c : ws_configs(env.arch)) cs.push_back(c);  // Q, K and V through tensor maps of the views
    const auto variants = load_variants(p, cs);
    const RefRows ref = reference_rows(in, a.softmax_scale, 2048, 3);
    for (const auto& v : variants) {
      dout.fill_u16(0xFFFF);
      launch(*v.kernel, p, v.config, a, env.stream.get());
      env.stream.synchronize();
      std::vector<uint16_t> out(in.q.size());
      dout.download(out.data(), out.size() * 2);
      const Verdict verdict = verify(in, ref, out, {});
      INFO(v.name << ": " << verdict.message);
      CHECK(verdict.pass);
    }
  }
}

TEST_CASE("a custom softmax scale is honoured", "[gpu][attention]") {
  auto& env = GpuEnv::get();
  const Problem p = make(DType::f16, 1, 200, 300, 8, 2, 64, false);
  const HostInputs in = make_inputs(p, 9);
  const float scale = 0.05f;
  const RefRows ref = reference_rows(in, scale, 4096, 2);
  DeviceProblem dev(in, 1, true);
  const auto variants = load_variants(p, {default_config(env.arch, p)});
  launch(*variants[0].kernel, p, variants[0].config, dev.params(0, scale), env.stream.get());
  env.stream.synchronize();
  std::vector<uint16_t> out;
  std::vector<float> lse;
  dev.download(0, out, lse);
  const Verdict v = verify(in, ref, out, lse);
  INFO(v.message);
  CHECK(v.pass);
  // And the default scale gives a different answer (the test can fail).
  const RefRows ref_default = reference_rows(in, 1.0 / 8.0, 4096, 2);
  CHECK_FALSE(verify(in, ref_default, out, lse).pass);
}
