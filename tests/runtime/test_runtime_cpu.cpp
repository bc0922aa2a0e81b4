// [runtime] The lookup chain (resolve_attention) without a GPU: exact -> nearest -> default -> error.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cache/tuning_db.h"
#include "generator/arch.h"
#include "generator/attention_family.h"
#include "runtime/runtime.h"

using namespace kt;
using namespace kt::attn;

namespace {

const std::string kH100 = "NVIDIA H100 80GB HBM3";
const ArchId kSm90a{90, true};
const ArchId kSm86{86, false};

Problem qwen(int seqlen, DType dt = DType::bf16, int head_dim = 128, bool causal = true) {
  Problem p;
  p.dtype = dt;
  p.batch = 1;
  p.seqlen_q = seqlen;
  p.seqlen_k = seqlen;
  p.num_heads = 28;
  p.num_kv_heads = 4;
  p.head_dim = head_dim;
  p.causal = causal;
  return p;
}

long long g_id = 0;

db::Winner winner(const Problem& p, const Config& c, const std::string& device = kH100, const std::string& hash = "") {
  db::Winner w;
  w.device_name = device;
  w.family = kFamily;
  w.problem_key = p.key();
  w.problem_json = problem_to_json(p).dump();
  w.config_json = config_to_json(c).dump();
  w.variant_name = variant_name(p, c, kSm90a);
  w.binary_hash = hash.empty() ? "hash_" + p.key() : hash;
  w.median_us = 100;
  w.measurement_id = ++g_id;
  return w;
}

// Distinct valid configs so a test can tell which winner was chosen.
const Config cA{64, 64, 4, 2, kMmaSync, 0};
const Config cB{128, 32, 4, 3, kMmaSync, 1};
const Config cC{128, 128, 8, 2, kMmaSync, 0};
const Config cD{64, 32, 4, 1, kMmaSync, 1};

/// tuned S = 512 (cA), 2048 (cB), 8192 (cC) for the Qwen class on the H100.
std::vector<db::Winner> three_tuned() {
  return {winner(qwen(512), cA), winner(qwen(2048), cB), winner(qwen(8192), cC)};
}

}  // namespace

TEST_CASE("resolve_attention: exact problem key", "[runtime]") {
  const auto ws = three_tuned();
  const auto c = resolve_attention(ws, kH100, kSm90a, qwen(2048));
  CHECK(c.step == "exact");
  CHECK(same_config(c.config, cB));
  CHECK(c.tuned_problem_key == qwen(2048).key());
  CHECK(c.binary_hash == "hash_" + qwen(2048).key());
  CHECK(c.variant_name == variant_name(qwen(2048), cB, kSm90a));
  CHECK(c.why.find("exactly") != std::string::npos);
}

TEST_CASE("resolve_attention: nearest inside the bucket, by log distance of the sequence lengths", "[runtime]") {
  const auto ws = three_tuned();
  auto c = resolve_attention(ws, kH100, kSm90a, qwen(2500));  // bucket 2048: [1449, 2897)
  CHECK(c.step == "nearest");
  CHECK(c.tuned_problem_key == qwen(2048).key());
  CHECK(same_config(c.config, cB));
  CHECK(c.binary_hash == "hash_" + qwen(2048).key());  // same kernel class: the tuned binary is reused
  CHECK(c.variant_name == variant_name(qwen(2500), cB, kSm90a));
  CHECK(c.why.find(qwen(2048).key()) != std::string::npos);
  CHECK(c.why.find("log distance 0.40") != std::string::npos);  // 2 * ln(2500/2048) = 0.399
  CHECK(c.why.find("seqlen_q~2048/seqlen_k~2048") != std::string::npos);

  c = resolve_attention(ws, kH100, kSm90a, qwen(6000));  // bucket 8192: [5793, 11586)
  CHECK(c.step == "nearest");
  CHECK(c.tuned_problem_key == qwen(8192).key());
  CHECK(same_config(c.config, cC));

  c = resolve_attention(ws, kH100, kSm90a, qwen(400));  // bucket 512
  CHECK(c.tuned_problem_key == qwen(512).key());

  // Outside every tuned bucket: the default, whose why names the bucket. 3000 lies in bucket 4096, 100 in 128,
  // and sq 512 / sk 8192 in (512, 8192), which no tuned problem shares.
  Problem mixed = qwen(512);
  mixed.seqlen_k = 8192;
  for (const Problem& p : {qwen(3000), qwen(100), mixed}) {
    c = resolve_attention(ws, kH100, kSm90a, p);
    INFO(p.key() << ": " << c.why);
    CHECK(c.step == "default");
    CHECK(same_config(c.config, default_config(kSm90a, p)));
    CHECK(c.why.find("no tuned problem in bucket") != std::string::npos);
    CHECK(c.why.find("3 tuned attention_prefill/bf16/d128/causal problem(s) in other buckets") != std::string::npos);
  }
  CHECK(resolve_attention(ws, kH100, kSm90a, qwen(3000)).why.find("seqlen_q~4096/seqlen_k~4096") != std::string::npos);
}

