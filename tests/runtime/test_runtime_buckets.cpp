// [runtime] The runtime's buckets: size_bucket / bucket_key, and the nearest step on random tuning databases never
// answering with a config the database shows slower than the default in the asked problem's bucket.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "cache/tuning_db.h"
#include "generator/registry.h"
#include "runtime/runtime.h"

using namespace kt;
using nlohmann::json;

namespace {

const ArchId kSm90a{90, true};

qkv::Problem qkvp(int m) {
  qkv::Problem p;
  p.dtype = DType::bf16;
  p.format = quant::Format::int4_kb128;
  p.m = m;
  return p;
}

}  // namespace

TEST_CASE("size_bucket: the nearest power of two in log space, exact at the geometric midpoints", "[runtime]") {
  CHECK(size_bucket(1) == 0);
  CHECK(size_bucket(2) == 1);
  CHECK(size_bucket(3) == 2);  // 3 >= 2^1.5 = 2.83
  CHECK(size_bucket(5) == 2);  // 5 < 2^2.5 = 5.66
  CHECK(size_bucket(6) == 3);
  CHECK(size_bucket(1000) == 10);
  CHECK(size_bucket(1448) == 10);  // 2^10.5 = 1448.15
  CHECK(size_bucket(1449) == 11);
  CHECK(size_bucket((1ll << 31) - 1) == 31);
  for (int k = 0; k < 31; ++k) CHECK(size_bucket(1ll << k) == k);
  // Monotone, and every bucket k holds exactly the sizes whose nearest power of two is 2^k.
  int last = 0;
  for (long long x = 1; x < 100000; ++x) {
    const int b = size_bucket(x);
    REQUIRE(b >= last);
    REQUIRE(b - last <= 1);
    last = b;
    REQUIRE(std::abs(std::log2(double(x)) - b) <= 0.5);
  }
  CHECK_THROWS_AS(size_bucket(0), std::invalid_argument);
  CHECK_THROWS_AS(size_bucket(1ll << 31), std::invalid_argument);
}

TEST_CASE("bucket_key: the class key and the bucket of every size the nearest step interpolates", "[runtime]") {
  const Family& q = find_family(qkv::kFamily);
  CHECK(bucket_key(q, qkv::problem_to_json(qkvp(20))) == q.class_key(qkv::problem_to_json(qkvp(20))) + "/m~16");
  CHECK(bucket_key(q, qkv::problem_to_json(qkvp(12))) == bucket_key(q, qkv::problem_to_json(qkvp(22))));
  CHECK(bucket_key(q, qkv::problem_to_json(qkvp(11))) != bucket_key(q, qkv::problem_to_json(qkvp(12))));

  attn::Problem a;
  a.seqlen_q = 1000;
  a.seqlen_k = 3000;
  a.num_heads = 28;
  a.num_kv_heads = 4;
  a.causal = true;
  const Family& af = find_family(attn::kFamily);
  CHECK(bucket_key(af, attn::problem_to_json(a)) == "attention_prefill/bf16/d128/causal/seqlen_q~1024/seqlen_k~4096");
  a.batch = 8;  // batch is a tie break, not a bucket axis
  CHECK(bucket_key(af, attn::problem_to_json(a)) == "attention_prefill/bf16/d128/causal/seqlen_q~1024/seqlen_k~4096");

  decode::Problem d;
  d.batch = 12;
  d.kv_len = 3000;
  d.num_heads = 28;
  d.num_kv_heads = 4;
  const Family& df = find_family(decode::kFamily);
  CHECK(bucket_key(df, decode::problem_to_json(d)).find("/batch~16/kv_len~4096") != std::string::npos);

  // with_bucket_sizes replaces exactly the bucket sizes, in bucket_sizes' order, and checks the result.
  const json moved = df.with_bucket_sizes(decode::problem_to_json(d), {64, 512});
  CHECK(moved["batch"] == 64);
  CHECK(moved["kv_len"] == 512);
  CHECK(df.class_key(moved) == df.class_key(decode::problem_to_json(d)));
  CHECK_THROWS_AS(df.with_bucket_sizes(decode::problem_to_json(d), {64}), ProblemError);
  CHECK_THROWS_AS(af.with_bucket_sizes(attn::problem_to_json(a), {0, 4}), ProblemError);
}

