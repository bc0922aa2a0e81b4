// [gpu] kt::Runtime::qkv_proj and the C ABI's kt_qkv_proj on a real device: a tuning database holding
// compiled qkv_proj variants (one split-K), the lookup chain's steps, the runtime's own split-K workspace,
// outputs checked against the float64 reference, and the C ABI's bytes and error codes.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "cache/tuning_db.h"
#include "cuda/driver.h"
#include "generator/arch.h"
#include "generator/compiler.h"
#include "generator/qkv_family.h"
#include "kerntune/kerntune.h"
#include "runtime/runtime.h"
#include "tests/support.h"
#include "tests/winner_db.h"
#include "tuner/qkv_harness.h"

using namespace kt;
using namespace kt::qkv;
namespace fs = std::filesystem;

namespace {

using kt_test::count_files;
using kt_test::ScopedEnv;
using kt_test::TempDir;

/// A small Llama-like class: k 1024, 8 query / 2 key-value heads of 128, bias, RoPE.
Problem small(int m, quant::Format f = quant::Format::nf4, DType dt = DType::bf16) {
  Problem p;
  p.dtype = dt;
  p.format = f;
  p.m = m;
  p.k = 1024;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 128;
  p.has_bias = true;
  p.rope = true;
  return p;
}

kt_qkv_problem c_problem(const Problem& p) {
  return kt_qkv_problem{p.dtype == DType::f16 ? KT_DTYPE_FP16 : KT_DTYPE_BF16,
                        int32_t(p.format),
                        p.m,
                        p.k,
                        p.num_heads,
                        p.num_kv_heads,
                        p.head_dim,
                        p.has_bias ? 1 : 0,
                        p.rope ? 1 : 0};
}

kt_qkv_args c_args(const QkvParams& a, double rope_theta) {
  kt_qkv_args c{};
  c.x = a.x;
  c.w_data = a.w_data;
  c.w_scales = a.w_scales;
  c.w_zeros = a.w_zeros;
  c.bias = a.bias;
  c.positions = reinterpret_cast<const int32_t*>(a.positions);
  c.q = a.q;
  c.k = a.k;
  c.v = a.v;
  c.x_row_stride = a.x_row_stride;
  c.q_row_stride = a.q_row_stride;
  c.k_row_stride = a.k_row_stride;
  c.v_row_stride = a.v_row_stride;
  c.tensor_scale = a.tensor_scale;
  c.rope_theta = rope_theta;
  return c;
}

/// Kernel arguments for the runtime path: no workspace or counters (the runtime owns them).
QkvParams runtime_params(DeviceInputs& dev) {
  const Config unsplit{};  // mma, split_k 1: DeviceInputs then allocates no workspace
  QkvParams a = dev.params(0, unsplit);
  a.workspace = nullptr;
  a.counters = nullptr;
  return a;
}

/// Fresh inputs for p, outputs poisoned with NaN, one launch through `launch`, checked against the float64
/// reference. Returns q, k and v concatenated (for byte comparisons).
template <class F>
std::vector<uint16_t> run_and_verify(const Problem& p, F&& launch, uint64_t seed) {
  const HostInputs in = make_inputs(p, seed);
  const RefRows ref = reference_rows(in, 48, seed + 1);
  DeviceInputs dev(in, 1);
  dev.poison();
  launch(runtime_params(dev), in.rope_theta);
  std::vector<uint16_t> q, k, v;
  dev.download(q, k, v);  // waits for the context
  const Verdict vd = verify(in, ref, q, k, v);
  INFO(p.key() << ": rel_l2 " << vd.rel_l2 << ": " << vd.message);
  CHECK(vd.pass);
  std::vector<uint16_t> all = q;
  all.insert(all.end(), k.begin(), k.end());
  all.insert(all.end(), v.begin(), v.end());
  return all;
}

}  // namespace