TEST_CASE("resolve_attention: nearest ties go to the closest batch*heads, then the key", "[runtime]") {
  Problem far = qwen(1600);
  far.batch = 8;
  Problem near = qwen(2500);  // same distance in sequence length as 1600 from 2000 (ln 1.25), same bucket
  std::vector<db::Winner> ws = {winner(far, cA), winner(near, cB)};
  auto c = resolve_attention(ws, kH100, kSm90a, qwen(2000));
  CHECK(c.step == "nearest");
  CHECK(c.tuned_problem_key == near.key());
  // Make batch*heads equal: the smaller key wins, whatever the order of the rows.
  far.batch = 1;
  ws = {winner(near, cB), winner(far, cA)};
  c = resolve_attention(ws, kH100, kSm90a, qwen(2000));
  CHECK(c.tuned_problem_key == std::min(near.key(), far.key()));
}

TEST_CASE("resolve_attention: nearest skips another dtype, head_dim, causal flag, device or family", "[runtime]") {
  std::vector<db::Winner> ws = {
      winner(qwen(2048, DType::f16), cA),               // other dtype
      winner(qwen(2048, DType::bf16, 64), cA),          // other head_dim
      winner(qwen(2048, DType::bf16, 128, false), cA),  // not causal
      winner(qwen(2048), cA, "NVIDIA A100-SXM4-80GB"),  // other device class
      winner(qwen(2500), cB),                           // the only usable one: right class and bucket
  };
  db::Winner other_family = winner(qwen(2048), cA);
  other_family.family = "attention_decode";
  ws.push_back(other_family);
  db::Winner corrupt = winner(qwen(2048), cA);
  corrupt.config_json = "{\"tile_m\": 64}";  // unreadable config: never a candidate
  ws.push_back(corrupt);

  const auto c = resolve_attention(ws, kH100, kSm90a, qwen(2048));
  CHECK(c.step == "nearest");
  CHECK(c.tuned_problem_key == qwen(2500).key());
  CHECK(same_config(c.config, cB));

  // Without the usable row nothing qualifies: the default answers.
  ws.erase(ws.begin() + 4);
  const auto d = resolve_attention(ws, kH100, kSm90a, qwen(2048));
  CHECK(d.step == "default");
  CHECK(same_config(d.config, default_config(kSm90a, qwen(2048))));
}

TEST_CASE("resolve_attention: a tuned config invalid on the asked arch is skipped", "[runtime]") {
  const Config big{128, 128, 8, 3, kMmaSync, 0};  // 224 KiB of shared memory: sm_90 only
  REQUIRE(smem_bytes(big, 128) > 200 * 1024);
  REQUIRE(invalid_reason(DType::bf16, 128, true, big, kSm90a) == nullptr);
  REQUIRE(invalid_reason(DType::bf16, 128, true, big, kSm86) != nullptr);
  const std::string dev = "NVIDIA GeForce RTX 3090";
  std::vector<db::Winner> ws = {winner(qwen(2048), big, dev), winner(qwen(1600), cA, dev)};

  // On sm_90a the exact (big) winner is fine.
  CHECK(resolve_attention(ws, dev, kSm90a, qwen(2048)).step == "exact");
  // On sm_86 the exact row is rejected, and so would be a nearest one: 1600 (same bucket) answers.
  auto c = resolve_attention(ws, dev, kSm86, qwen(2048));
  CHECK(c.step == "nearest");
  CHECK(c.tuned_problem_key == qwen(1600).key());
  CHECK(same_config(c.config, cA));
  c = resolve_attention(ws, dev, kSm86, qwen(2200));  // nearer to 2048 than to 1600
  CHECK(c.tuned_problem_key == qwen(1600).key());
  // Only the big one: default, and the why says a tuned config was invalid.
  ws.pop_back();
  c = resolve_attention(ws, dev, kSm86, qwen(2200));
  CHECK(c.step == "default");
  CHECK(c.binary_hash.empty());
  CHECK(c.why.find("invalid on sm_86") != std::string::npos);
}

