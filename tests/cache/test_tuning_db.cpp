// The SQLite tuning database: round trips, migrations, resume, the winners view (against the C++ rule),
// concurrent writer processes, merge, and readability by the plain sqlite3 shell. CPU only.
#include <catch2/catch.hpp>

#include <SQLiteCpp/SQLiteCpp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cache/tuning_db.h"
#include "tests/support.h"

namespace fs = std::filesystem;
using namespace kt::db;

namespace {

// A unique database path under the system temp dir; the file and its -wal / -shm are removed at scope exit.
struct TempDb {
  std::string path;
  TempDb() {
    static std::atomic<int> counter{0};
    std::random_device rd;
    path = (fs::temp_directory_path() / ("kt_db_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++) +
                                         "_" + std::to_string(rd()) + ".sqlite"))
               .string();
    remove_all();
  }
  ~TempDb() { remove_all(); }
  void remove_all() const {
    std::error_code ec;
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(path + suffix, ec);
  }
};

DeviceRecord device(const std::string& name, const std::string& uuid) {
  DeviceRecord d;
  d.name = name;
  d.uuid = uuid;
  d.cc_major = 9;
  d.cc_minor = 0;
  d.sm_count = 132;
  d.l2_bytes = 52428800;
  d.driver_version = 12040;
  d.sm_clock_khz = 1980000;
  d.mem_clock_khz = 2619000;
  return d;
}

RunRecord run_record(const std::string& argv, long long started, const std::string& host = "node-1") {
  RunRecord r;
  r.argv = argv;
  r.shapes_path = "shapes/llama.txt";
  r.shapes_hash = "abc123";
  r.kerntune_version = "0.1.0";
  r.host = host;
  r.started_at = started;
  return r;
}

BinaryRecord binary(const std::string& hash, int registers, int static_smem, int dynamic_smem,
                    const std::string& variant = "v") {
  BinaryRecord b;
  b.hash = hash;
  b.family = "attention";
  b.variant_name = variant;
  b.name_expression = "flash_fwd<" + variant + ">";
  b.lowered_name = "_Z9flash_fwd" + variant;
  b.arch = "sm_90";
  b.nvrtc_version = "12.4";
  b.options = "-std=c++17 --use_fast_math";
  b.cubin = std::string(
                "\x7f"
                "ELF\0\0\x01\x02",
                8) +
            hash + std::string(3, '\0');
  b.registers = registers;
  b.spill_store_bytes = 4;
  b.spill_load_bytes = 8;
  b.stack_bytes = 16;
  b.static_smem_bytes = static_smem;
  b.dynamic_smem_bytes = dynamic_smem;
  b.compile_ms = 123.25;
  b.log = "ptxas info: Used " + std::to_string(registers) + " registers";
  return b;
}

Measurement meas(long long run_id, long long device_id, const std::string& key, const std::string& variant, Status st,
                 double median_us, const std::string& bin_hash, long long measured_at) {
  Measurement m;
  m.run_id = run_id;
  m.device_id = device_id;
  m.family = "attention";
  m.problem_key = key;
  m.problem_json = "{\"key\":\"" + key + "\"}";
  m.variant_name = variant;
  m.config_json = "{\"variant\":\"" + variant + "\"}";
  m.binary_hash = bin_hash;
  m.status = st;
  m.median_us = median_us;
  m.p20_us = median_us * 0.98;
  m.p80_us = median_us * 1.03;
  if (st == Status::ok) m.samples_us = {median_us * 0.97, median_us, median_us * 1.05};
  m.error = st == Status::ok ? "" : "failed: " + variant;
  m.sm_clock_mhz = 1755;
  m.rel_err = st == Status::ok ? 3.5e-4 : -1;
  m.metric = median_us > 0 ? 1e6 / median_us : 0;
  m.measured_at = measured_at;
  return m;
}

void check_same_measurement(const Measurement& a, const Measurement& b) {
  CHECK(a.run_id == b.run_id);
  CHECK(a.device_id == b.device_id);
  CHECK(a.family == b.family);
  CHECK(a.problem_key == b.problem_key);
  CHECK(a.problem_json == b.problem_json);
  CHECK(a.variant_name == b.variant_name);
  CHECK(a.config_json == b.config_json);
  CHECK(a.binary_hash == b.binary_hash);
  CHECK(a.status == b.status);
  CHECK(a.median_us == b.median_us);
  CHECK(a.p20_us == b.p20_us);
  CHECK(a.p80_us == b.p80_us);
  CHECK(a.samples_us == b.samples_us);
  CHECK(a.error == b.error);
  CHECK(a.sm_clock_mhz == b.sm_clock_mhz);
  CHECK(a.rel_err == b.rel_err);
  CHECK(a.metric == b.metric);
  CHECK(a.measured_at == b.measured_at);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DbError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("status names round trip and unknown names are refused", "[db]") {
  for (Status s : {Status::ok, Status::invalid, Status::compile_failed, Status::launch_failed, Status::wrong_result,
                   Status::timeout})
    CHECK(parse_status(status_name(s)) == s);
  CHECK(std::string(status_name(Status::wrong_result)) == "wrong_result");
  CHECK_THROWS_AS(parse_status("fast"), DbError);
}

TEST_CASE("every record type round-trips, in memory and through a file", "[db]") {
  TempDb tmp;
  const bool in_file = GENERATE(false, true);
  const std::string path = in_file ? tmp.path : ":memory:";
  INFO("path " << path);

  // Every byte value, zeros included, plus a trailing zero: a BLOB, never a C string.
  BinaryRecord bin = binary("h-roundtrip", 168, 8192, 73728, "attn_fp16_d128_m128");
  bin.cubin.clear();
  for (int i = 0; i < 4099; ++i) bin.cubin.push_back(static_cast<char>((i * 7 + (i >> 8)) & 0xff));
  bin.cubin.push_back('\0');
  REQUIRE(bin.cubin.find('\0') < 100);
  BinaryRecord empty_bin = binary("h-empty", -1, 0, 0);
  empty_bin.cubin.clear();

  const DeviceRecord dev = device("NVIDIA H100 80GB HBM3", "GPU-1111");
  const RunRecord run = run_record("autotune --shapes 'a b' \"q\"", 1700000000);

  Measurement ok = meas(0, 0, "attn|fp16|b1|s4096", "attn_fp16_d128_m128", Status::ok, 412.125, bin.hash, 1700000005);
  ok.samples_us = {0.1, 1e-300, 412.125, 123456.789012345678, 1.0 / 3.0};
  Measurement failed = meas(0, 0, "attn|fp16|b1|s4096", "attn_fp16_d256", Status::compile_failed, 0, "", 1700000006);
  failed.error = "line 1: 'quoted'\n\"twice\"\ttab; DROP TABLE measurements;--";

  long long dev_id = 0, run_id = 0;
  {
    TuningDb db(path);
    dev_id = db.upsert_device(dev);
    run_id = db.begin_run(run);
    db.put_binary(bin);
    db.put_binary(empty_bin);
    ok.run_id = failed.run_id = run_id;
    ok.device_id = failed.device_id = dev_id;
    db.add_measurements({ok, failed});
    db.end_run(run_id, 1700000100);
    CHECK_THROWS_AS(db.end_run(run_id + 1000, 1), DbError);
    if (!in_file) {
      CHECK(db.count("measurements") == 2);
      CHECK(db.get_binary("h-roundtrip")->cubin == bin.cubin);
    }
  }
  if (!in_file) return;  // ":memory:" is gone once closed; the checks below read the reopened file

  TuningDb db(path);
  CHECK(db.migrations_applied() == 0);
  const auto d = db.get_device(dev_id);
  REQUIRE(d);
  CHECK(d->name == dev.name);
  CHECK(d->uuid == dev.uuid);
  CHECK(d->cc_major == dev.cc_major);
  CHECK(d->cc_minor == dev.cc_minor);
  CHECK(d->sm_count == dev.sm_count);
  CHECK(d->l2_bytes == dev.l2_bytes);
  CHECK(d->driver_version == dev.driver_version);
  CHECK(d->sm_clock_khz == dev.sm_clock_khz);
  CHECK(d->mem_clock_khz == dev.mem_clock_khz);
  CHECK_FALSE(db.get_device(dev_id + 1));

  const auto r = db.get_run(run_id);
  REQUIRE(r);
  CHECK(r->argv == run.argv);
  CHECK(r->shapes_path == run.shapes_path);
  CHECK(r->shapes_hash == run.shapes_hash);
  CHECK(r->kerntune_version == run.kerntune_version);
  CHECK(r->host == run.host);
  CHECK(r->started_at == run.started_at);
  CHECK(r->ended_at == 1700000100);

  const auto b = db.get_binary(bin.hash);
  REQUIRE(b);
  CHECK(b->hash == bin.hash);
  CHECK(b->family == bin.family);
  CHECK(b->variant_name == bin.variant_name);
  CHECK(b->name_expression == bin.name_expression);
  CHECK(b->lowered_name == bin.lowered_name);
  CHECK(b->arch == bin.arch);
  CHECK(b->nvrtc_version == bin.nvrtc_version);
  CHECK(b->options == bin.options);
  CHECK(b->cubin.size() == bin.cubin.size());
  CHECK(b->cubin == bin.cubin);
  CHECK(b->registers == bin.registers);
  CHECK(b->spill_store_bytes == bin.spill_store_bytes);
  CHECK(b->spill_load_bytes == bin.spill_load_bytes);
  CHECK(b->stack_bytes == bin.stack_bytes);
  CHECK(b->static_smem_bytes == bin.static_smem_bytes);
  CHECK(b->dynamic_smem_bytes == bin.dynamic_smem_bytes);
  CHECK(b->compile_ms == bin.compile_ms);
  CHECK(b->log == bin.log);
  const auto eb = db.get_binary("h-empty");
  REQUIRE(eb);
  CHECK(eb->cubin.empty());
  CHECK(eb->registers == -1);
  CHECK(db.has_binary(bin.hash));
  CHECK_FALSE(db.has_binary("h-missing"));
  CHECK_FALSE(db.get_binary("h-missing"));
  // The tie-break's resources without the cubin.
  const auto res = db.binary_resources(bin.hash);
  REQUIRE(res);
  CHECK(res->first == bin.registers);
  CHECK(res->second == bin.static_smem_bytes + bin.dynamic_smem_bytes);
  CHECK_FALSE(db.binary_resources("h-missing"));

  // put_binary with a known hash keeps the first row.
  BinaryRecord other = bin;
  other.registers = 1;
  other.cubin = "different";
  db.put_binary(other);
  CHECK(db.get_binary(bin.hash)->registers == 168);
  CHECK(db.get_binary(bin.hash)->cubin == bin.cubin);
  CHECK(db.count("binaries") == 2);

  const auto ms = db.measurements(dev.name, "attention", ok.problem_key);
  REQUIRE(ms.size() == 2);
  CHECK(ms[0].id > 0);
  CHECK(ms[1].id > ms[0].id);
  check_same_measurement(ms[0], ok);
  check_same_measurement(ms[1], failed);
  CHECK(ms[1].binary_hash.empty());
  CHECK(ms[1].samples_us.empty());

  // upsert: a known uuid keeps its id and takes the new driver and clocks.
  DeviceRecord dev2 = dev;
  dev2.driver_version = 12050;
  dev2.sm_clock_khz = 1700000;
  CHECK(db.upsert_device(dev2) == dev_id);
  CHECK(db.get_device(dev_id)->driver_version == 12050);
  CHECK(db.get_device(dev_id)->sm_clock_khz == 1700000);
  CHECK(db.count("devices") == 1);
  CHECK(db.upsert_device(device("NVIDIA H100 80GB HBM3", "GPU-2222")) != dev_id);
  CHECK(db.count("devices") == 2);
  CHECK_THROWS_AS(db.count("sqlite_master; DROP TABLE runs"), DbError);
}

TEST_CASE("migrations: fresh, reopen, too new, not a database", "[db]") {
  TempDb tmp;
  {
    TuningDb db(tmp.path);
    CHECK(db.schema_version() == TuningDb::kSchemaVersion);
    CHECK(db.migrations_applied() == TuningDb::kSchemaVersion);
    const long long dev = db.upsert_device(device("G", "GPU-m"));
    const long long run = db.begin_run(run_record("autotune", 5));
    db.add_measurements({meas(run, dev, "k", "v", Status::ok, 10, "", 6)});
  }
  {
    SQLite::Database raw(tmp.path, SQLite::OPEN_READONLY);
    CHECK(raw.execAndGet("PRAGMA user_version").getInt() == TuningDb::kSchemaVersion);
    CHECK(raw.execAndGet("PRAGMA journal_mode").getString() == "delete");  // left so by the closing writer
  }
  {
    TuningDb db(tmp.path);  // migrations already applied: none re-run, nothing lost
    CHECK(db.migrations_applied() == 0);
    CHECK(db.schema_version() == TuningDb::kSchemaVersion);
    CHECK(db.count("measurements") == 1);
    CHECK(db.count("runs") == 1);
    TuningDb ro(tmp.path, true);
    CHECK(ro.count("measurements") == 1);
  }
  {
    SQLite::Database raw(tmp.path, SQLite::OPEN_READWRITE);
    raw.exec("PRAGMA user_version = 99");
  }
  const std::string too_new = error_of([&] { TuningDb db(tmp.path); });
  INFO(too_new);
  CHECK(too_new.find(tmp.path) != std::string::npos);
  CHECK(too_new.find("99") != std::string::npos);
  CHECK(too_new.find("(" + std::to_string(TuningDb::kSchemaVersion) + ")") != std::string::npos);

  TempDb text;
  {
    std::ofstream f(text.path);
    f << "this is a shapes file, not a database\n1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20\n";
  }
  const std::string not_db = error_of([&] { TuningDb db(text.path); });
  INFO(not_db);
  CHECK(not_db.find(text.path) != std::string::npos);
  CHECK(not_db.find("not") != std::string::npos);

  TempDb missing;
  const std::string ro_missing = error_of([&] { TuningDb db(missing.path, true); });
  CHECK(ro_missing.find(missing.path) != std::string::npos);
  CHECK_FALSE(fs::exists(missing.path));  // read-only never creates
}

TEST_CASE("resume lookup, ordering of measurements, all-or-nothing batches", "[db]") {
  TuningDb db(":memory:");
  const long long h100 = db.upsert_device(device("H100", "GPU-a"));
  const long long h100b = db.upsert_device(device("H100", "GPU-b"));
  const long long a100 = db.upsert_device(device("A100", "GPU-c"));
  const long long run = db.begin_run(run_record("autotune", 100));
  db.add_measurements({meas(run, h100, "p1", "v3", Status::ok, 30, "", 130),
                       meas(run, h100, "p1", "v1", Status::compile_failed, 0, "", 110)});
  db.add_measurements({meas(run, h100b, "p1", "v2", Status::wrong_result, 5, "", 120),
                       meas(run, a100, "p1", "v9", Status::ok, 1, "", 90),
                       meas(run, h100, "p2", "v1", Status::ok, 7, "", 105),
                       meas(run, h100, "p1", "v4", Status::ok, 40, "", 110)});

  // What a resumed run skips: every variant any device of the class measured, whatever its status (v1 failed to
  // compile, v2 gave a wrong result on the other H100).
  CHECK(db.measured_variants("H100", "attention", "p1") == std::set<std::string>{"v1", "v2", "v3", "v4"});
  CHECK(db.measured_variants("A100", "attention", "p1") == std::set<std::string>{"v9"});
  CHECK(db.measured_variants("H100", "attention", "p2") == std::set<std::string>{"v1"});
  CHECK(db.measured_variants("H100", "gemm", "p1").empty());
  CHECK(db.measured_variants("H200", "attention", "p1").empty());

  // A device class spans its devices; oldest first, then insertion order.
  const auto ms = db.measurements("H100", "attention", "p1");
  std::vector<std::string> names;
  for (const auto& m : ms) names.push_back(m.variant_name);
  CHECK(names == std::vector<std::string>{"v1", "v4", "v2", "v3"});
  CHECK(db.measurements("A100", "attention", "p1").size() == 1);
  CHECK(db.measurements("A100", "attention", "p2").empty());

  // A batch with one bad row (unknown run: foreign key) leaves nothing behind.
  const long long before = db.count("measurements");
  CHECK_THROWS_AS(db.add_measurements({meas(run, h100, "p9", "a", Status::ok, 1, "", 1),
                                       meas(run + 77, h100, "p9", "b", Status::ok, 1, "", 1)}),
                  DbError);
  CHECK(db.count("measurements") == before);
  CHECK(db.measured_variants("H100", "attention", "p9").empty());
}

TEST_CASE("winners view: fastest ok, never a wrong result, equal medians broken by registers, smem, name", "[db]") {
  TuningDb db(":memory:");
  const long long dev = db.upsert_device(device("H100", "GPU-w"));
  const long long run = db.begin_run(run_record("autotune", 1));
  db.put_binary(binary("r96", 96, 0, 16384));
  db.put_binary(binary("r64", 64, 0, 16384));
  db.put_binary(binary("r64s", 64, 0, 8192));
  db.put_binary(binary("r64s_static", 64, 4096, 8192));  // 12288 total: more than r64s
  db.put_binary(binary("r32", 32, 0, 0));
  auto m = [&](const std::string& key, const std::string& v, Status st, double us, const std::string& h) {
    return meas(run, dev, key, v, st, us, h, 10);
  };
  db.add_measurements({
      // fastest ok wins; a faster wrong_result, and failures, never do
      m("fast", "slow", Status::ok, 200, "r64"),
      m("fast", "quick", Status::ok, 150, "r96"),
      m("fast", "wrong", Status::wrong_result, 50, "r32"),
      m("fast", "dead", Status::launch_failed, 0, "r32"),
      // equal medians: fewer registers wins; 0.1% slower with fewer registers does not (no tie window)
      m("regs", "fastest", Status::ok, 100.0, "r96"),
      m("regs", "lean", Status::ok, 100.0, "r64"),
      m("regs", "leanest", Status::ok, 100.1, "r32"),
      // same median and registers: less shared memory (static + dynamic) wins
      m("smem", "a_big", Status::ok, 100.0, "r64"),
      m("smem", "b_static", Status::ok, 100.0, "r64s_static"),
      m("smem", "c_small", Status::ok, 100.0, "r64s"),
      // same median, registers and smem: the name decides; a missing binary sorts last despite its name
      m("name", "zeta", Status::ok, 100.0, "r64"),
      m("name", "beta", Status::ok, 100.0, "r64"),
      m("name", "alpha", Status::ok, 100.0, "missing-hash"),
      m("name", "aaa", Status::ok, 100.0, ""),
      m("name", "a_slower", Status::ok, 100.01, "r32"),
      // only failures: no winner
      m("none", "x", Status::wrong_result, 1, "r32"),
      m("none", "y", Status::timeout, 0, ""),
  });
  auto w = [&](const std::string& key) {
    const auto r = db.winner("H100", "attention", key);
    return r ? r->variant_name : std::string("<none>");
  };
  CHECK(w("fast") == "quick");
  CHECK(w("regs") == "lean");
  CHECK(w("smem") == "c_small");
  CHECK(w("name") == "beta");
  CHECK(w("none") == "<none>");
  const auto lean = db.winner("H100", "attention", "regs");
  REQUIRE(lean);
  CHECK(lean->registers == 64);
  CHECK(lean->binary_hash == "r64");
  CHECK(lean->median_us == 100.0);
  CHECK(lean->config_json == "{\"variant\":\"lean\"}");
  CHECK(lean->problem_json == "{\"key\":\"regs\"}");
  CHECK(db.count("winners") == 4);

  // Exact duplicates of (median, registers, smem, name): the lower measurement id.
  db.add_measurements({m("dup", "same", Status::ok, 100.0, "r64"), m("dup", "same", Status::ok, 100.0, "r64")});
  const auto dup = db.measurements("H100", "attention", "dup");
  REQUIRE(dup.size() == 2);
  CHECK(db.winner("H100", "attention", "dup")->measurement_id == dup[0].id);
}

TEST_CASE("winners view matches the C++ pick rule on random data", "[db]") {
  // The rule stated in tuning_db.h (and tuner pick_winner), written out in C++ as the reference.
  TuningDb db(":memory:");
  std::mt19937 rng(12345);
  const std::vector<std::string> classes = {"H100", "A100"};
  std::vector<long long> devs = {db.upsert_device(device("H100", "u1")), db.upsert_device(device("H100", "u2")),
                                 db.upsert_device(device("A100", "u3"))};
  const long long run = db.begin_run(run_record("autotune", 1));
  struct Bin {
    int regs, smem;
  };
  std::map<std::string, Bin> bins;
  for (int i = 0; i < 8; ++i) {
    const int regs = 32 * (1 + int(rng() % 4)), stat = 4096 * int(rng() % 2), dyn = 8192 * int(rng() % 3);
    const std::string h = "b" + std::to_string(i);
    db.put_binary(binary(h, regs, stat, dyn));
    bins[h] = {regs, stat + dyn};
  }
  const Status statuses[] = {Status::ok, Status::ok, Status::ok, Status::wrong_result, Status::timeout};
  std::vector<Measurement> all;
  for (int p = 0; p < 40; ++p)
    for (int k = 0; k < 12; ++k) {
      const std::string hash = rng() % 10 == 0 ? "" : "b" + std::to_string(rng() % 9);  // b8 is missing
      const double us = 100.0 * (1.0 + 0.004 * (rng() % 3));                            // 3 values: many ties
      all.push_back(meas(run, devs[rng() % 3], "p" + std::to_string(p), "v" + std::to_string(rng() % 5),
                         statuses[rng() % 5], us, hash, 1));
      all.back().screened = rng() % 3 == 0;  // a third screened: some problems have only screened 'ok' rows
    }
  for (size_t i = 0; i < all.size(); i += 50)
    db.add_measurements(std::vector<Measurement>(all.begin() + i, all.begin() + std::min(all.size(), i + 50)));

  int winners_seen = 0;
  for (const std::string& cls : classes)
    for (int p = 0; p < 40; ++p) {
      const std::string key = "p" + std::to_string(p);
      const auto rows = db.measurements(cls, "attention", key);
      // Screened rows only when every ok row is screened.
      bool decided = false;
      for (const auto& r : rows) decided = decided || (r.status == Status::ok && !r.screened);
      auto eligible = [&](const Measurement& r) { return r.status == Status::ok && !(decided && r.screened); };
      std::optional<long long> expect;
      std::tuple<double, int, int, int, int, std::string, long long> expect_key;
      for (const auto& r : rows) {
        if (!eligible(r)) continue;
        const auto it = bins.find(r.binary_hash);
        const bool missing = it == bins.end();
        const auto k = std::make_tuple(r.median_us, missing ? 1 : 0, missing ? 0 : it->second.regs, missing ? 1 : 0,
                                       missing ? 0 : it->second.smem, r.variant_name, r.id);
        if (!expect || k < expect_key) {
          expect = r.id;
          expect_key = k;
        }
      }
      const auto got = db.winner(cls, "attention", key);
      INFO(cls << " " << key);
      REQUIRE(got.has_value() == expect.has_value());
      if (got) {
        CHECK(got->measurement_id == *expect);
        ++winners_seen;
      }
    }
  CHECK(winners_seen > 40);
  CHECK(db.count("winners") == winners_seen);
}

TEST_CASE("winners view: a screened row loses to the final round's rows however fast, wins when all are screened",
          "[db]") {
  TuningDb db(":memory:");
  const long long dev = db.upsert_device(device("H200", "u1"));
  const long long run = db.begin_run(run_record("autotune", 1));
  db.put_binary(binary("r64", 64, 0, 0));
  db.put_binary(binary("r32", 32, 0, 0));
  auto screened = [&](Measurement m) {
    m.screened = true;
    return m;
  };
  db.add_measurements({
      // p: the first round's non-finalist ran at a higher clock: 90 us, faster than the finalists' final rows.
      screened(meas(run, dev, "p", "non_finalist", Status::ok, 90, "r32", 1)),
      meas(run, dev, "p", "finalist_a", Status::ok, 100, "r64", 1),
      meas(run, dev, "p", "finalist_b", Status::ok, 103, "r64", 1),
      // q: the finalist's median and fewer registers: still not eligible.
      screened(meas(run, dev, "q", "non_finalist", Status::ok, 100, "r32", 1)),
      meas(run, dev, "q", "finalist", Status::ok, 100, "r64", 1),
      // r: only screened ok rows (a final round that failed): the fastest of them.
      screened(meas(run, dev, "r", "a", Status::ok, 120, "r64", 1)),
      screened(meas(run, dev, "r", "b", Status::ok, 110, "r64", 1)),
      meas(run, dev, "r", "c", Status::wrong_result, 50, "r64", 1),
  });
  CHECK(db.winner("H200", "attention", "p")->variant_name == "finalist_a");
  CHECK(db.winner("H200", "attention", "q")->variant_name == "finalist");
  CHECK(db.winner("H200", "attention", "r")->variant_name == "b");
  const auto rows = db.measurements("H200", "attention", "p");
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].screened);  // read back as written
  CHECK_FALSE(rows[1].screened);
}

