// [runtime] The lookup chain (resolve_attention) without a GPU: exact -> nearest -> default -> error.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <unistd.h>
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

TEST_CASE("resolve_attention: nearest by log distance of the sequence lengths", "[runtime]") {
  const auto ws = three_tuned();
  auto c = resolve_attention(ws, kH100, kSm90a, qwen(3000));
  CHECK(c.step == "nearest");
  CHECK(c.tuned_problem_key == qwen(2048).key());
  CHECK(same_config(c.config, cB));
  CHECK(c.binary_hash == "hash_" + qwen(2048).key());  // same kernel class: the tuned binary is reused
  CHECK(c.variant_name == variant_name(qwen(3000), cB, kSm90a));
  CHECK(c.why.find(qwen(2048).key()) != std::string::npos);
  CHECK(c.why.find("log distance 0.76") != std::string::npos);  // 2 * ln(3000/2048) = 0.763

  c = resolve_attention(ws, kH100, kSm90a, qwen(6000));
  CHECK(c.step == "nearest");
  CHECK(c.tuned_problem_key == qwen(8192).key());
  CHECK(same_config(c.config, cC));

  c = resolve_attention(ws, kH100, kSm90a, qwen(100));
  CHECK(c.tuned_problem_key == qwen(512).key());

  // seqlen_q and seqlen_k count separately: sq 512 / sk 8192 is ln 16 = 2.77 away from all three
  // (0 + ln 16, ln 4 + ln 4, ln 16 + 0); batch*heads are equal, so the smallest key wins.
  Problem mixed = qwen(512);
  mixed.seqlen_k = 8192;
  c = resolve_attention(ws, kH100, kSm90a, mixed);
  CHECK(c.step == "nearest");
  const std::vector<std::string> keys = {qwen(512).key(), qwen(2048).key(), qwen(8192).key()};
  CHECK(c.tuned_problem_key == *std::min_element(keys.begin(), keys.end()));
}

TEST_CASE("resolve_attention: nearest ties go to the closest batch*heads, then the key", "[runtime]") {
  Problem far = qwen(1024);
  far.batch = 8;
  Problem near = qwen(4096);  // same distance in sequence length as 1024 from 2048
  std::vector<db::Winner> ws = {winner(far, cA), winner(near, cB)};
  auto c = resolve_attention(ws, kH100, kSm90a, qwen(2048));
  CHECK(c.step == "nearest");
  CHECK(c.tuned_problem_key == near.key());
  // Make batch*heads equal: the smaller key wins, whatever the order of the rows.
  far.batch = 1;
  ws = {winner(near, cB), winner(far, cA)};
  c = resolve_attention(ws, kH100, kSm90a, qwen(2048));
  CHECK(c.tuned_problem_key == std::min(near.key(), far.key()));
}

TEST_CASE("resolve_attention: nearest skips another dtype, head_dim, causal flag, device or family", "[runtime]") {
  std::vector<db::Winner> ws = {
      winner(qwen(2048, DType::f16), cA),                      // other dtype
      winner(qwen(2048, DType::bf16, 64), cA),                 // other head_dim
      winner(qwen(2048, DType::bf16, 128, false), cA),         // not causal
      winner(qwen(2048), cA, "NVIDIA A100-SXM4-80GB"),         // other device class
      winner(qwen(8192), cB),                                  // the only usable one: far, but right class
  };
  db::Winner other_family = winner(qwen(2048), cA);
  other_family.family = "attention_decode";
  ws.push_back(other_family);
  db::Winner corrupt = winner(qwen(2048), cA);
  corrupt.config_json = "{\"tile_m\": 64}";  // unreadable config: never a candidate
  ws.push_back(corrupt);

  const auto c = resolve_attention(ws, kH100, kSm90a, qwen(2048));
  CHECK(c.step == "nearest");
  CHECK(c.tuned_problem_key == qwen(8192).key());
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
  std::vector<db::Winner> ws = {winner(qwen(2048), big, dev), winner(qwen(512), cA, dev)};

  // On sm_90a the exact (big) winner is fine.
  CHECK(resolve_attention(ws, dev, kSm90a, qwen(2048)).step == "exact");
  // On sm_86 the exact row is rejected, and so would be a nearest one: 512 answers.
  auto c = resolve_attention(ws, dev, kSm86, qwen(2048));
  CHECK(c.step == "nearest");
  CHECK(c.tuned_problem_key == qwen(512).key());
  CHECK(same_config(c.config, cA));
  c = resolve_attention(ws, dev, kSm86, qwen(4096));
  CHECK(c.tuned_problem_key == qwen(512).key());
  // Only the big one: default, and the why says a tuned config was invalid.
  ws.pop_back();
  c = resolve_attention(ws, dev, kSm86, qwen(4096));
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
      b.cubin = std::string("\x7f" "ELF fake cubin", 15);
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
    c = resolve_attention(ws, kH100, kSm90a, qwen(1000));
    CHECK(c.step == "nearest");
    CHECK(same_config(c.config, cB));
    c = resolve_attention(ws, kH100, kSm90a, qwen(5000));
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