TEST_CASE("resolve_attention: default when nothing is tuned", "[runtime]") {
  for (ArchId arch : {kSm90a, kSm86, ArchId{80, false}}) {
    const auto c = resolve_attention({}, kH100, arch, qwen(1000, DType::f16, 64, false));
    CHECK(c.step == "default");
    CHECK(same_config(c.config, default_config(arch, qwen(1000, DType::f16, 64, false))));
    CHECK(c.variant_name == variant_name(qwen(1000, DType::f16, 64, false), c.config, arch));
    CHECK(c.binary_hash.empty());
    CHECK(c.tuned_problem_key.empty());
    CHECK(c.why.find("attention_prefill/fp16/d64/full") != std::string::npos);
    CHECK(c.why.find(arch_name(arch)) != std::string::npos);
  }
}

TEST_CASE("resolve_attention: unsupported problems throw naming the rule", "[runtime]") {
  const auto ws = three_tuned();
  Problem p = qwen(2048);
  p.head_dim = 96;
  try {
    resolve_attention(ws, kH100, kSm90a, p);
    FAIL("head_dim 96 accepted");
  } catch (const ProblemError& e) {
    CHECK(std::string(e.what()).find("head_dim") != std::string::npos);
  }
  p = qwen(2048);
  p.num_kv_heads = 5;  // 28 % 5 != 0
  try {
    resolve_attention(ws, kH100, kSm90a, p);
    FAIL("num_heads % num_kv_heads != 0 accepted");
  } catch (const ProblemError& e) {
    CHECK(std::string(e.what()).find("multiple of num_kv_heads") != std::string::npos);
  }
  p = qwen(2048);
  p.seqlen_q = 0;
  CHECK_THROWS_AS(resolve_attention(ws, kH100, kSm90a, p), ProblemError);
}

TEST_CASE("resolve_attention: deterministic, independent of row order", "[runtime]") {
  std::vector<db::Winner> ws;
  const Config cs[] = {cA, cB, cC, cD};
  int i = 0;
  for (int s : {128, 300, 512, 1000, 2048, 4000, 8192, 16384})
    for (int b : {1, 2}) {
      Problem p = qwen(s);
      p.batch = b;
      ws.push_back(winner(p, cs[i++ % 4]));
    }
  std::mt19937 rng(7);
  for (int s : {1, 37, 577, 1000, 1500, 2896, 5000, 100000}) {
    const auto ref = resolve_attention(ws, kH100, kSm90a, qwen(s));
    for (int t = 0; t < 5; ++t) {
      auto shuffled = ws;
      std::shuffle(shuffled.begin(), shuffled.end(), rng);
      const auto c = resolve_attention(shuffled, kH100, kSm90a, qwen(s));
      CHECK(c.step == ref.step);
      CHECK(c.tuned_problem_key == ref.tuned_problem_key);
      CHECK(c.variant_name == ref.variant_name);
      CHECK(c.why == ref.why);
    }
    if (s == 1000) {
      CHECK(ref.step == "exact");
      CHECK(ref.tuned_problem_key == qwen(1000).key());  // batch 1, not batch 2
    }
  }
}

TEST_CASE("arch_for_compute_capability", "[runtime]") {
  CHECK(arch_name(arch_for_compute_capability(9, 0)) == "sm_90a");
  CHECK(arch_name(arch_for_compute_capability(8, 0)) == "sm_80");
  CHECK(arch_name(arch_for_compute_capability(8, 6)) == "sm_86");
  CHECK(arch_name(arch_for_compute_capability(8, 9)) == "sm_89");
  CHECK_THROWS_AS(arch_for_compute_capability(7, 5), UnsupportedDevice);
}