TEST_CASE("winners are per device class, filterable, and deterministic across reopen", "[db]") {
  TempDb tmp;
  std::vector<Winner> before;
  {
    TuningDb db(tmp.path);
    const long long h1 = db.upsert_device(device("H100", "GPU-h1"));
    const long long h2 = db.upsert_device(device("H100", "GPU-h2"));
    const long long a = db.upsert_device(device("A100", "GPU-a1"));
    const long long run = db.begin_run(run_record("autotune", 1));
    db.put_binary(binary("r64", 64, 0, 0));
    db.put_binary(binary("r128", 128, 0, 0));
    db.add_measurements({
        meas(run, h1, "p", "h_slow", Status::ok, 50, "r64", 1),
        meas(run, h2, "p", "h_fast", Status::ok, 40, "r128", 1),
        meas(run, a, "p", "a_fast", Status::ok, 90, "r128", 1),
        meas(run, a, "p", "a_slow", Status::ok, 95, "r64", 1),
        meas(run, a, "q", "a_q", Status::ok, 10, "r64", 1),
        // a tie (equal medians): the decision must not depend on row order or reopen
        meas(run, h1, "t", "t_b", Status::ok, 20.0, "r64", 1),
        meas(run, h2, "t", "t_a", Status::ok, 20.0, "r64", 1),
    });
    before = db.winners();
  }
  TuningDb db(tmp.path);
  const auto all = db.winners();
  REQUIRE(all.size() == 4);
  CHECK(all[0].device_name == "A100");
  CHECK(all[0].problem_key == "p");
  CHECK(all[0].variant_name == "a_fast");  // per class: the H100's faster rows do not count
  CHECK(all[1].variant_name == "a_q");
  CHECK(all[2].device_name == "H100");
  CHECK(all[2].variant_name == "h_fast");  // the class pools its devices
  CHECK(all[3].variant_name == "t_a");
  REQUIRE(before.size() == all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    CHECK(before[i].measurement_id == all[i].measurement_id);
    CHECK(before[i].variant_name == all[i].variant_name);
  }
  CHECK(db.winners("H100").size() == 2);
  CHECK(db.winners("A100", "attention").size() == 2);
  CHECK(db.winners("", "gemm").empty());
  CHECK(db.winners("V100").empty());
  CHECK_FALSE(db.winner("H100", "attention", "q"));
}

