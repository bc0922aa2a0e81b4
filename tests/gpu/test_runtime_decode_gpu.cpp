// [gpu] kt::Runtime::attention_decode and the C ABI's kt_attention_decode on a real device: a tuning database holding
// one compiled split variant, the lookup chain's steps (exact, nearest bucket, default), the runtime's own split
// partials and counters, outputs checked against the float64 reference on poisoned buffers: paged caches over a
// shuffled block table, ragged lengths including 0 and the capacity, kv_len a bucket above the longest sequence;
// and the tuner's measuring session on a few candidates.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "cache/tuning_db.h"
#include "cuda/driver.h"
#include "generator/arch.h"
#include "generator/compiler.h"
#include "generator/decode_family.h"
#include "kerntune/kerntune.h"
#include "reference/dtype_convert.h"
#include "runtime/decode.h"
#include "runtime/runtime.h"
#include "tests/support.h"
#include "tests/winner_db.h"
#include "tuner/decode_harness.h"
#include "tuner/tuner_registry.h"

using namespace kt;
using namespace kt::decode;
namespace fs = std::filesystem;

namespace {

using kt_test::count_files;
using kt_test::ScopedEnv;
using kt_test::TempDir;

/// Qwen2.5-7B heads (28 / 4, D 128: GQA 7), bf16, a paged cache of 64-token pages.
Problem qwen(int batch, int kv_len, int q_len = 1, KvLayout layout = KvLayout::paged, int page = 64) {
  Problem p;
  p.dtype = DType::bf16;
  p.batch = batch;
  p.q_len = q_len;
  p.num_heads = 28;
  p.num_kv_heads = 4;
  p.head_dim = 128;
  p.kv_len = kv_len;
  p.kv_layout = layout;
  p.page_size = layout == KvLayout::paged ? page : 0;
  p.causal = true;
  return p;
}

kt_attention_decode_problem c_problem(const Problem& p) {
  return kt_attention_decode_problem{p.dtype == DType::f16 ? KT_DTYPE_FP16 : KT_DTYPE_BF16,
                                     p.batch,
                                     p.q_len,
                                     p.num_heads,
                                     p.num_kv_heads,
                                     p.head_dim,
                                     p.kv_len,
                                     p.kv_layout == KvLayout::paged ? 1 : 0,
                                     p.page_size,
                                     p.causal ? 1 : 0};
}

kt_attention_decode_args c_args(const Problem& p, const DecodeParams& a) {
  const bool paged = p.kv_layout == KvLayout::paged;
  kt_attention_decode_args c{};
  c.q = a.q;
  c.k = a.k;
  c.v = a.v;
  c.o = a.o;
  c.lse = a.lse;
  c.seqlens_k = a.seqlens_k;
  c.block_table = a.block_table;
  c.q_stride_batch = a.q_batch_stride;
  c.q_stride_row = a.q_row_stride;
  c.q_stride_head = a.q_head_stride;
  c.k_stride_batch = paged ? a.k_page_stride : a.k_batch_stride;
  c.k_stride_row = a.k_row_stride;
  c.k_stride_head = a.k_head_stride;
  c.v_stride_batch = paged ? a.v_page_stride : a.v_batch_stride;
  c.v_stride_row = a.v_row_stride;
  c.v_stride_head = a.v_head_stride;
  c.o_stride_batch = a.o_batch_stride;
  c.o_stride_row = a.o_row_stride;
  c.o_stride_head = a.o_head_stride;
  c.block_table_stride = a.block_table_stride;
  c.s_max = paged ? 0 : a.kv_capacity;
  c.num_pages = a.num_pages;
  c.max_pages_per_seq = paged ? a.kv_capacity / p.page_size : 0;
  c.softmax_scale = a.softmax_scale;
  return c;
}

/// Inputs with the given lengths, outputs poisoned with NaN, one launch through `launch`, checked against the
/// float64 reference (every row of up to four sequences, the empty one included when it is drawn). Returns O's bits.
template <class F>
std::vector<uint16_t> run_and_verify(const Problem& p, const std::vector<int>& lens, int capacity, F&& launch,
                                     uint64_t seed) {
  const HostInputs in = make_inputs(p, seed, lens, capacity);
  const RefRows ref = reference_rows(in, 1.0 / std::sqrt(double(p.head_dim)), 4096, seed + 1);
  DeviceProblem dev(in, 1, true);
  dev.poison();
  launch(dev.params(0, 0.f));
  std::vector<uint16_t> o;
  std::vector<float> lse;
  dev.download(0, o, lse);  // waits for the context
  const Verdict vd = verify(in, ref, o, lse);
  INFO(p.key() << ": rel_l2 " << vd.rel_l2 << ", lse error " << vd.lse_max_err << ": " << vd.message);
  CHECK(vd.pass);
  // A sequence of length 0: o = 0 and lse = -inf on every row.
  for (int b = 0; b < p.batch; ++b) {
    if (lens[b] != 0) continue;
    const size_t n = size_t(p.q_len) * p.num_heads * p.head_dim;
    for (size_t e = 0; e < n; ++e) {
      INFO("sequence " << b << " element " << e);
      REQUIRE(dtype_to_float(p.dtype, o[b * n + e]) == 0.f);
    }
    for (int r = 0; r < p.num_heads * p.q_len; ++r) {
      const float l = lse[size_t(b) * p.num_heads * p.q_len + r];
      CHECK((std::isinf(l) && l < 0));
    }
  }
  return o;
}

}  // namespace