TEST_CASE("resolve_attention over a TuningDb's winners view", "[runtime]") {
  char tmpl[] = "/tmp/kt_runtime_db_XXXXXX";
  const int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  close(fd);
  std::remove(tmpl);
  const std::string path = tmpl;
  {
    db::TuningDb tdb(path);
    db::DeviceRecord dev;
    dev.name = kH100;
    dev.uuid = "00112233445566778899aabbccddeeff";
    dev.cc_major = 9;
    dev.sm_count = 132;
    dev.l2_bytes = 50 << 20;
    const long long dev_id = tdb.upsert_device(dev);
    db::RunRecord run;
    run.argv = "autotune --test";
    run.started_at = 1700000000;
    const long long run_id = tdb.begin_run(run);

    std::vector<db::Measurement> ms;
    auto add = [&](const Problem& p, const Config& c, db::Status st, double median) {
      db::BinaryRecord b;
      b.hash = "h_" + variant_name(p, c, kSm90a);
      b.family = kFamily;
      b.variant_name = variant_name(p, c, kSm90a);
      b.name_expression = name_expression(p, c);
      b.lowered_name = "_Z4fake";
      b.arch = "sm_90a";
      b.cubin = std::string(
          "\x7f"
          "ELF fake cubin",
          15);
      b.registers = 128;
      b.dynamic_smem_bytes = smem_bytes(c, p.head_dim);
      tdb.put_binary(b);
      db::Measurement m;
      m.run_id = run_id;
      m.device_id = dev_id;
      m.family = kFamily;
      m.problem_key = p.key();
      m.problem_json = problem_to_json(p).dump();
      m.variant_name = b.variant_name;
      m.config_json = config_to_json(c).dump();
      m.binary_hash = b.hash;
      m.status = st;
      m.median_us = m.p20_us = m.p80_us = median;
      m.samples_us = {median};
      m.measured_at = 1700000001;
      ms.push_back(m);
    };
    // S=512: cB is the fastest ok row; cA is faster but wrong and may never win.
    add(qwen(512), cA, db::Status::wrong_result, 10);
    add(qwen(512), cB, db::Status::ok, 50);
    add(qwen(512), cC, db::Status::ok, 80);
    // S=8192: cC wins.
    add(qwen(8192), cB, db::Status::ok, 900);
    add(qwen(8192), cC, db::Status::ok, 700);
    tdb.add_measurements(ms);
    tdb.end_run(run_id, 1700000002);

    const auto ws = tdb.winners(kH100, kFamily);
    REQUIRE(ws.size() == 2);
    auto c = resolve_attention(ws, kH100, kSm90a, qwen(512));
    CHECK(c.step == "exact");
    CHECK(same_config(c.config, cB));
    CHECK(c.binary_hash == "h_" + variant_name(qwen(512), cB, kSm90a));
    REQUIRE(tdb.get_binary(c.binary_hash));
    CHECK(tdb.get_binary(c.binary_hash)->variant_name == c.variant_name);
    c = resolve_attention(ws, kH100, kSm90a, qwen(600));  // bucket 512
    CHECK(c.step == "nearest");
    CHECK(same_config(c.config, cB));
    c = resolve_attention(ws, kH100, kSm90a, qwen(7000));  // bucket 8192
    CHECK(c.step == "nearest");
    CHECK(same_config(c.config, cC));
    CHECK(c.tuned_problem_key == qwen(8192).key());
    // Another device class sees none of it.
    CHECK(resolve_attention(tdb.winners(), "NVIDIA A100-SXM4-80GB", ArchId{80, false}, qwen(512)).step == "default");
  }
  std::remove(path.c_str());
  std::remove((path + "-wal").c_str());
  std::remove((path + "-shm").c_str());
}

// ------------------------------------------------------------------------------------------------
// resolve_qkv: the qkv_proj lookup chain.

namespace {

/// Qwen2.5-7B's projection class: bf16 activations, NF4 weights, k 3584, 28/4 heads of 128, bias, RoPE.
qkv::Problem qkvp(int m, quant::Format f = quant::Format::nf4, DType dt = DType::bf16) {
  qkv::Problem p;
  p.dtype = dt;
  p.format = f;
  p.m = m;
  return p;
}

db::Winner qwin(const qkv::Problem& p, const qkv::Config& c, const std::string& device = kH100,
                const std::string& hash = "") {
  db::Winner w;
  w.device_name = device;
  w.family = qkv::kFamily;
  w.problem_key = p.key();
  w.problem_json = qkv::problem_to_json(p).dump();
  w.config_json = qkv::config_to_json(c).dump();
  w.variant_name = qkv::variant_name(p, c, kSm90a);
  w.binary_hash = hash.empty() ? "hash_" + p.key() : hash;
  w.median_us = 10;
  w.measurement_id = ++g_id;
  return w;
}

// Distinct configs, none of them a default, so a test can tell which winner was chosen.
const qkv::Config q16 = qkv::make_config(16, 128, qkv::MmaConfig{64, 1, 8, 2, 8, 1});
const qkv::Config q256 = qkv::make_config(64, 128, qkv::MmaConfig{64, 2, 4, 2, 1, 1});
const qkv::Config q4096 = qkv::make_config(128, 128, qkv::MmaConfig{64, 4, 2, 3, 1, 1});

/// Tuned m = 16 (q16), 256 (q256), 4096 (q4096) for the Qwen NF4 class on the H100.
std::vector<db::Winner> qkv_three_tuned() {
  for (const auto& c : {q16, q256, q4096}) {
    REQUIRE(qkv::invalid_reason(DType::bf16, quant::Format::nf4, 128, true, c, kSm90a) == nullptr);
    for (int m : {1, 16, 20, 256, 1000, 3000, 4096})
      REQUIRE_FALSE(qkv::same_config(c, qkv::default_config(kSm90a, qkvp(m))));
  }
  return {qwin(qkvp(16), q16), qwin(qkvp(256), q256), qwin(qkvp(4096), q4096)};
}

}  // namespace