namespace {
// One writer: its own connection and run, `n` measurements in batches of `batch`.
void write_many(const std::string& path, long long device_id, const std::string& who, int n, int batch) {
  TuningDb db(path);
  const long long run = db.begin_run(run_record("autotune --worker " + who, 1000, who));
  for (int i = 0; i < n; i += batch) {
    std::vector<Measurement> ms;
    for (int j = i; j < i + batch && j < n; ++j) {
      Measurement m = meas(run, device_id, "p", who + "_" + std::to_string(j), Status::ok, 10 + j, "", 2000 + j);
      m.samples_us = {double(j), double(j) + 0.5, double(j) * 3.25};
      ms.push_back(m);
    }
    db.add_measurements(ms);
  }
  db.end_run(run, 3000);
}

void check_written(const std::string& path, const std::vector<std::string>& writers, int n) {
  TuningDb db(path, true);
  CHECK(db.count("measurements") == (long long)writers.size() * n);
  CHECK(db.count("runs") == (long long)writers.size());
  const auto ms = db.measurements("H100", "attention", "p");
  REQUIRE(ms.size() == writers.size() * n);
  std::set<std::string> names;
  for (const auto& m : ms) {
    names.insert(m.variant_name);
    const int j = std::stoi(m.variant_name.substr(m.variant_name.find('_') + 1));
    CHECK(m.median_us == 10 + j);
    CHECK(m.samples_us == std::vector<double>{double(j), double(j) + 0.5, double(j) * 3.25});
  }
  CHECK(names.size() == writers.size() * n);
}
}  // namespace