TEST_CASE("Runtime::attention_decode: tuned split variant (exact, nearest), default, paged and contiguous, C ABI",
          "[gpu][runtime][decode]") {
  cuda::Context ctx(0);
  cuda::Stream stream;
  const cuda::DeviceInfo info = cuda::device_info(0);
  const ArchId arch = arch_for_compute_capability(info.cc_major, info.cc_minor);
  TempDir tmp("kt_runtime_decode_gpu");
  const std::string db_path = (tmp.path / "tuned.db").string();
  const fs::path cache_dir = tmp.path / "cubins";
  ScopedEnv env_cache("KERNTUNE_CACHE_DIR", cache_dir.string());

  // One tuned problem: B 4, kv_len 2048, paged, split in chunks of 256 (8 splits), 2 warps: never the default's
  // shape (4 warps), so the exact step is told apart from the default.
  const Problem tuned = qwen(4, 2048);
  const Config ct{16, 32, 2, 3, 256};
  REQUIRE(invalid_reason(tuned.dtype, tuned.head_dim, tuned.kv_layout, ct, arch) == nullptr);
  REQUIRE_FALSE(same_config(ct, default_config(arch, tuned)));
  REQUIRE(uses_workspace(tuned, ct));
  {
    kt_test::WinnerDb wdb(db_path, info, "test_runtime_decode_gpu");
    const KernelSource src = kernel_source(tuned, ct, arch);
    wdb.add(kFamily, tuned.key(), problem_to_json(tuned).dump(), src.variant_name, config_to_json(ct).dump(),
            wdb.put_binary(src), 9);
    REQUIRE(wdb.finish(info.name, kFamily) == 1);
  }
  Runtime rt(db_path);

  SECTION("exact and nearest from the database (no NVRTC), ragged lengths, repeated launches") {
    CHECK(rt.explain(kFamily, problem_to_json(tuned)).step == "exact");
    const Problem near = qwen(3, 2560);  // batch and kv_len in the tuned problem's bucket (4, 2048)
    const FamilyChoice ch = rt.explain(kFamily, problem_to_json(near));
    INFO(ch.why);
    CHECK(ch.step == "nearest");
    CHECK(ch.tuned_problem_key == tuned.key());
    CHECK(rt.explain(kFamily, problem_to_json(qwen(3, 4096))).step == "default");  // bucket (4, 4096): not tuned
    // Ragged: the full capacity, empty, a page boundary crossed by one token, one token.
    const std::vector<int> lens4 = {2048, 0, 65, 1};
    const auto launch_t = [&](const DecodeParams& a) { rt.attention_decode(tuned, a, stream.get()); };
    const auto o1 = run_and_verify(tuned, lens4, 2048, launch_t, 3);
    const auto o2 = run_and_verify(tuned, lens4, 2048, launch_t, 3);
    CHECK(o1 == o2);  // deterministic combine; the counters were reset by the first launch
    const std::vector<int> lens3 = {2560, 1000, 17};
    run_and_verify(
        near, lens3, 2560, [&](const DecodeParams& a) { rt.attention_decode(near, a, stream.get()); }, 4);
    run_and_verify(
        near, {0, 0, 2000}, 2560, [&](const DecodeParams& a) { rt.attention_decode(near, a, stream.get()); }, 5);
    CHECK(rt.resolved_problems(kFamily) == 2);
    CHECK(count_files(cache_dir) == 0);  // both from the database's binary
  }

  SECTION("defaults: speculative decode, contiguous and paged, fp16, D 64, MQA and MHA") {
    struct Case {
      Problem p;
      std::vector<int> lens;
      int capacity;
    };
    Problem spec = qwen(16, 4096, 4);
    Problem contig = qwen(2, 4097, 5, KvLayout::contiguous);
    Problem mqa = qwen(3, 300, 2, KvLayout::paged, 16);
    mqa.dtype = DType::f16;
    mqa.head_dim = 64;
    mqa.num_heads = 8;
    mqa.num_kv_heads = 1;
    Problem mha = qwen(2, 777, 16, KvLayout::paged, 256);
    mha.num_heads = mha.num_kv_heads = 4;
    std::vector<int> spec_lens(16);
    for (int b = 0; b < 16; ++b) spec_lens[b] = b == 3 ? 0 : 4096 - 97 * b;
    const std::vector<Case> cases = {
        {spec, spec_lens, 4096}, {contig, {4097, 5}, 4100}, {mqa, {300, 0, 129}, 320}, {mha, {777, 16}, 1024}};
    for (const auto& c : cases) {
      CHECK(rt.explain(kFamily, problem_to_json(c.p)).step == "default");
      run_and_verify(
          c.p, c.lens, c.capacity, [&](const DecodeParams& a) { rt.attention_decode(c.p, a, stream.get()); }, 7);
    }
  }

  SECTION("bad arguments are rejected before anything is resolved, naming the argument") {
    const HostInputs in = make_inputs(tuned, 3);
    DeviceProblem dev(in, 1, false);
    DecodeParams a = dev.params(0, 0.f);
    a.block_table = nullptr;
    CHECK_THROWS_WITH(rt.attention_decode(tuned, a, stream.get()), Catch::Contains("block_table"));
    Problem longer = tuned;
    longer.kv_len = 2049;  // past the 32 pages x 64 tokens of the block table
    a = dev.params(0, 0.f);
    a.kv_len = 2049;
    CHECK_THROWS_WITH(rt.attention_decode(longer, a, stream.get()), Catch::Contains("capacity"));
    Problem q17 = tuned;
    q17.q_len = 17;
    CHECK_THROWS_WITH(rt.attention_decode(q17, dev.params(0, 0.f), stream.get()), Catch::Contains("q_len"));
    CHECK(rt.resolved_problems(kFamily) == 0);
  }

  SECTION("C ABI: same bytes as the C++ call") {
    kt_runtime* crt = nullptr;
    REQUIRE(kt_runtime_create(db_path.c_str(), &crt) == KT_OK);
    for (const Problem& p : {tuned, qwen(3, 300, 3, KvLayout::contiguous)}) {
      const std::vector<int> lens = p.batch == 4 ? std::vector<int>{2048, 0, 65, 1} : std::vector<int>{300, 7, 0};
      const int cap = p.batch == 4 ? 2048 : 304;
      const auto cpp = run_and_verify(
          p, lens, cap, [&](const DecodeParams& a) { rt.attention_decode(p, a, stream.get()); }, 21);
      const auto c = run_and_verify(
          p, lens, cap,
          [&](const DecodeParams& a) {
            const kt_attention_decode_problem cp = c_problem(p);
            const kt_attention_decode_args ca = c_args(p, a);
            const kt_status s = kt_attention_decode(crt, &cp, &ca, stream.get());
            INFO(kt_last_error());
            REQUIRE(s == KT_OK);
          },
          21);
      CHECK(cpp == c);
    }
    kt_runtime_destroy(crt);
  }
}