TEST_CASE("resolve_qkv: exact problem key", "[runtime]") {
  const auto ws = qkv_three_tuned();
  for (auto [m, c] : {std::pair<int, qkv::Config>{16, q16}, {256, q256}, {4096, q4096}}) {
    const auto ch = resolve_qkv(ws, kH100, kSm90a, qkvp(m));
    INFO(m << ": " << ch.why);
    CHECK(ch.step == "exact");
    CHECK(qkv::same_config(ch.config, c));
    CHECK(ch.tuned_problem_key == qkvp(m).key());
    CHECK(ch.binary_hash == "hash_" + qkvp(m).key());
    CHECK(ch.variant_name == qkv::variant_name(qkvp(m), c, kSm90a));
    CHECK(ch.tuned_median_us == 10);
    CHECK(ch.why.find("exactly") != std::string::npos);
  }
}

TEST_CASE("resolve_qkv: nearest inside m's power-of-two bucket, by log distance of m", "[runtime]") {
  const auto ws = qkv_three_tuned();
  // Buckets: 16 holds 12..22, 256 holds 182..362, 4096 holds 2897..5792.
  for (auto [ask, tuned] : {std::pair<int, int>{20, 16}, {13, 16}, {300, 256}, {3000, 4096}, {5000, 4096}}) {
    const auto ch = resolve_qkv(ws, kH100, kSm90a, qkvp(ask));
    INFO(ask << ": " << ch.why);
    CHECK(ch.step == "nearest");
    CHECK(ch.tuned_problem_key == qkvp(tuned).key());
    CHECK(ch.binary_hash == "hash_" + qkvp(tuned).key());  // the tuned binary: m is a run-time argument
    CHECK(ch.variant_name == ws[tuned == 16 ? 0 : tuned == 256 ? 1 : 2].variant_name);
    CHECK(qkv::same_config(ch.config, tuned == 16 ? q16 : tuned == 256 ? q256 : q4096));
    CHECK(ch.why.find(qkvp(tuned).key()) != std::string::npos);
  }
  CHECK(resolve_qkv(ws, kH100, kSm90a, qkvp(300)).why.find("log distance 0.16") != std::string::npos);
  CHECK(resolve_qkv(ws, kH100, kSm90a, qkvp(20)).why.find("log distance 0.22") != std::string::npos);
  CHECK(
      resolve_qkv(ws, kH100, kSm90a, qkvp(20)).why.find("bucket qkv_proj/bf16/nf4/k3584/h28/kv4/d128/bias/rope/m~16") !=
      std::string::npos);
  // Between the tuned buckets, below and above them: the default (a winner tuned at another m is not known to beat
  // it there).
  for (int ask : {1, 11, 23, 1000, 2896, 5793, 100000}) {
    const auto ch = resolve_qkv(ws, kH100, kSm90a, qkvp(ask));
    INFO(ask << ": " << ch.why);
    CHECK(ch.step == "default");
    CHECK(qkv::same_config(ch.config, qkv::default_config(kSm90a, qkvp(ask))));
    CHECK(ch.why.find("no tuned problem in bucket") != std::string::npos);
  }
}

TEST_CASE("resolve_qkv: nearest ties go to the larger tuned m, whatever the key order", "[runtime]") {
  // 30 is |ln 1.2| from both 25 and 36 (all three in bucket 32); the key of m25 sorts first, the larger m wins.
  REQUIRE(qkvp(25).key() < qkvp(36).key());
  std::vector<db::Winner> ws = {qwin(qkvp(25), q16), qwin(qkvp(36), q256)};
  for (int t = 0; t < 2; ++t) {
    const auto ch = resolve_qkv(ws, kH100, kSm90a, qkvp(30));
    CHECK(ch.step == "nearest");
    CHECK(ch.tuned_problem_key == qkvp(36).key());
    CHECK(qkv::same_config(ch.config, q256));
    std::swap(ws[0], ws[1]);
  }
}