TEST_CASE("two processes writing one file at once both finish with every row", "[db]") {
  TempDb tmp;
  long long dev = 0;
  {
    TuningDb db(tmp.path);
    dev = db.upsert_device(device("H100", "GPU-c"));
  }  // closed: no connection crosses fork()
  constexpr int kRows = 300;
  int go[2];
  REQUIRE(pipe(go) == 0);
  std::vector<pid_t> kids;
  for (const std::string who : {"A", "B"}) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      close(go[1]);
      char c;
      if (read(go[0], &c, 1) != 1) _exit(3);  // start together
      try {
        write_many(tmp.path, dev, who, kRows, 10);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "writer %s: %s\n", who.c_str(), e.what());
        _exit(1);
      }
      _exit(0);
    }
    kids.push_back(pid);
  }
  close(go[0]);
  REQUIRE(write(go[1], "gg", 2) == 2);
  close(go[1]);
  for (pid_t pid : kids) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  check_written(tmp.path, {"A", "B"}, kRows);
}

TEST_CASE("two threads with their own connections write one file at once", "[db]") {
  TempDb tmp;
  long long dev = 0;
  {
    TuningDb db(tmp.path);
    dev = db.upsert_device(device("H100", "GPU-t"));
  }
  std::string err[2];
  std::thread t[2];
  for (int i = 0; i < 2; ++i)
    t[i] = std::thread([&, i] {
      try {
        write_many(tmp.path, dev, i == 0 ? "A" : "B", 300, 10);
      } catch (const std::exception& e) {
        err[i] = e.what();
      }
    });
  for (auto& th : t) th.join();
  CHECK(err[0] == "");
  CHECK(err[1] == "");
  check_written(tmp.path, {"A", "B"}, 300);
}

