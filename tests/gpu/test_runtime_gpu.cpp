// [gpu] kt::Runtime and the C ABI on a real device: a tuning database holding two compiled variants
// for two problems, the lookup chain's steps, launches checked against the float64 reference, and
// the C ABI's outputs and error codes.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "cache/tuning_db.h"
#include "cuda/driver.h"
#include "generator/arch.h"
#include "generator/attention_family.h"
#include "generator/compiler.h"
#include "kerntune/kerntune.h"
#include "runtime/runtime.h"
#include "tests/support.h"
#include "tests/winner_db.h"
#include "tuner/attention_harness.h"

using namespace kt;
using namespace kt::attn;
namespace fs = std::filesystem;

namespace {

using kt_test::count_files;
using kt_test::ScopedEnv;
using kt_test::TempDir;

Problem qwen(int seqlen, int head_dim = 128) {
  Problem p;
  p.dtype = DType::bf16;
  p.batch = 1;
  p.seqlen_q = seqlen;
  p.seqlen_k = seqlen;
  p.num_heads = 28;
  p.num_kv_heads = 4;
  p.head_dim = head_dim;
  p.causal = true;
  return p;
}

kt_attention_problem c_problem(const Problem& p) {
  return kt_attention_problem{p.dtype == DType::f16 ? KT_DTYPE_FP16 : KT_DTYPE_BF16,
                              p.batch,
                              p.seqlen_q,
                              p.seqlen_k,
                              p.num_heads,
                              p.num_kv_heads,
                              p.head_dim,
                              p.causal ? 1 : 0};
}

kt_attention_args c_args(const FwdParams& f) {
  kt_attention_args a{};
  a.q = f.q;
  a.k = f.k;
  a.v = f.v;
  a.o = f.o;
  a.lse = f.lse;
  a.q_stride_batch = f.q_batch_stride;
  a.q_stride_row = f.q_row_stride;
  a.q_stride_head = f.q_head_stride;
  a.k_stride_batch = f.k_batch_stride;
  a.k_stride_row = f.k_row_stride;
  a.k_stride_head = f.k_head_stride;
  a.v_stride_batch = f.v_batch_stride;
  a.v_stride_row = f.v_row_stride;
  a.v_stride_head = f.v_head_stride;
  a.o_stride_batch = f.o_batch_stride;
  a.o_stride_row = f.o_row_stride;
  a.o_stride_head = f.o_head_stride;
  a.softmax_scale = 0.f;
  return a;
}

/// Launches p through `launch` on fresh random inputs and checks against the float64 reference.
template <class F>
std::vector<uint16_t> run_and_verify(const Problem& p, F&& launch, uint64_t seed) {
  const HostInputs in = make_inputs(p, seed);
  const float scale = contiguous_params(p, nullptr, nullptr, nullptr, nullptr, nullptr).softmax_scale;
  const RefRows ref = reference_rows(in, scale, 1024, seed + 1);
  DeviceProblem dev(in, 1, true);
  dev.poison();
  launch(dev.params(0, 0.f));
  std::vector<uint16_t> out;
  std::vector<float> lse;
  dev.download(0, out, lse);
  const Verdict v = verify(in, ref, out, lse);
  INFO(p.key() << ": rel_l2 " << v.rel_l2 << ", lse err " << v.lse_max_err << ": " << v.message);
  CHECK(v.pass);
  return out;
}

}  // namespace