TEST_CASE("resolve_qkv: nearest skips another format, dtype, k, heads, bias, RoPE, device or family", "[runtime]") {
  auto variant = [](auto change) {
    qkv::Problem p = qkvp(256);
    change(p);
    return p;
  };
  std::vector<db::Winner> ws = {
      qwin(qkvp(256, quant::Format::int4), q256),                        // other weight format
      qwin(qkvp(256, quant::Format::nf4, DType::f16), q256),             // other activation dtype
      qwin(variant([](qkv::Problem& p) { p.k = 4096; }), q256),          // other k
      qwin(variant([](qkv::Problem& p) { p.num_heads = 32; }), q256),    // other num_heads
      qwin(variant([](qkv::Problem& p) { p.num_kv_heads = 7; }), q256),  // other num_kv_heads
      qwin(variant([](qkv::Problem& p) { p.head_dim = 64; }), q256),     // other head_dim
      qwin(variant([](qkv::Problem& p) { p.has_bias = false; }), q256),  // no bias
      qwin(variant([](qkv::Problem& p) { p.rope = false; }), q256),      // no RoPE
      qwin(qkvp(256), q256, "NVIDIA A100-SXM4-80GB"),                    // other device class
      qwin(qkvp(300), q4096),                                            // the only usable one: same class, bucket
  };
  db::Winner attn_row = qwin(qkvp(256), q256);
  attn_row.family = attn::kFamily;
  ws.push_back(attn_row);
  db::Winner corrupt = qwin(qkvp(256), q256);
  corrupt.config_json = "{\"tile_m\": 64}";
  ws.push_back(corrupt);

  const auto ch = resolve_qkv(ws, kH100, kSm90a, qkvp(256));
  INFO(ch.why);
  CHECK(ch.step == "nearest");
  CHECK(ch.tuned_problem_key == qkvp(300).key());
  CHECK(qkv::same_config(ch.config, q4096));

  ws.erase(ws.begin() + 9);  // without the usable row: the default
  const auto d = resolve_qkv(ws, kH100, kSm90a, qkvp(256));
  CHECK(d.step == "default");
  CHECK(qkv::same_config(d.config, qkv::default_config(kSm90a, qkvp(256))));
  CHECK(d.binary_hash.empty());
}

TEST_CASE("resolve_qkv: a tuned config that cannot run the problem here is skipped", "[runtime]") {
  // 160 KiB of shared memory: fine on sm_90a, too much on sm_86.
  const qkv::Config big = qkv::make_config(128, 128, qkv::MmaConfig{128, 2, 4, 3, 1, 1});
  REQUIRE(qkv::invalid_reason(DType::bf16, quant::Format::nf4, 128, true, big, kSm90a) == nullptr);
  REQUIRE(qkv::invalid_reason(DType::bf16, quant::Format::nf4, 128, true, big, kSm86) != nullptr);
  const std::string dev = "NVIDIA GeForce RTX 3090";
  std::vector<db::Winner> ws = {qwin(qkvp(1024), big, dev), qwin(qkvp(900), q16, dev)};
  CHECK(resolve_qkv(ws, dev, kSm90a, qkvp(1024)).step == "exact");
  auto ch = resolve_qkv(ws, dev, kSm86, qkvp(1024));
  CHECK(ch.step == "nearest");
  CHECK(ch.tuned_problem_key == qkvp(900).key());
  ws.pop_back();
  ch = resolve_qkv(ws, dev, kSm86, qkvp(1024));
  CHECK(ch.step == "default");
  CHECK(ch.why.find("unusable on sm_86") != std::string::npos);

  // split_k beyond k / tile_k: k = 256 has 2 K tiles of 128, a 4-way split cannot run.
  qkv::Problem small = qkvp(16);
  small.k = 256;
  const qkv::Config split4 = qkv::make_config(16, 128, qkv::MmaConfig{128, 1, 8, 2, 4, 1});
  const qkv::Config split2 = qkv::make_config(16, 128, qkv::MmaConfig{128, 1, 8, 2, 2, 1});
  REQUIRE(qkv::invalid_reason(DType::bf16, quant::Format::nf4, 128, true, split4, kSm90a) == nullptr);
  ch = resolve_qkv({qwin(small, split4)}, kH100, kSm90a, small);
  CHECK(ch.step == "default");
  CHECK(ch.why.find("unusable") != std::string::npos);
  ch = resolve_qkv({qwin(small, split2)}, kH100, kSm90a, small);
  CHECK(ch.step == "exact");
  CHECK(qkv::same_config(ch.config, split2));
}

TEST_CASE("resolve_qkv: default when nothing is tuned", "[runtime]") {
  for (ArchId arch : {kSm90a, kSm86, ArchId{80, false}})
    for (int m : {1, 37, 5000}) {
      const qkv::Problem p = qkvp(m, quant::Format::int4, DType::f16);
      const auto ch = resolve_qkv(qkv_three_tuned(), kH100, arch, p);  // the tuned rows are NF4/bf16
      INFO(arch_name(arch) << " m " << m << ": " << ch.why);
      CHECK(ch.step == "default");
      CHECK(qkv::same_config(ch.config, qkv::default_config(arch, p)));
      CHECK(ch.variant_name == qkv::variant_name(p, ch.config, arch));
      CHECK(ch.binary_hash.empty());
      CHECK(ch.tuned_problem_key.empty());
      CHECK(ch.tuned_median_us == 0);
      CHECK(ch.why.find("qkv_proj/fp16/int4/k3584/h28/kv4/d128/bias/rope") != std::string::npos);
      CHECK(ch.why.find(arch_name(arch)) != std::string::npos);
    }
}