TEST_CASE("merge: two machines into a third, provenance kept, idempotent", "[db]") {
  TempDb a_file, b_file, c_file, copy_file;
  // Machine A: an H100, one run.
  {
    TuningDb a(a_file.path);
    const long long dev = a.upsert_device(device("H100", "GPU-A"));
    const long long run = a.begin_run(run_record("autotune --machine A", 100, "host-a"));
    a.put_binary(binary("shared", 64, 0, 0));
    a.put_binary(binary("only-a", 96, 0, 0));
    a.add_measurements({meas(run, dev, "p1", "va1", Status::ok, 50, "shared", 101),
                        meas(run, dev, "p1", "va2", Status::ok, 40, "only-a", 102),
                        meas(run, dev, "p2", "va3", Status::wrong_result, 1, "only-a", 103)});
    a.end_run(run, 200);
  }
  // Machine B: an A100, two runs; ids overlap with A's on purpose.
  {
    TuningDb b(b_file.path);
    const long long dev = b.upsert_device(device("A100", "GPU-B"));
    const long long r1 = b.begin_run(run_record("autotune --machine B", 100, "host-b"));
    const long long r2 = b.begin_run(run_record("autotune --machine B --resume", 300, "host-b"));
    b.put_binary(binary("shared", 64, 0, 0));
    b.put_binary(binary("only-b", 80, 0, 0));
    b.add_measurements({meas(r1, dev, "p1", "vb1", Status::ok, 70, "shared", 101),
                        meas(r2, dev, "p1", "vb2", Status::ok, 60, "only-b", 301),
                        meas(r2, dev, "p3", "vb3", Status::ok, 9, "only-b", 302)});
  }
  std::vector<Winner> wa, wb;
  {
    TuningDb a(a_file.path, true), b(b_file.path, true);
    wa = a.winners();
    wb = b.winners();
  }
  REQUIRE(wa.size() == 1);
  REQUIRE(wb.size() == 2);

  TuningDb c(c_file.path);
  c.merge_from(a_file.path);
  c.merge_from(b_file.path);
  CHECK(c.count("devices") == 2);
  CHECK(c.count("runs") == 3);
  CHECK(c.count("binaries") == 3);  // "shared" once
  CHECK(c.count("measurements") == 6);

  // Provenance: every measurement still points at its own run and device.
  const std::map<std::string, std::pair<std::string, std::string>> origin = {
      {"va1", {"autotune --machine A", "GPU-A"}},
      {"va2", {"autotune --machine A", "GPU-A"}},
      {"vb1", {"autotune --machine B", "GPU-B"}},
      {"vb2", {"autotune --machine B --resume", "GPU-B"}},
      {"vb3", {"autotune --machine B --resume", "GPU-B"}}};
  int checked = 0;
  for (const auto& [cls, key] :
       std::vector<std::pair<std::string, std::string>>{{"H100", "p1"}, {"A100", "p1"}, {"A100", "p3"}})
    for (const auto& m : c.measurements(cls, "attention", key)) {
      const auto it = origin.find(m.variant_name);
      REQUIRE(it != origin.end());
      CHECK(c.get_run(m.run_id)->argv == it->second.first);
      CHECK(c.get_device(m.device_id)->uuid == it->second.second);
      CHECK(m.samples_us.size() == 3);
      ++checked;
    }
  CHECK(checked == 5);
  CHECK(c.get_run(c.measurements("H100", "attention", "p1")[0].run_id)->ended_at == 200);
  CHECK(c.get_binary("only-b")->registers == 80);

  // Winners of the merge = the union of each machine's, per device class.
  std::set<std::tuple<std::string, std::string, std::string, double>> expect, got;
  for (const auto* ws : {&wa, &wb})
    for (const auto& w : *ws) expect.insert({w.device_name, w.problem_key, w.variant_name, w.median_us});
  for (const auto& w : c.winners()) got.insert({w.device_name, w.problem_key, w.variant_name, w.median_us});
  CHECK(got == expect);

  // Again: nothing added. Also merging a file into itself.
  c.merge_from(a_file.path);
  c.merge_from(b_file.path);
  c.merge_from(c_file.path);
  CHECK(c.count("devices") == 2);
  CHECK(c.count("runs") == 3);
  CHECK(c.count("binaries") == 3);
  CHECK(c.count("measurements") == 6);

  // A copy of A extended under the same run (a resumed run on machine A): the run is recognised by
  // (argv, started_at, host), not by id, so only the new rows arrive.
  fs::copy_file(a_file.path, copy_file.path);
  {
    TuningDb cp(copy_file.path);
    const long long run = cp.begin_run(run_record("unrelated", 1, "x"));  // shifts nothing in C
    (void)run;
    cp.add_measurements({meas(1, 1, "p1", "va4", Status::ok, 30, "only-a", 150)});
  }
  c.merge_from(copy_file.path);
  CHECK(c.count("runs") == 4);  // only "unrelated" is new
  CHECK(c.count("measurements") == 7);
  CHECK(c.winner("H100", "attention", "p1")->variant_name == "va4");
  const auto p1 = c.measurements("H100", "attention", "p1");
  REQUIRE(p1.size() == 3);
  CHECK(p1.back().variant_name == "va4");
  CHECK(p1.back().run_id == p1.front().run_id);  // joined the existing run
  CHECK(c.get_run(p1.back().run_id)->argv == "autotune --machine A");

  // Bad sources are refused, naming them; nothing is created.
  TempDb missing;
  const std::string e1 = error_of([&] { c.merge_from(missing.path); });
  CHECK(e1.find(missing.path) != std::string::npos);
  CHECK_FALSE(fs::exists(missing.path));
  TempDb text;
  {
    std::ofstream f(text.path);
    f << "not a database at all, just some text that is long enough to look like a header........\n";
  }
  const std::string e2 = error_of([&] { c.merge_from(text.path); });
  INFO(e2);
  CHECK(e2.find(text.path) != std::string::npos);
  CHECK(c.count("measurements") == 7);
}

