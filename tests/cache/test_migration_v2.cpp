// Tuning database migrations. 1 -> 2 (cache/migration_v2.h): a database written in schema 1, with qkv_proj configs in
// the flat form of that schema, opens migrated: every config and variant name in the per-mainloop form, equal to what
// the qkv_proj family writes today, and the winners unchanged. 2 -> 3: measurements gain `screened` (0 for every
// existing row), the winners unchanged. 3 -> 4: the winners view's fastest median wins outright (no 1% tie window).
#include <SQLiteCpp/SQLiteCpp.h>

#include <unistd.h>
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cache/migration_v2.h"
#include "cache/tuning_db.h"
#include "generator/arch.h"
#include "generator/qkv_family.h"

using namespace kt;
using namespace kt::db;

namespace {

struct TempFile {
  std::string path;
  TempFile() {
    path =
        (std::filesystem::temp_directory_path() / ("kt_migration_v2_" + std::to_string(::getpid()) + ".db")).string();
    remove();
  }
  ~TempFile() { remove(); }
  void remove() {
    for (const char* s : {"", "-wal", "-shm"}) std::filesystem::remove(path + s);
  }
};

/// A device and a run in `db`: (device id, run id).
std::pair<long long, long long> device_and_run(TuningDb& db, const std::string& device, const std::string& argv) {
  DeviceRecord d;
  d.name = device;
  d.uuid = "GPU-" + argv;
  RunRecord r;
  r.argv = argv;
  const long long dev = db.upsert_device(d);
  return {dev, db.begin_run(r)};
}

/// A schema-1 qkv_proj config: its variant name and config JSON exactly as schema 1 stored them, and the config it
/// means in today's fields.
struct OldRow {
  const char* name;  // the config part of the variant name
  const char* json;
  qkv::Config now;
};

qkv::Config gemv(int tm, int tn, int wk, int wn, qkv::GemvLoad ld, int pf, qkv::GemvReduce r, int cl) {
  return qkv::make_config(tm, tn, qkv::GemvConfig{wk, wn, ld, pf, r, cl});
}
qkv::Config ws(int tm, int tn, int cons, int kg, int st, qkv::WsSplit split, int sk) {
  return qkv::make_config(tm, tn, qkv::WsConfig{cons, kg, st, split, sk});
}

const OldRow kOld[] = {
    {"m16_n128_k64_w1x4_s2_sk8_p1",
     R"({"mainloop":"mma","tile_m":16,"tile_n":128,"tile_k":64,"warps_m":1,"warps_n":4,"stages":2,"split_k":8,"prefetch":1,"cluster_m":1})",
     qkv::make_config(16, 128, qkv::MmaConfig{64, 1, 4, 2, 8, 1})},
    {"gemv_m8_n16_w4x1_s0_p1_bal",
     R"({"mainloop":"gemv","tile_m":8,"tile_n":16,"tile_k":128,"warps_m":4,"warps_n":1,"stages":0,"split_k":0,"prefetch":1,"cluster_m":1})",
     gemv(8, 16, 4, 1, qkv::GemvLoad::register_ring, 1, qkv::GemvReduce::balanced_tail, 1)},
    {"gemv_m8_n32_w2x1_s1_p2_cl4",
     R"({"mainloop":"gemv","tile_m":8,"tile_n":32,"tile_k":128,"warps_m":2,"warps_n":1,"stages":1,"split_k":4,"prefetch":2,"cluster_m":1})",
     gemv(8, 32, 2, 1, qkv::GemvLoad::bulk_rows, 2, qkv::GemvReduce::cluster, 4)},
    {"gemv_m16_n16_w4x1_s3_p1",
     R"({"mainloop":"gemv","tile_m":16,"tile_n":16,"tile_k":128,"warps_m":4,"warps_n":1,"stages":3,"split_k":1,"prefetch":1,"cluster_m":1})",
     gemv(16, 16, 4, 1, qkv::GemvLoad::tma_x, 1, qkv::GemvReduce::none, 1)},
    {"gemv_m8_n32_w4x2_s2_p2",
     R"({"mainloop":"gemv","tile_m":8,"tile_n":32,"tile_k":128,"warps_m":4,"warps_n":2,"stages":2,"split_k":1,"prefetch":2,"cluster_m":1})",
     gemv(8, 32, 4, 2, qkv::GemvLoad::tma, 2, qkv::GemvReduce::none, 1)},
    {"wgmma_m128_n256_k64_s3_sk2_p2",
     R"({"mainloop":"wgmma","tile_m":128,"tile_n":256,"tile_k":64,"warps_m":8,"warps_n":1,"stages":3,"split_k":2,"prefetch":2,"cluster_m":1})",
     qkv::make_config(128, 256, qkv::WgmmaConfig{64, 3, 2, 2})},
    {"wgmma_ws_m256_n128_c2_s4_sk1",
     R"({"mainloop":"wgmma_ws","tile_m":256,"tile_n":128,"tile_k":64,"warps_m":8,"warps_n":1,"stages":4,"split_k":1,"prefetch":1,"cluster_m":1})",
     ws(256, 128, 2, 1, 4, qkv::WsSplit::split_k, 1)},
    {"wgmma_ws_m16_n128_c2_s8_streamk",
     R"({"mainloop":"wgmma_ws","tile_m":16,"tile_n":128,"tile_k":64,"warps_m":8,"warps_n":1,"stages":8,"split_k":0,"prefetch":1,"cluster_m":1})",
     ws(16, 128, 2, 1, 8, qkv::WsSplit::stream_k, 1)},
    {"wgmma_ws_m16_n64_c1_s6_cl3_kg2",
     R"({"mainloop":"wgmma_ws","tile_m":16,"tile_n":64,"tile_k":64,"warps_m":4,"warps_n":2,"stages":6,"split_k":3,"prefetch":1,"cluster_m":1})",
     ws(16, 64, 1, 2, 6, qkv::WsSplit::split_k, 3)},
    {"wgmma_pairs_m128_n96_s8_cm2",
     R"({"mainloop":"wgmma_pairs","tile_m":128,"tile_n":96,"tile_k":64,"warps_m":8,"warps_n":1,"stages":8,"split_k":1,"prefetch":1,"cluster_m":2})",
     qkv::make_config(128, 96, qkv::PairsConfig{8, 2})},
    // written before cluster_m existed
    {"wgmma_pairs_m64_n48_s12",
     R"({"mainloop":"wgmma_pairs","tile_m":64,"tile_n":48,"tile_k":64,"warps_m":4,"warps_n":1,"stages":12,"split_k":1,"prefetch":1})",
     qkv::make_config(64, 48, qkv::PairsConfig{12, 1})},
};

}  // namespace