TEST_CASE("resolve() on random databases never answers with a config known slower than the default in the bucket",
          "[runtime]") {
  const Family& f = find_family(qkv::kFamily);
  const std::string dev = "GPU";
  std::mt19937 rng(2024);
  int nearest = 0, passed_over = 0, defaults = 0;
  for (int trial = 0; trial < 40; ++trial) {
    db::TuningDb tdb(":memory:");
    db::DeviceRecord d;
    d.name = dev;
    d.uuid = "GPU-" + std::to_string(trial);
    d.cc_major = 9;
    const long long dev_id = tdb.upsert_device(d);
    db::RunRecord run;
    run.argv = "autotune --test";
    run.started_at = 1700000000;
    const long long run_id = tdb.begin_run(run);

    // A few tuned m, several per bucket on purpose; each with a random subset of configs (the default of some m
    // among them) at random medians.
    std::vector<db::Measurement> ms;
    std::uniform_int_distribution<int> m_of(1, 600);
    const int n_tuned = 2 + int(rng() % 6);
    for (int t = 0; t < n_tuned; ++t) {
      const qkv::Problem p = qkvp(m_of(rng));
      const json pj = qkv::problem_to_json(p);
      std::vector<json> configs = f.enumerate(pj, kSm90a, device_model(kSm90a));
      std::shuffle(configs.begin(), configs.end(), rng);
      configs.resize(std::min<size_t>(configs.size(), 6));
      for (int other : {1, 16, 64, 256})  // the defaults of other sizes, sometimes
        if (rng() % 2) configs.push_back(f.default_config(qkv::problem_to_json(qkvp(other)), kSm90a));
      if (rng() % 2) configs.push_back(f.default_config(pj, kSm90a));
      for (const auto& c : configs) {
        db::Measurement m;
        m.run_id = run_id;
        m.device_id = dev_id;
        m.family = f.name();
        m.problem_key = f.problem_key(pj);
        m.problem_json = pj.dump();
        m.variant_name = f.variant_name(pj, c, kSm90a);
        m.config_json = c.dump();
        m.status = rng() % 8 ? db::Status::ok : db::Status::wrong_result;
        m.median_us = m.p20_us = m.p80_us = 1 + double(rng() % 1000) / 10;
        m.samples_us = {m.median_us};
        m.measured_at = 1700000001;
        m.screened = rng() % 3 == 0;  // left out by its final round
        ms.push_back(m);
      }
    }
    tdb.add_measurements(ms);
    const auto winners = tdb.winners(dev);
    const auto medians = tdb.variant_medians(dev);

    for (int ask = 1; ask <= 700; ask += 1 + int(rng() % 7)) {
      const json pj = qkv::problem_to_json(qkvp(ask));
      const std::string bucket = bucket_key(f, pj);
      const FamilyChoice ch = resolve(f, winners, dev, kSm90a, pj, [&] { return &medians; });
      INFO("trial " << trial << " m " << ask << ": " << ch.step << ": " << ch.why);
      const json dflt = f.default_config(pj, kSm90a);
      if (ch.step == "default") {
        ++defaults;
        CHECK(f.same_config(ch.config, dflt));
        continue;
      }
      // Whatever answers comes from the asked bucket ...
      const db::Winner* w = nullptr;
      for (const auto& x : winners)
        if (x.problem_key == ch.tuned_problem_key) w = &x;
      REQUIRE(w != nullptr);
      CHECK(bucket_key(f, json::parse(w->problem_json)) == bucket);
      if (ch.step == "exact") continue;
      ++nearest;
      passed_over += ch.why.find("skipped") != std::string::npos;
      // ... and no tuned problem of that bucket measured it slower than the default.
      std::set<std::string> bucket_problems;
      for (const auto& x : winners)
        if (bucket_key(f, json::parse(x.problem_json)) == bucket) bucket_problems.insert(x.problem_key);
      // From the raw rows: a variant's evidence is (every ok row screened, the least median of its unscreened ok
      // rows, else of all its ok rows); a screened one lost its problem's final round to the unscreened ones.
      for (const auto& key : bucket_problems) {
        auto evidence = [&](auto&& pick) {
          std::pair<bool, double> e{true, -1};
          for (const auto& m : ms)
            if (m.problem_key == key && m.status == db::Status::ok && pick(m) &&
                (e.second < 0 || std::make_pair(m.screened, m.median_us) < e))
              e = {m.screened, m.median_us};
          return e;
        };
        const auto mine = evidence([&](const db::Measurement& m) { return m.variant_name == ch.variant_name; });
        const auto def =
            evidence([&](const db::Measurement& m) { return f.same_config(json::parse(m.config_json), dflt); });
        INFO("at " << key << ": chosen " << mine.second << " us (screened " << mine.first << "), default " << def.second
                   << " us (screened " << def.first << ")");
        if (mine.second > 0 && def.second > 0) CHECK(mine <= def);
      }
    }
  }
  // The random databases exercised every branch.
  CHECK(nearest > 50);
  CHECK(passed_over > 0);
  CHECK(defaults > 50);
}