TEST_CASE("resolve_qkv: unsupported problems throw naming the rule", "[runtime]") {
  const auto ws = qkv_three_tuned();
  auto throws_with = [&](const qkv::Problem& p, const std::string& needle) {
    try {
      resolve_qkv(ws, kH100, kSm90a, p);
      FAIL(p.key() << " accepted");
    } catch (const ProblemError& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
  };
  qkv::Problem p = qkvp(16, quant::Format::int4);
  p.k = 3648;  // a multiple of 64, not of int4's block of 128
  throws_with(p, "not a multiple of the int4 block of 128");
  p = qkvp(16, quant::Format::nvfp4);
  p.k = 100;
  throws_with(p, "k = 100 must be a multiple of 64");
  p = qkvp(16);
  p.num_kv_heads = 5;
  throws_with(p, "multiple of num_kv_heads");
  p = qkvp(16);
  p.head_dim = 96;
  throws_with(p, "head_dim");
  throws_with(qkvp(16, quant::Format::bf16, DType::f16), "bf16 weights need bf16 activations");
  throws_with(qkvp(0), "m (tokens) must be >= 1");
}

TEST_CASE("resolve_qkv: deterministic, independent of row order", "[runtime]") {
  std::vector<db::Winner> ws;
  const qkv::Config cs[] = {q16, q256, q4096};
  int i = 0;
  for (int m : {1, 8, 16, 32, 64, 100, 256, 1024, 4096}) ws.push_back(qwin(qkvp(m), cs[i++ % 3]));
  ws.push_back(qwin(qkvp(64), q4096));  // a duplicate key (later measurement): the first one answers exact
  std::mt19937 rng(11);
  for (int m : {1, 2, 11, 16, 24, 64, 70, 181, 512, 2048, 100000}) {
    const auto ref = resolve_qkv(ws, kH100, kSm90a, qkvp(m));
    for (int t = 0; t < 5; ++t) {
      auto shuffled = ws;
      std::shuffle(shuffled.begin(), shuffled.end(), rng);
      const auto c = resolve_qkv(shuffled, kH100, kSm90a, qkvp(m));
      CHECK(c.step == ref.step);
      CHECK(c.tuned_problem_key == ref.tuned_problem_key);
      CHECK(c.variant_name == ref.variant_name);
      CHECK(qkv::same_config(c.config, ref.config));
      CHECK(c.why == ref.why);
    }
    if (m == 64 || m == 70) {
      CHECK(ref.step == (m == 64 ? "exact" : "nearest"));
      CHECK(qkv::same_config(ref.config, cs[4 % 3]));  // the first row for m = 64, not the duplicate
    }
    if (m == 24) CHECK(ref.tuned_problem_key == qkvp(32).key());  // ln(32/24) = 0.29 < ln(24/16) = 0.41
  }
}

TEST_CASE("resolve_qkv over a TuningDb's winners view (split_k variants share one binary)", "[runtime]") {
  db::TuningDb tdb(":memory:");
  db::DeviceRecord dev;
  dev.name = kH100;
  dev.uuid = "00112233445566778899aabbccddeeff";
  dev.cc_major = 9;
  dev.sm_count = 132;
  dev.l2_bytes = 50 << 20;
  const long long dev_id = tdb.upsert_device(dev);
  db::RunRecord run;
  run.argv = "autotune --test";
  run.started_at = 1700000000;
  const long long run_id = tdb.begin_run(run);
  // One binary per name expression (the tuner's rule): q16 split 8 and split 1 share it.
  qkv::Config q16_unsplit = q16;
  q16_unsplit.mma.split_k = 1;
  REQUIRE(qkv::name_expression(qkvp(16), q16) == qkv::name_expression(qkvp(16), q16_unsplit));
  std::vector<db::Measurement> ms;
  auto add = [&](const qkv::Problem& p, const qkv::Config& c, db::Status st, double median) {
    db::BinaryRecord b;
    b.hash = "h_" + qkv::name_expression(p, c);
    b.family = qkv::kFamily;
    b.variant_name = qkv::variant_name(p, c, kSm90a);
    b.name_expression = qkv::name_expression(p, c);
    b.lowered_name = "_Z4fake";
    b.arch = "sm_90a";
    b.cubin = std::string(
        "\x7f"
        "ELF fake cubin",
        15);
    b.registers = 64;
    b.dynamic_smem_bytes = qkv::smem_bytes(c);
    if (!tdb.has_binary(b.hash)) tdb.put_binary(b);
    db::Measurement m;
    m.run_id = run_id;
    m.device_id = dev_id;
    m.family = qkv::kFamily;
    m.problem_key = p.key();
    m.problem_json = qkv::problem_to_json(p).dump();
    m.variant_name = qkv::variant_name(p, c, kSm90a);
    m.config_json = qkv::config_to_json(c).dump();
    m.binary_hash = b.hash;
    m.status = st;
    m.median_us = m.p20_us = m.p80_us = median;
    m.samples_us = {median};
    m.measured_at = 1700000001;
    ms.push_back(m);
  };
  add(qkvp(16), q16_unsplit, db::Status::wrong_result, 1);  // fastest but wrong: never a winner
  add(qkvp(16), q16, db::Status::ok, 5);
  add(qkvp(16), q256, db::Status::ok, 9);
  add(qkvp(4096), q4096, db::Status::ok, 300);
  tdb.add_measurements(ms);
  tdb.end_run(run_id, 1700000002);

  const auto ws = tdb.winners(kH100, qkv::kFamily);
  REQUIRE(ws.size() == 2);
  auto c = resolve_qkv(ws, kH100, kSm90a, qkvp(16));
  CHECK(c.step == "exact");
  CHECK(qkv::same_config(c.config, q16));
  CHECK(c.variant_name == qkv::variant_name(qkvp(16), q16, kSm90a));
  CHECK(c.binary_hash == "h_" + qkv::name_expression(qkvp(16), q16));
  CHECK(c.tuned_median_us == 5);
  c = resolve_qkv(ws, kH100, kSm90a, qkvp(20));
  CHECK(c.step == "nearest");
  CHECK(qkv::same_config(c.config, q16));
  c = resolve_qkv(ws, kH100, kSm90a, qkvp(3500));
  CHECK(c.step == "nearest");
  CHECK(c.tuned_problem_key == qkvp(4096).key());
  // The attention family's winners hold none of it.
  CHECK(resolve_qkv(tdb.winners(kH100, attn::kFamily), kH100, kSm90a, qkvp(16)).step == "default");
}

TEST_CASE("winners_device: own device class first, else the same compute capability's best-covered, else none",
          "[runtime]") {
  auto dev = [](const std::string& name, int major, int minor) {
    db::DeviceRecord d;
    d.name = name;
    d.uuid = "GPU-" + name;
    d.cc_major = major;
    d.cc_minor = minor;
    return d;
  };
  auto wins = [](const std::string& device, int n) {
    std::vector<db::Winner> out;
    for (int i = 0; i < n; ++i) {
      db::Winner w;
      w.device_name = device;
      w.family = "attention_prefill";
      w.problem_key = "p" + std::to_string(i);
      out.push_back(w);
    }
    return out;
  };
  const std::vector<db::DeviceRecord> devs = {dev("A100", 8, 0), dev("H100 PCIe", 9, 0), dev("H100 SXM", 9, 0),
                                              dev("H200", 9, 0)};
  std::vector<db::Winner> ws = wins("H100 SXM", 5);
  for (const auto& w : wins("H100 PCIe", 2)) ws.push_back(w);
  for (const auto& w : wins("A100", 9)) ws.push_back(w);
  // Its own winners, when there are any.
  auto own = ws;
  for (const auto& w : wins("H200", 1)) own.push_back(w);
  CHECK(winners_device(devs, own, "H200", 9, 0) == "H200");
  // None of its own: the sm_90 device with the most winners (not the A100's, which has more but another arch).
  CHECK(winners_device(devs, ws, "H200", 9, 0) == "H100 SXM");
  // Equal counts: the smaller name.
  auto tie = wins("H100 SXM", 2);
  for (const auto& w : wins("H100 PCIe", 2)) tie.push_back(w);
  CHECK(winners_device(devs, tie, "H200", 9, 0) == "H100 PCIe");
  // Only other architectures, or an empty database: its own name (every lookup ends at the default).
  CHECK(winners_device(devs, wins("A100", 3), "H200", 9, 0) == "H200");
  CHECK(winners_device({}, {}, "H200", 9, 0) == "H200");
  // A device row without winners is not chosen.
  CHECK(winners_device(devs, wins("A100", 3), "RTX 6000 Ada", 8, 9) == "RTX 6000 Ada");
}