TEST_CASE("Runtime::qkv_proj: database winners (exact, nearest), default, split-K workspace, C ABI",
          "[gpu][runtime][qkv]") {
  cuda::Context ctx(0);
  cuda::Stream stream;
  const cuda::DeviceInfo info = cuda::device_info(0);
  const ArchId arch = arch_for_compute_capability(info.cc_major, info.cc_minor);

  const TempDir tmp("kt_runtime_qkv_gpu");
  const std::string db_path = (tmp.path / "tuned.db").string();
  const fs::path cache_dir = tmp.path / "cubins";
  ScopedEnv env_cache("KERNTUNE_CACHE_DIR", cache_dir.string());

  // M = 16: a 4-way split-K variant; M = 256: an unsplit one; M = 64: the M = 16 binary without split-K (one
  // binary, two variants: the binary row carries the split-K variant's name). None is a default.
  const Config c16 = make_config(16, 128, MmaConfig{64, 1, 8, 2, 4, 1});
  const Config c64 = make_config(16, 128, MmaConfig{64, 1, 8, 2, 1, 1});
  const Config c256 = make_config(64, 128, MmaConfig{64, 2, 4, 2, 1, 1});
  for (const auto& [m, c] : {std::pair<int, Config>{16, c16}, {64, c64}, {256, c256}}) {
    REQUIRE(invalid_reason(DType::bf16, quant::Format::nf4, 128, true, c, arch) == nullptr);
    for (int ask : {16, 20, 64, 256}) REQUIRE_FALSE(same_config(c, default_config(arch, small(ask))));
  }
  REQUIRE(name_expression(small(16), c16) == name_expression(small(64), c64));
  REQUIRE(workspace_bytes(small(16), c16, cuda::current_sm_count()) > 0);
  {
    kt_test::WinnerDb wdb(db_path, info, "test_runtime_qkv_gpu");
    std::string hash16;
    for (const auto& [m, c] : {std::pair<int, Config>{16, c16}, {256, c256}, {64, c64}}) {
      const Problem p = small(m);
      const KernelSource src = kernel_source(p, c, arch);
      // M = 64 shares the split-K variant's binary, stored once.
      const std::string hash = m == 64 ? hash16 : wdb.put_binary(src);
      if (m == 16) hash16 = hash;
      wdb.add(kFamily, p.key(), problem_to_json(p).dump(), src.variant_name, config_to_json(c).dump(), hash, 7);
    }
    REQUIRE(wdb.finish(info.name, kFamily) == 3);
  }
  REQUIRE(count_files(cache_dir) == 0);

  Runtime rt(db_path);
  REQUIRE(rt.device_name() == info.name);

  SECTION("explain and launch: exact, nearest (from the database, no NVRTC), default (NVRTC)") {
    auto ch = rt.explain_qkv(small(16));
    CHECK(ch.step == "exact");
    CHECK(same_config(ch.config, c16));
    CHECK(ch.variant_name == variant_name(small(16), c16, arch));
    ch = rt.explain_qkv(small(20));
    INFO(ch.why);
    CHECK(ch.step == "nearest");
    CHECK(ch.tuned_problem_key == small(16).key());  // |ln(20/16)| = 0.22 < |ln(64/20)| = 1.16
    CHECK(same_config(ch.config, c16));
    CHECK(rt.explain_qkv(small(64)).step == "exact");
    CHECK(same_config(rt.explain_qkv(small(256)).config, c256));

    for (int m : {16, 20, 64, 256}) {
      const Problem p = small(m);
      const auto launch = [&](const QkvParams& a, double) { rt.qkv_proj(p, a, stream.get()); };
      run_and_verify(p, launch, 100 + m);
      // Again on the resolved path: the split-K counters reset themselves, the workspace is reused.
      run_and_verify(p, launch, 200 + m);
    }
    CHECK(rt.resolved_qkv_problems() == 4);
    CHECK(rt.resolved_problems() == 0);
    // Every kernel came from the database (M = 64's through the shared binary): nothing compiled.
    CHECK(count_files(cache_dir) == 0);

    // Another format and an M with no rows: the default, compiled by NVRTC into the disk cache.
    const Problem other = small(37, quant::Format::int4, DType::f16);
    const auto def = rt.explain_qkv(other);
    CHECK(def.step == "default");
    CHECK(same_config(def.config, default_config(rt.arch(), other)));
    CHECK(def.binary_hash.empty());
    run_and_verify(
        other, [&](const QkvParams& a, double) { rt.qkv_proj(other, a, stream.get()); }, 5);
    run_and_verify(
        other, [&](const QkvParams& a, double) { rt.qkv_proj(other, a, stream.get()); }, 6);
    CHECK(count_files(cache_dir) == 1);
    CHECK(rt.resolved_qkv_problems() == 5);

    // Decode sizes default to the gemv kernel, with 16-bit weights on sm_90a to wgmma_ws 8 x 128 with 8 ring slots
    // (generator/qkv_family.cpp default_config). Either one's shared memory is above 48 KB here (gemv with stages 1
    // and fp16 weights: 16 rows x 8 KB), which the runtime must allow when it loads the binary.
    const bool sm90a = rt.arch().sm == 90 && rt.arch().arch_specific;
    for (auto [f, d] : {std::pair{quant::Format::nf4, DType::bf16}, {quant::Format::fp16, DType::f16}}) {
      Problem dp = small(1, f, d);
      dp.k = 4096;
      const auto dch = rt.explain_qkv(dp);
      INFO(dch.variant_name);
      CHECK(dch.step == "default");
      CHECK(dch.config.mainloop == (sm90a && f == quant::Format::fp16 ? Mainloop::wgmma_ws : Mainloop::gemv));
      run_and_verify(
          dp, [&](const QkvParams& a, double) { rt.qkv_proj(dp, a, stream.get()); }, 7);
    }
    CHECK(rt.resolved_qkv_problems() == 7);

    // 4-bit weights at 512 < M <= 2048 on sm_90a default to wgmma_ws stream-K: the runtime allocates its workspace
    // for this device's SM count, and the second launch reuses it (the counters reset themselves).
    const Problem mid = small(600, quant::Format::nf4, DType::bf16);
    const auto mch = rt.explain_qkv(mid);
    INFO(mch.variant_name);
    CHECK(mch.step == "default");
    if (sm90a) CHECK((mch.config.mainloop == Mainloop::wgmma_ws && ws_stream_k(mch.config)));
    const auto mid1 = run_and_verify(
        mid, [&](const QkvParams& a, double) { rt.qkv_proj(mid, a, stream.get()); }, 8);
    const auto mid2 = run_and_verify(
        mid, [&](const QkvParams& a, double) { rt.qkv_proj(mid, a, stream.get()); }, 8);
    CHECK(mid1 == mid2);  // same inputs: the same bits (partials added in block order)
    CHECK(rt.resolved_qkv_problems() == 8);

    // K-blocked 16-bit weights (fp16_kb64): the defaults on sm_90a are wgmma_ws at M 1 and wgmma_pairs at M 200, both
    // reading the layout through the tensor map the runtime encodes for the format.
    if (sm90a) {
      for (int m : {1, 200}) {
        const Problem kp = small(m, quant::Format::fp16_kb64, DType::f16);
        const auto kch = rt.explain_qkv(kp);
        INFO(kch.variant_name);
        CHECK(kch.step == "default");
        CHECK(kch.config.mainloop == (m == 1 ? Mainloop::wgmma_ws : Mainloop::wgmma_pairs));
        run_and_verify(
            kp, [&](const QkvParams& a, double) { rt.qkv_proj(kp, a, stream.get()); }, 9 + m);
      }
      CHECK(rt.resolved_qkv_problems() == 10);
    }
  }

  SECTION("bad arguments are rejected before anything is resolved") {
    const HostInputs in = make_inputs(small(16), 3);
    DeviceInputs dev(in, 1);
    QkvParams a = runtime_params(dev);
    a.w_scales = nullptr;
    try {
      rt.qkv_proj(small(16), a, stream.get());
      FAIL("null w_scales accepted");
    } catch (const ProblemError& e) {
      CHECK(std::string(e.what()).find("w_scales") != std::string::npos);
    }
    a = runtime_params(dev);
    a.m = 17;
    CHECK_THROWS_AS(rt.qkv_proj(small(16), a, stream.get()), ProblemError);
    CHECK(rt.resolved_qkv_problems() == 0);
  }

  SECTION("C ABI: same bytes as the C++ call, explain, error codes") {
    kt_runtime* crt = nullptr;
    REQUIRE(kt_runtime_create(db_path.c_str(), &crt) == KT_OK);
    for (int m : {16, 20, 256}) {
      const Problem p = small(m);
      const auto cpp = run_and_verify(
          p, [&](const QkvParams& a, double) { rt.qkv_proj(p, a, stream.get()); }, 55 + m);
      const auto c = run_and_verify(
          p,
          [&](const QkvParams& a, double theta) {
            const kt_qkv_problem cp = c_problem(p);
            const kt_qkv_args ca = c_args(a, theta);
            const kt_status s = kt_qkv_proj(crt, &cp, &ca, stream.get());
            INFO(kt_last_error());
            REQUIRE(s == KT_OK);
          },
          55 + m);
      CHECK(cpp == c);
    }

    char buf[1024];
    kt_qkv_problem cp = c_problem(small(16));
    REQUIRE(kt_qkv_explain(crt, &cp, buf, sizeof buf) == KT_OK);
    CHECK(std::string(buf).rfind("exact: " + variant_name(small(16), c16, arch) + ": ", 0) == 0);
    cp = c_problem(small(20));
    REQUIRE(kt_qkv_explain(crt, &cp, buf, sizeof buf) == KT_OK);
    CHECK(std::string(buf).rfind("nearest: ", 0) == 0);
    CHECK(std::string(buf).find(small(16).key()) != std::string::npos);
    char tiny[5];
    REQUIRE(kt_qkv_explain(crt, &cp, tiny, sizeof tiny) == KT_OK);
    CHECK(std::string(tiny) == "near");

    const HostInputs in = make_inputs(small(16), 3);
    DeviceInputs dev(in, 1);
    const kt_qkv_args good = c_args(runtime_params(dev), in.rope_theta);
    kt_qkv_args args = good;
    // k = 100: not a multiple of 64. UNSUPPORTED naming k.
    cp = c_problem(small(16));
    cp.k = 100;
    CHECK(kt_qkv_proj(crt, &cp, &args, stream.get()) == KT_ERROR_UNSUPPORTED);
    CHECK(std::string(kt_last_error()).find("k = 100") != std::string::npos);
    CHECK(kt_qkv_explain(crt, &cp, buf, sizeof buf) == KT_ERROR_UNSUPPORTED);
    // Malformed problems: INVALID_ARGUMENT.
    cp = c_problem(small(16));
    cp.weight_format = 14;  // one past KT_WEIGHT_NVFP4_KB128
    CHECK(kt_qkv_proj(crt, &cp, &args, stream.get()) == KT_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(kt_last_error()).find("weight_format") != std::string::npos);
    cp = c_problem(small(16));
    cp.m = 0;
    CHECK(kt_qkv_proj(crt, &cp, &args, stream.get()) == KT_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(kt_last_error()).find("m must be >= 1") != std::string::npos);
    // Bad arguments: INVALID_ARGUMENT naming them.
    cp = c_problem(small(16));
    args.x = nullptr;
    CHECK(kt_qkv_proj(crt, &cp, &args, stream.get()) == KT_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(kt_last_error()).find("x is NULL") != std::string::npos);
    args = good;
    args.w_scales = nullptr;
    CHECK(kt_qkv_proj(crt, &cp, &args, stream.get()) == KT_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(kt_last_error()).find("w_scales") != std::string::npos);
    args = good;
    args.rope_theta = 0;
    CHECK(kt_qkv_proj(crt, &cp, &args, stream.get()) == KT_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(kt_last_error()).find("rope_theta") != std::string::npos);
    args = good;
    args.q_row_stride += 1;
    CHECK(kt_qkv_proj(crt, &cp, &args, stream.get()) == KT_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(kt_last_error()).find("stride") != std::string::npos);
    CHECK(kt_qkv_proj(nullptr, &cp, &good, stream.get()) == KT_ERROR_INVALID_ARGUMENT);
    CHECK(kt_qkv_proj(crt, nullptr, &good, stream.get()) == KT_ERROR_INVALID_ARGUMENT);
    CHECK(kt_qkv_proj(crt, &cp, nullptr, stream.get()) == KT_ERROR_INVALID_ARGUMENT);
    CHECK(kt_qkv_explain(crt, &cp, buf, 0) == KT_ERROR_INVALID_ARGUMENT);
    // The good arguments still work after all that.
    CHECK(kt_qkv_proj(crt, &cp, &good, stream.get()) == KT_OK);
    stream.synchronize();
    kt_runtime_destroy(crt);
  }
}