TEST_CASE("attention_decode tuner session: split and unsplit candidates verify on poisoned outputs, then time",
          "[gpu][tuner][decode]") {
  cuda::Context ctx(0);
  cuda::Stream stream;
  const cuda::DeviceInfo info = cuda::device_info(0);
  const ArchId arch = arch_for_compute_capability(info.cc_major, info.cc_minor);
  const TunerFamily& tf = find_tuner_family(kFamily);
  Compiler compiler(nullptr);
  for (const Problem& p : {qwen(16, 4096, 1), qwen(2, 1000, 4, KvLayout::contiguous)}) {
    auto session = tf.session(problem_to_json(p), 17, 128, info.l2_bytes);
    std::vector<Config> configs = {default_config(arch, p)};
    for (const auto& c : valid_configs(p, arch, device_model(arch)))
      if (configs.size() < 3 && !same_config(c, configs[0])) configs.push_back(c);
    for (const auto& c : configs) {
      const KernelSource src = kernel_source(p, c, arch);
      const CompileResult r = compiler.compile(src);
      INFO(src.variant_name << ": " << r.error);
      REQUIRE(r.ok);
      const LoadedKernel k(r.cubin, r.report.lowered_name, src.dynamic_smem_bytes);
      const Outcome o = session->measure(k, config_to_json(c), stream.get(), 50);
      INFO(o.error);
      CHECK(o.status == db::Status::ok);
      CHECK(o.rel_err >= 0);
      CHECK(o.rel_err <= tolerance(p.dtype));
      CHECK(o.timing.median_us > 0);
    }
  }
}