TEST_CASE("Runtime: database winners (exact, nearest), default, launches and the C ABI", "[gpu][runtime]") {
  cuda::Context ctx(0);
  cuda::Stream stream;
  const cuda::DeviceInfo info = cuda::device_info(0);
  const ArchId arch = arch_for_compute_capability(info.cc_major, info.cc_minor);

  // Temp DB and an empty cubin cache directory: whatever the runtime compiles lands there.
  const TempDir tmp("kt_runtime_gpu");
  const std::string db_path = (tmp.path / "tuned.db").string();
  const fs::path cache_dir = tmp.path / "cubins";
  ScopedEnv env_cache("KERNTUNE_CACHE_DIR", cache_dir.string());

  // Two variants of the Qwen class, compiled without any cache, stored as binaries + ok measurements.
  const Config c512{64, 64, 4, 2, kMmaSync, 0};
  const Config c2048{128, 64, 4, 3, kMmaSync, 1};
  REQUIRE(invalid_reason(DType::bf16, 128, true, c512, arch) == nullptr);
  REQUIRE(invalid_reason(DType::bf16, 128, true, c2048, arch) == nullptr);
  REQUIRE_FALSE(same_config(c512, default_config(arch, qwen(512))));
  REQUIRE_FALSE(same_config(c2048, default_config(arch, qwen(512))));
  {
    kt_test::WinnerDb wdb(db_path, info, "test_runtime_gpu");
    for (auto [p, c] : {std::pair<Problem, Config>{qwen(512), c512}, {qwen(2048), c2048}}) {
      const KernelSource src = kernel_source(p, c, arch);
      wdb.add(kFamily, p.key(), problem_to_json(p).dump(), src.variant_name, config_to_json(c).dump(),
              wdb.put_binary(src), 42);
    }
    REQUIRE(wdb.finish(info.name, kFamily) == 2);
  }
  REQUIRE(count_files(cache_dir) == 0);

  Runtime rt(db_path);
  CHECK(rt.has_db());
  CHECK(rt.device_name() == info.name);
  CHECK(rt.context() == ctx.get());

  SECTION("explain and launch from the database, no NVRTC") {
    const auto exact = rt.explain(qwen(512));
    CHECK(exact.step == "exact");
    CHECK(same_config(exact.config, c512));
    CHECK_FALSE(exact.binary_hash.empty());
    const auto nearest = rt.explain(qwen(600));
    INFO(nearest.why);
    CHECK(nearest.step == "nearest");
    CHECK(nearest.tuned_problem_key == qwen(512).key());  // 600 lies in 512's bucket (362..724)
    CHECK(same_config(nearest.config, c512));
    const auto near2k = rt.explain(qwen(1500));
    CHECK(near2k.step == "nearest");
    CHECK(same_config(near2k.config, c2048));

    // 1000 lies in bucket 1024, which has no tuned problem: the default.
    CHECK(rt.explain(qwen(1000)).step == "default");
    for (int s : {512, 600, 1500, 2048, 400}) {
      run_and_verify(
          qwen(s), [&](const FwdParams& f) { rt.attention_prefill(qwen(s), f, stream.get()); }, 100 + s);
      // A second launch of an already-resolved problem takes the cached path.
      run_and_verify(
          qwen(s), [&](const FwdParams& f) { rt.attention_prefill(qwen(s), f, stream.get()); }, 200 + s);
    }
    CHECK(rt.resolved_problems() == 5);
    // Every kernel came from the database: nothing was compiled into the (empty) disk cache.
    CHECK(count_files(cache_dir) == 0);

    // Another head_dim has no tuned problem: the default, compiled by NVRTC into the disk cache.
    const auto def = rt.explain(qwen(512, 64));
    CHECK(def.step == "default");
    CHECK(same_config(def.config, default_config(rt.arch(), qwen(512, 64))));
    run_and_verify(
        qwen(512, 64), [&](const FwdParams& f) { rt.attention_prefill(qwen(512, 64), f, stream.get()); }, 7);
    CHECK(count_files(cache_dir) == 1);
  }

  SECTION("concurrent launches from threads without a current context") {
    const std::vector<int> sizes = {512, 777, 2048, 3000};
    std::vector<HostInputs> ins;
    std::vector<std::unique_ptr<DeviceProblem>> devs;
    for (size_t i = 0; i < sizes.size(); ++i) {
      ins.push_back(make_inputs(qwen(sizes[i]), 300 + i));
      devs.push_back(std::make_unique<DeviceProblem>(ins.back(), 1, true));
      devs.back()->poison();
    }
    std::vector<std::string> errors(sizes.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < sizes.size(); ++i)
      threads.emplace_back([&, i] {
        try {
          for (int rep = 0; rep < 3; ++rep) rt.attention_prefill(qwen(sizes[i]), devs[i]->params(0, 0.f), nullptr);
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    ctx.synchronize();
    for (size_t i = 0; i < sizes.size(); ++i) {
      INFO(sizes[i] << ": " << errors[i]);
      CHECK(errors[i].empty());
      const RefRows ref = reference_rows(ins[i], 1.0 / std::sqrt(128.0), 512, 9);
      std::vector<uint16_t> out;
      std::vector<float> lse;
      devs[i]->download(0, out, lse);
      const Verdict v = verify(ins[i], ref, out, lse);
      INFO(v.message);
      CHECK(v.pass);
    }
    CHECK(rt.resolved_problems() == sizes.size());
  }

  SECTION("C ABI: same bytes as the C++ call, explain, error codes") {
    kt_runtime* crt = nullptr;
    REQUIRE(kt_runtime_create(db_path.c_str(), &crt) == KT_OK);
    REQUIRE(crt != nullptr);
    CHECK(std::string(kt_version()) == "0.1.0");
    CHECK(std::string(kt_status_string(KT_ERROR_UNSUPPORTED)) == "KT_ERROR_UNSUPPORTED");

    for (int s : {512, 1000}) {
      const Problem p = qwen(s);
      const auto cpp = run_and_verify(
          p, [&](const FwdParams& f) { rt.attention_prefill(p, f, stream.get()); }, 55);
      const auto c = run_and_verify(
          p,
          [&](const FwdParams& f) {
            const kt_attention_problem cp = c_problem(p);
            const kt_attention_args ca = c_args(f);
            INFO(kt_last_error());
            REQUIRE(kt_attention_prefill(crt, &cp, &ca, stream.get()) == KT_OK);
          },
          55);
      CHECK(cpp == c);
    }

    char buf[1024];
    kt_attention_problem cp = c_problem(qwen(512));
    REQUIRE(kt_attention_explain(crt, &cp, buf, sizeof buf) == KT_OK);
    CHECK(std::string(buf).rfind("exact: " + rt.explain(qwen(512)).variant_name + ": ", 0) == 0);
    cp = c_problem(qwen(600));
    REQUIRE(kt_attention_explain(crt, &cp, buf, sizeof buf) == KT_OK);
    CHECK(std::string(buf).rfind("nearest: ", 0) == 0);
    char small[8];
    REQUIRE(kt_attention_explain(crt, &cp, small, sizeof small) == KT_OK);
    CHECK(std::string(small) == "nearest");
    // The family-generic explain answers as the typed one, through the registry.
    char generic[1024];
    REQUIRE(kt_explain(crt, "attention_prefill", attn::problem_to_json(qwen(600)).dump().c_str(), generic,
                       sizeof generic) == KT_OK);
    CHECK(std::string(generic) == std::string(buf));
    CHECK(rt.explain("attention_prefill", attn::problem_to_json(qwen(600))).why == rt.explain(qwen(600)).why);
    CHECK(kt_explain(crt, "gemm", "{}", generic, sizeof generic) == KT_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(kt_last_error()).find("unknown family 'gemm'") != std::string::npos);
    CHECK(kt_explain(crt, "attention_prefill", "{\"dtype\":", generic, sizeof generic) == KT_ERROR_INVALID_ARGUMENT);
    CHECK(kt_explain(crt, "attention_prefill", "{\"dtype\":\"bf16\"}", generic, sizeof generic) ==
          KT_ERROR_INVALID_ARGUMENT);
    attn::Problem p96 = qwen(64);
    p96.head_dim = 96;
    CHECK(kt_explain(crt, "attention_prefill", attn::problem_to_json(p96).dump().c_str(), generic, sizeof generic) ==
          KT_ERROR_UNSUPPORTED);

    // Unsupported head_dim: KT_ERROR_UNSUPPORTED naming the rule.
    const HostInputs in = make_inputs(qwen(64), 3);
    DeviceProblem dev(in, 1, false);
    kt_attention_args args = c_args(dev.params(0, 0.f));
    cp = c_problem(qwen(64));
    cp.head_dim = 96;
    CHECK(kt_attention_prefill(crt, &cp, &args, stream.get()) == KT_ERROR_UNSUPPORTED);
    CHECK(std::string(kt_last_error()).find("head_dim") != std::string::npos);
    CHECK(kt_attention_explain(crt, &cp, buf, sizeof buf) == KT_ERROR_UNSUPPORTED);
    // Null q: KT_ERROR_INVALID_ARGUMENT naming q.
    cp = c_problem(qwen(64));
    args.q = nullptr;
    CHECK(kt_attention_prefill(crt, &cp, &args, stream.get()) == KT_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(kt_last_error()).find("q is NULL") != std::string::npos);
    // A misaligned stride: INVALID_ARGUMENT from the argument checks.
    args = c_args(dev.params(0, 0.f));
    args.q_stride_row += 1;
    CHECK(kt_attention_prefill(crt, &cp, &args, stream.get()) == KT_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(kt_last_error()).find("stride") != std::string::npos);
    // Null runtime / output handle; bad database file.
    CHECK(kt_attention_prefill(nullptr, &cp, &args, stream.get()) == KT_ERROR_INVALID_ARGUMENT);
    CHECK(kt_runtime_create(db_path.c_str(), nullptr) == KT_ERROR_INVALID_ARGUMENT);
    kt_runtime* bad = reinterpret_cast<kt_runtime*>(1);
    CHECK(kt_runtime_create((tmp.path / "missing.db").string().c_str(), &bad) == KT_ERROR_DATABASE);
    CHECK(bad == nullptr);
    kt_runtime_destroy(crt);
  }
}

TEST_CASE("Runtime: a database tuned on another GPU of this architecture serves its winners, and explain says so",
          "[gpu][runtime]") {
  cuda::Context ctx(0);
  cuda::Stream stream;
  const cuda::DeviceInfo info = cuda::device_info(0);
  const ArchId arch = arch_for_compute_capability(info.cc_major, info.cc_minor);
  const TempDir tmp("kt_runtime_other_gpu");
  const std::string db_path = (tmp.path / "tuned.db").string();
  ScopedEnv env_cache("KERNTUNE_CACHE_DIR", (tmp.path / "cubins").string());
  // The winner is stored under another device name (and uuid) of the same compute capability.
  cuda::DeviceInfo other = info;
  other.name = "Another GPU of " + arch_name(arch);
  other.uuid = "GPU-other-" + info.uuid;
  const Config c512{64, 64, 4, 2, kMmaSync, 0};
  REQUIRE(invalid_reason(DType::bf16, 128, true, c512, arch) == nullptr);
  REQUIRE_FALSE(same_config(c512, default_config(arch, qwen(512))));
  {
    kt_test::WinnerDb wdb(db_path, other, "test_runtime_gpu other device");
    const KernelSource src = kernel_source(qwen(512), c512, arch);
    wdb.add(kFamily, qwen(512).key(), problem_to_json(qwen(512)).dump(), src.variant_name, config_to_json(c512).dump(),
            wdb.put_binary(src), 42);
    REQUIRE(wdb.finish(other.name, kFamily) == 1);
  }
  Runtime rt(db_path);
  const Runtime::Choice ch = rt.explain(qwen(512));
  CHECK(ch.step == "exact");
  CHECK(same_config(ch.config, c512));
  CHECK_THAT(ch.why, Catch::Contains("this GPU is " + info.name));
  CHECK_THAT(ch.why, Catch::Contains(other.name));
  run_and_verify(
      qwen(512), [&](const FwdParams& f) { rt.attention_prefill(qwen(512), f, stream.get()); }, 71);
}
