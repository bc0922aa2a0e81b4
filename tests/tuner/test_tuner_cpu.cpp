// Tuner pieces that need no GPU: statistics, winner selection, cold-L2 sizing, problems from shapes,
// and the autotune CLI's error handling.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <array>
#include <filesystem>

#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include "reference/dtype_convert.h"

#include "../support.h"
#include "tuner/attention_harness.h"
#include "tuner/attention_problems.h"
#include "tuner/qkv_harness.h"
#include "tuner/selection.h"
#include "tuner/shapes_file.h"
#include "tuner/timing.h"
#include "tuner/tuner_registry.h"

using namespace kt;

namespace {
Candidate cand(const std::string& name, double us, int regs, int smem, db::Status st = db::Status::ok) {
  Candidate c;
  c.variant = name;
  c.median_us = us;
  c.registers = regs;
  c.smem_bytes = smem;
  c.status = st;
  return c;
}

}  // namespace

TEST_CASE("percentiles interpolate", "[tuner]") {
  CHECK(percentile({}, 50) == 0);
  CHECK(percentile({5}, 20) == 5);
  CHECK(percentile({1, 2, 3, 4, 5}, 50) == 3);
  CHECK(percentile({4, 1, 3, 2}, 50) == Approx(2.5));
  CHECK(percentile({0, 10}, 20) == Approx(2));
}

TEST_CASE("the winner is the fastest median; equal medians are broken deterministically", "[tuner]") {
  std::vector<Candidate> c = {cand("c", 100, 200, 1000), cand("a", 90, 250, 1000),
                              cand("b", 80, 255, 1000, db::Status::wrong_result)};
  CHECK(pick_winner(c) == 1);  // the wrong result can never win
  c.push_back(cand("d", 90.01, 32, 0));
  CHECK(pick_winner(c) == 1);  // no tie window: slower by 0.01% loses, whatever its registers
  c.push_back(cand("e", 90, 240, 2000));
  CHECK(pick_winner(c) == 4);  // the same median: fewer registers
  c.push_back(cand("f", 90, 240, 1000));
  CHECK(pick_winner(c) == 5);  // the same registers: less shared memory
  c.push_back(cand("0", 90, 240, 1000));
  CHECK(pick_winner(c) == 6);  // the same resources: name
  std::vector<Candidate> none = {cand("x", 1, 1, 1, db::Status::launch_failed)};
  CHECK(pick_winner(none) == -1);

  // A screened candidate (left out by its final round) does not compete with unscreened ones, however fast...
  c.push_back(cand("s", 10, 32, 0));
  c.back().screened = true;
  CHECK(pick_winner(c) == 6);
  // ...and wins when every ok candidate is screened.
  std::vector<Candidate> all_screened = {cand("s1", 100, 32, 0), cand("s2", 95, 64, 0),
                                         cand("f", 50, 32, 0, db::Status::wrong_result)};
  for (auto& x : all_screened) x.screened = true;
  CHECK(pick_winner(all_screened) == 1);
}

TEST_CASE("cold-L2 rotation covers more than 3x the L2", "[tuner]") {
  const size_t l2 = 50u << 20;
  for (size_t set : {size_t(1) << 20, size_t(37) << 20, size_t(149) << 20, size_t(151) << 20, size_t(2) << 30}) {
    const int n = attn::cold_l2_copies(set, l2);
    CHECK(n >= 1);
    CHECK((n * set > 3 * l2 || n == 1));
    if (n > 1) CHECK((n - 1) * set <= 3 * l2);
  }
}

TEST_CASE("qwen7b shapes give the prefill problems, dtypes outer", "[tuner]") {
  const auto s = load_shapes(std::string(KT_SOURCE_DIR) + "/shapes/qwen7b.json");
  const auto ps = attention_prefill_problems(s);
  REQUIRE(ps.size() == 14);
  CHECK(ps[0].key() == "attention_prefill/bf16/b1/sq512/sk512/h28/kv4/d128/causal");
  CHECK(ps[6].key() == "attention_prefill/bf16/b1/sq8192/sk8192/h28/kv4/d128/full");
  CHECK(ps[12].key() == "attention_prefill/fp16/b2/sq16384/sk16384/h28/kv4/d128/causal");
}