TEST_CASE("the plain sqlite3 shell reads the database", "[db]") {
  if (std::system("command -v sqlite3 >/dev/null 2>&1") != 0)
    FAIL("the sqlite3 shell is not installed: scripts/setup.sh must install the Debian package sqlite3");
  TempDb tmp;
  {
    TuningDb db(tmp.path);
    const long long dev = db.upsert_device(device("H100", "GPU-s"));
    const long long run = db.begin_run(run_record("autotune", 1));
    db.put_binary(binary("r64", 64, 0, 0));
    db.add_measurements(
        {meas(run, dev, "p1", "a", Status::ok, 5, "r64", 1), meas(run, dev, "p2", "b", Status::ok, 6, "r64", 1),
         meas(run, dev, "p3", "c", Status::ok, 7, "", 1), meas(run, dev, "p4", "d", Status::wrong_result, 1, "", 1)});
    CHECK(db.count("winners") == 3);
  }
  auto shell = [&](const std::string& sql) {
    const auto [st, out] = kt_test::run_command("sqlite3 '" + tmp.path + "' \"" + sql + "\"");
    CHECK(st == 0);
    return out;
  };
  CHECK(shell("SELECT count(*) FROM winners") == "3\n");
  CHECK(shell("SELECT variant_name FROM winners WHERE problem_key='p2'") == "b\n");
  CHECK(shell("SELECT length(cubin) FROM binaries") == std::to_string(binary("r64", 64, 0, 0).cubin.size()) + "\n");
}

TEST_CASE("devices() lists every device row by name, with its compute capability", "[db]") {
  TuningDb db(":memory:");
  DeviceRecord h = device("NVIDIA H200", "GPU-2");
  h.cc_major = 9;
  h.cc_minor = 0;
  DeviceRecord a = device("NVIDIA A100-SXM4-80GB", "GPU-3");
  a.cc_major = 8;
  a.cc_minor = 0;
  db.upsert_device(h);
  db.upsert_device(a);
  db.upsert_device(h);  // the same uuid again: still one row
  const auto ds = db.devices();
  REQUIRE(ds.size() == 2);
  CHECK(ds[0].name == "NVIDIA A100-SXM4-80GB");
  CHECK(ds[0].cc_major == 8);
  CHECK(ds[1].name == "NVIDIA H200");
  CHECK(ds[1].uuid == "GPU-2");
  CHECK(ds[1].cc_major == 9);
  CHECK(ds[1].cc_minor == 0);
  CHECK(TuningDb(":memory:").devices().empty());
}