TEST_CASE("tuning db 1 -> 2: qkv_proj configs and variant names rewritten, winners unchanged", "[db][qkv]") {
  const ArchId arch = parse_arch("sm_90a");
  qkv::Problem p;
  p.format = quant::Format::fp16;
  p.dtype = DType::f16;
  const std::string prefix = "qkv_proj__fp16_fp16_d128_bias_rope__", suffix = "__sm_90a";
  TempFile tmp;
  std::map<std::string, long long> winner_before;  // problem key -> measurement id
  {
    TuningDb db(tmp.path);
    const auto [dev, run] = device_and_run(db, "NVIDIA H100 80GB HBM3", "autotune (schema 1)");
    std::vector<Measurement> ms;
    // Each old config is measured for two problems (M = 16 and 256): row i is fastest for M = 16 when i is even,
    // for M = 256 when i is odd, so both winners come from different rows.
    int i = 0;
    for (const OldRow& o : kOld) {
      BinaryRecord b;
      b.hash = "hash_" + std::to_string(i);
      b.family = "qkv_proj";
      b.variant_name = prefix + o.name + suffix;
      b.name_expression = qkv::name_expression(p, o.now);  // unchanged by the migration
      b.arch = "sm_90a";
      b.cubin = "elf";
      b.registers = 100;
      db.put_binary(b);
      for (int m : {16, 256}) {
        p.m = m;
        Measurement x;
        x.run_id = run;
        x.device_id = dev;
        x.family = "qkv_proj";
        x.problem_key = p.key();
        x.problem_json = qkv::problem_to_json(p).dump();
        x.variant_name = prefix + o.name + suffix;
        x.config_json = o.json;
        x.binary_hash = b.hash;
        x.median_us = 10.0 + ((i % 2 == 0) == (m == 16) ? i : 50 + i);
        x.p20_us = x.p80_us = x.median_us;
        x.samples_us = {x.median_us};
        ms.push_back(x);
      }
      ++i;
    }
    db.add_measurements(ms);
    for (const Winner& w : db.winners()) winner_before[w.problem_key] = w.measurement_id;
    REQUIRE(winner_before.size() == 2);
  }
  {  // what schema 1 wrote: the same tables without migration 3's column, user_version 1
    SQLite::Database raw(tmp.path, SQLite::OPEN_READWRITE);
    raw.exec("DROP VIEW winners; ALTER TABLE measurements DROP COLUMN screened; PRAGMA user_version = 1");
  }
  CHECK_THROWS_WITH(TuningDb(tmp.path, true),
                    Catch::Contains("schema version 1") && Catch::Contains("a read-write open migrates it"));

  TuningDb db(tmp.path);
  CHECK(db.schema_version() == TuningDb::kSchemaVersion);
  CHECK(db.migrations_applied() == TuningDb::kSchemaVersion - 1);
  int i = 0;
  for (const OldRow& o : kOld) {
    INFO(o.name);
    const std::string now = qkv::variant_name(p, o.now, arch);
    CHECK(qkv_variant_v1_to_v2(prefix + o.name + suffix) == now);
    CHECK(qkv::same_config(qkv::config_from_json(qkv_config_v1_to_v2(nlohmann::json::parse(o.json))), o.now));
    const auto b = db.get_binary("hash_" + std::to_string(i++));
    REQUIRE(b);
    CHECK(b->variant_name == now);
  }
  for (int m : {16, 256}) {
    p.m = m;
    const auto ms = db.measurements("NVIDIA H100 80GB HBM3", "qkv_proj", p.key());
    REQUIRE(ms.size() == std::size(kOld));
    for (const Measurement& x : ms) {
      const qkv::Config c = qkv::config_from_json(nlohmann::json::parse(x.config_json));
      CHECK(x.variant_name == qkv::variant_name(p, c, arch));
      CHECK(qkv::name_expression(p, c) == db.get_binary(x.binary_hash)->name_expression);
    }
    const auto w = db.winner("NVIDIA H100 80GB HBM3", "qkv_proj", p.key());
    REQUIRE(w);
    CHECK(w->measurement_id == winner_before.at(p.key()));
    CHECK(qkv::same_config(qkv::config_from_json(nlohmann::json::parse(w->config_json)), kOld[m == 16 ? 0 : 1].now));
  }
  // Reopening applies nothing more.
  TuningDb again(tmp.path);
  CHECK(again.migrations_applied() == 0);
}