TEST_CASE("make_inputs draws random non-zero data, and verify catches unwritten or wrong output", "[tuner]") {
  attn::Problem p;
  p.dtype = DType::f16;
  p.seqlen_q = 5;
  p.seqlen_k = 9;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  p.causal = true;
  const auto in = attn::make_inputs(p, 3);
  size_t zeros = 0;
  for (float x : in.qf) zeros += x == 0.f;
  CHECK(zeros == 0);
  const auto ref = attn::reference_rows(in, 0.125, 1000, 1);
  REQUIRE(ref.rows.size() == 5 * 4);
  // Exact reference rounded to fp16 passes; one poisoned element fails; a perturbed row fails.
  std::vector<uint16_t> out(in.q.size());
  std::vector<float> lse(size_t(p.num_heads) * p.seqlen_q);
  for (size_t n = 0; n < ref.rows.size(); ++n) {
    const auto& r = ref.rows[n];
    for (int d = 0; d < p.head_dim; ++d)
      out[((size_t(r[0]) * p.seqlen_q + r[1]) * p.num_heads + r[2]) * p.head_dim + d] =
          float_to_half(float(ref.out[n * p.head_dim + d]));
    lse[(size_t(r[0]) * p.num_heads + r[2]) * p.seqlen_q + r[1]] = float(ref.lse[n]);
  }
  CHECK(attn::verify(in, ref, out, lse).pass);
  auto poisoned = out;
  poisoned[17] = 0xFFFF;
  const auto v1 = attn::verify(in, ref, poisoned, lse);
  CHECK_FALSE(v1.pass);
  CHECK(v1.unwritten == 1);
  auto wrong = out;
  for (int d = 0; d < 64; ++d) wrong[d] = float_to_half(half_to_float(wrong[d]) + 0.5f);
  CHECK_FALSE(attn::verify(in, ref, wrong, lse).pass);
  auto bad_lse = lse;
  bad_lse[3] += 0.01f;
  CHECK_FALSE(attn::verify(in, ref, out, bad_lse).pass);
}

TEST_CASE("qkv_proj: problems that share a weight have one weight key, the tuner's input key, and share the weight",
          "[tuner]") {
  qkv::Problem a;
  a.dtype = DType::bf16, a.format = quant::Format::int4, a.m = 3, a.k = 256, a.num_heads = 4, a.num_kv_heads = 2;
  a.head_dim = 64;
  qkv::Problem b = a;
  b.m = 37, b.has_bias = false, b.rope = false;  // m, bias and RoPE do not touch the weight
  CHECK(qkv::weight_key(a) == "int4/bf16/n512/k256");
  CHECK(qkv::weight_key(b) == qkv::weight_key(a));
  const auto& fam = find_tuner_family("qkv_proj");
  REQUIRE(fam.input_key);
  CHECK(fam.input_key(qkv::problem_to_json(b)) == qkv::weight_key(a));
  const auto in = qkv::make_inputs(a, 7);
  const auto shared = qkv::make_inputs_with_weight(b, 7, in);
  CHECK(shared.problem.m == 37);
  CHECK(shared.x.size() == size_t(37) * 256);
  CHECK(shared.w.data == in.w.data);
  for (auto change : {0, 1, 2, 3}) {  // format, dtype, n, k: another weight
    qkv::Problem c = a;
    if (change == 0) c.format = quant::Format::int8;
    if (change == 1) c.dtype = DType::f16;
    if (change == 2) c.num_heads = 8;
    if (change == 3) c.k = 512;
    CHECK(qkv::weight_key(c) != qkv::weight_key(a));
    CHECK(fam.input_key(qkv::problem_to_json(c)) != fam.input_key(qkv::problem_to_json(a)));
    CHECK_THROWS_WITH(qkv::make_inputs_with_weight(c, 7, in),
                      Catch::Contains("same weight") && Catch::Contains(qkv::weight_key(c)));
  }
}

TEST_CASE("autotune --compile-only errors name what is wrong", "[tuner][cli]") {
  auto [rc, out] = kt_test::run_autotune("--arch sm_91 --shapes " + std::string(KT_SOURCE_DIR) +
                                         "/shapes/qwen7b.json --compile-only");
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains("unknown --arch 'sm_91'") && Catch::Contains("sm_80, sm_86, sm_89, sm_90, sm_90a"));

  const std::string bad = std::filesystem::temp_directory_path() / "kt_bad_shapes.json";
  std::ofstream(bad)
      << R"({"model":"x","hidden_size":3072,"num_attention_heads":32,"num_key_value_heads":8,"head_dim":96,
    "workloads":{"attention_prefill":[{"batch":1,"seqlen":128}]}})";
  std::tie(rc, out) = kt_test::run_autotune("--arch sm_90a --compile-only --shapes " + bad);
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains(bad) && Catch::Contains("head_dim 96 is not supported"));

  std::ofstream(bad) << R"({"model":"x","hidden_size":3072,"num_attention_heads":32,"head_dim":96,
    "workloads":{"attention_prefill":[{"batch":1,"seqlen":128}]}})";
  std::tie(rc, out) = kt_test::run_autotune("--arch sm_90a --compile-only --shapes " + bad);
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains("num_key_value_heads"));

  std::tie(rc, out) = kt_test::run_autotune("--arch sm_90a --compile-only --families gemm --shapes " +
                                            std::string(KT_SOURCE_DIR) + "/shapes/qwen7b.json");
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains("unknown family 'gemm'"));
  // `autotune show` checks --family against the registry before opening the database.
  std::tie(rc, out) = kt_test::run_autotune("show --db /nonexistent/kt.db --family gemm");
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains("unknown family 'gemm'") && Catch::Contains("attention_prefill") &&
                      Catch::Contains("qkv_proj"));

  std::tie(rc, out) = kt_test::run_autotune("--arch sm_90a --compile-only --only '(' --shapes " +
                                            std::string(KT_SOURCE_DIR) + "/shapes/qwen7b.json");
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains("--only '('") && Catch::Contains("not a valid regular expression"));
  // --only keeps the matching candidates and the default (the baseline): a regex that matches nothing leaves one
  // binary for one problem; a gemv-cluster regex adds exactly the cluster variants.
  std::ofstream(bad)
      << R"({"model":"x","hidden_size":3584,"num_attention_heads":28,"num_key_value_heads":4,"head_dim":128,
    "qkv_bias":true,"dtypes":["bf16"],"workloads":{"qkv_proj":{"tokens":[1],"formats":["int4"]}}})";
  std::tie(rc, out) = kt_test::run_autotune("--arch sm_90a --compile-only --only no_such_variant --shapes " + bad);
  CHECK(rc == 0);
  CHECK_THAT(out, Catch::Contains("1 qkv_proj problems, 1 distinct binaries"));
  std::tie(rc, out) = kt_test::run_autotune(
      "--arch sm_90a --compile-only --only 'gemv_m8_n16_wk1_wn1_bulk_rows_p1_cl[24]_' --shapes " + bad);
  CHECK(rc == 0);
  CHECK_THAT(out, Catch::Contains("1 qkv_proj problems, 3 distinct binaries"));

  // --list-candidates: the plan's candidates in order, one tab-separated line each, nothing else; --max-candidates
  // keeps a prefix of the same order; without --arch it is refused.
  auto lines = [](const std::string& text) {
    std::vector<std::string> v;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) v.push_back(l);
    return v;
  };
  std::tie(rc, out) = kt_test::run_autotune("--arch sm_90a --list-candidates --shapes " + bad);
  CHECK(rc == 0);
  const auto all = lines(out);
  REQUIRE(all.size() > 16);
  std::set<std::string> names;
  for (size_t i = 0; i < all.size(); ++i) {
    INFO(all[i]);
    CHECK(all[i].rfind("qkv_proj\tqkv_proj/bf16/int4/m1/k3584/h28/kv4/d128/bias/rope\t" + std::to_string(i) +
                           "\tqkv_proj__bf16_int4_d128_bias_rope__",
                       0) == 0);
    names.insert(all[i].substr(all[i].rfind('\t') + 1));
  }
  CHECK(names.size() == all.size());
  std::tie(rc, out) = kt_test::run_autotune("--arch sm_90a --list-candidates --max-candidates 5 --shapes " + bad);
  CHECK(rc == 0);
  CHECK(lines(out) == std::vector<std::string>(all.begin(), all.begin() + 5));
  std::tie(rc, out) = kt_test::run_autotune("--list-candidates --shapes " + bad);
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains("--list-candidates needs --arch"));
  std::filesystem::remove(bad);
}