TEST_CASE("tuning db 1 -> 2: a qkv_proj row of no schema-1 form stops the migration, naming the row and what to do",
          "[db][qkv]") {
  CHECK_THROWS_WITH(qkv_variant_v1_to_v2("qkv_proj__bf16_nf4_d128_bias_rope__gemv_m8_x__sm_90a"),
                    Catch::Contains("not a schema-1 config name"));
  CHECK_THROWS_WITH(qkv_config_v1_to_v2(nlohmann::json::parse(R"({"mainloop":"gemv","tile_m":8})")),
                    Catch::Contains("tile_n"));
  TempFile tmp;
  {
    TuningDb db(tmp.path);
    DeviceRecord d;
    d.name = "G";
    d.uuid = "GPU-bad";
    const long long dev = db.upsert_device(d);
    const long long run = db.begin_run(RunRecord{});
    Measurement x;
    x.run_id = run;
    x.device_id = dev;
    x.family = "qkv_proj";
    x.problem_key = "k";
    x.problem_json = "{}";
    x.variant_name = "qkv_proj__bf16_nf4_d128_bias_rope__gemv_unknown__sm_90a";
    x.config_json = "{}";
    db.add_measurements({x});
  }
  {
    SQLite::Database raw(tmp.path, SQLite::OPEN_READWRITE);
    raw.exec("PRAGMA user_version = 1");
  }
  CHECK_THROWS_WITH(TuningDb(tmp.path), Catch::Contains("measurements row 1") && Catch::Contains("delete that row"));
  SQLite::Database raw(tmp.path, SQLite::OPEN_READONLY);
  CHECK(raw.execAndGet("PRAGMA user_version").getInt() == 1);  // nothing half-done: the transaction rolled back
}

TEST_CASE("tuning db 2 -> 3: every existing row unscreened, winners unchanged", "[db]") {
  TempFile tmp;
  std::map<std::string, long long> winner_before;
  {
    TuningDb db(tmp.path);
    const auto [dev, run] = device_and_run(db, "NVIDIA H200", "autotune (schema 2)");
    std::vector<Measurement> ms;
    for (int p = 0; p < 3; ++p)
      for (int v = 0; v < 4; ++v) {
        Measurement x;
        x.run_id = run;
        x.device_id = dev;
        x.family = "attention_prefill";
        x.problem_key = "p" + std::to_string(p);
        x.problem_json = "{}";
        x.variant_name = "v" + std::to_string(v);
        x.config_json = "{}";
        x.median_us = 10.0 + (v + p) % 4;  // problem p's winner is v(4 - p) % 4
        x.p20_us = x.p80_us = x.median_us;
        ms.push_back(x);
      }
    db.add_measurements(ms);
    for (const Winner& w : db.winners()) winner_before[w.problem_key] = w.measurement_id;
    REQUIRE(winner_before.size() == 3);
  }
  {  // what schema 2 wrote: no `screened` column, user_version 2
    SQLite::Database raw(tmp.path, SQLite::OPEN_READWRITE);
    raw.exec("DROP VIEW winners; ALTER TABLE measurements DROP COLUMN screened; PRAGMA user_version = 2");
  }
  CHECK_THROWS_WITH(TuningDb(tmp.path, true),
                    Catch::Contains("schema version 2") && Catch::Contains("a read-write open migrates it"));
  TuningDb db(tmp.path);
  CHECK(db.schema_version() == TuningDb::kSchemaVersion);
  CHECK(db.migrations_applied() == TuningDb::kSchemaVersion - 2);
  for (int p = 0; p < 3; ++p) {
    const std::string key = "p" + std::to_string(p);
    const auto ms = db.measurements("NVIDIA H200", "attention_prefill", key);
    REQUIRE(ms.size() == 4);
    for (const auto& m : ms) CHECK_FALSE(m.screened);
    CHECK(db.winner("NVIDIA H200", "attention_prefill", key)->measurement_id == winner_before.at(key));
  }
}

TEST_CASE("tuning db 3 -> 4: the winners view's fastest median wins, only equal medians tie", "[db]") {
  TempFile tmp;
  {
    TuningDb db(tmp.path);
    const auto [dev, run] = device_and_run(db, "NVIDIA H200", "autotune (schema 3)");
    for (const auto& [hash, regs] : {std::pair<const char*, int>{"r96", 96}, {"r32", 32}}) {
      BinaryRecord b;
      b.hash = hash;
      b.family = "attention_prefill";
      b.variant_name = hash;
      b.arch = "sm_90a";
      b.cubin = "elf";
      b.registers = regs;
      db.put_binary(b);
    }
    std::vector<Measurement> ms;
    for (const auto& [name, us, hash] : {std::tuple<const char*, double, const char*>{"fast", 100.0, "r96"},
                                         {"lean", 100.5, "r32"},
                                         {"tie_a", 200.0, "r96"},
                                         {"tie_b", 200.0, "r32"}}) {
      Measurement x;
      x.run_id = run;
      x.device_id = dev;
      x.family = "attention_prefill";
      x.problem_key = std::string(name).rfind("tie", 0) == 0 ? "t" : "p";
      x.problem_json = "{}";
      x.variant_name = name;
      x.config_json = "{}";
      x.binary_hash = hash;
      x.median_us = x.p20_us = x.p80_us = us;
      ms.push_back(x);
    }
    db.add_measurements(ms);
  }
  {  // what schema 3 left: its own winners view (a stand-in here: the migration replaces it), user_version 3
    SQLite::Database raw(tmp.path, SQLite::OPEN_READWRITE);
    raw.exec("DROP VIEW winners; CREATE VIEW winners AS SELECT 1 AS schema_3; PRAGMA user_version = 3");
  }
  CHECK_THROWS_WITH(TuningDb(tmp.path, true),
                    Catch::Contains("schema version 3") && Catch::Contains("a read-write open migrates it"));
  TuningDb db(tmp.path);
  CHECK(db.schema_version() == 4);
  CHECK(db.migrations_applied() == 1);
  CHECK(db.winner("NVIDIA H200", "attention_prefill", "p")->variant_name == "fast");   // 0.5% faster, more registers
  CHECK(db.winner("NVIDIA H200", "attention_prefill", "t")->variant_name == "tie_b");  // equal: fewer registers
}
