// Opening tuning databases that are bad, foreign or out of reach: every refusal names the file and what is
// wrong; a finished database is left in rollback-journal mode and opens read-only from a folder that
// cannot be written, without leaving -wal / -shm files; merges are all or nothing and count what they
// inserted; the runtime reports a damaged database before it looks for a GPU; the `autotune show` and
// `merge` commands on the same files. CPU only.
#include <catch2/catch.hpp>

#include <SQLiteCpp/SQLiteCpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../support.h"
#include "cache/tuning_db.h"
#include "runtime/runtime.h"
#include "tests/support.h"
#include "unprivileged.h"

namespace fs = std::filesystem;
using namespace kt::db;

namespace {

using kt_test::run_autotune;
using kt_test::TempDir;

// A fresh folder under the system temp dir (mode 0755, so the unprivileged child can read it), removed
// with its contents at scope exit.

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DbError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& path) { return fs::exists(path); }

std::string bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Header bytes 18 and 19 (file format write / read version): 1 rollback journal, 2 WAL.
std::pair<int, int> format_bytes(const std::string& path) {
  const std::string b = bytes_of(path);
  REQUIRE(b.size() >= 100);
  return {static_cast<unsigned char>(b[18]), static_cast<unsigned char>(b[19])};
}

// A database with one device, one run, one binary and `rows` ok measurements (distinct problems).
void populate(const std::string& path, int rows, const std::string& uuid = "GPU-1", long long started = 100) {
  TuningDb db(path);
  DeviceRecord d;
  d.name = "H100";
  d.uuid = uuid;
  const long long dev = db.upsert_device(d);
  RunRecord r;
  r.argv = "autotune test";
  r.host = "node";
  r.started_at = started;
  const long long run = db.begin_run(r);
  BinaryRecord b;
  b.hash = "bin-" + uuid;
  b.family = "attention_prefill";
  b.variant_name = "v";
  b.cubin = std::string(5000, 'x');  // several pages: the binaries table is not a single page
  b.registers = 64;
  db.put_binary(b);
  std::vector<Measurement> ms;
  for (int i = 0; i < rows; ++i) {
    Measurement m;
    m.run_id = run;
    m.device_id = dev;
    m.family = "attention_prefill";
    m.problem_key = "p" + std::to_string(i);
    m.variant_name = "v";
    m.binary_hash = b.hash;
    m.median_us = 10 + i;
    m.samples_us = {double(i), double(i) + 1};
    m.measured_at = 1000 + i;
    ms.push_back(m);
  }
  db.add_measurements(ms);
  db.end_run(run, started + 1);
}

void raw_exec(const std::string& path, const std::string& sql) {
  SQLite::Database raw(path, SQLite::OPEN_READWRITE);
  raw.exec(sql);
}

}  // namespace

TEST_CASE("a closed database is left in rollback-journal mode; read-only opens create no -wal / -shm", "[db]") {
  TempDir dir;
  const std::string db = dir.at("k.db");
  {
    TuningDb w(db);
    populate(db, 3);                                  // a second writer connection while the first is open
    CHECK(format_bytes(db) == std::make_pair(2, 2));  // WAL while writers are open
    CHECK(has(db + "-wal"));
  }
  CHECK(format_bytes(db) == std::make_pair(1, 1));
  CHECK_FALSE(has(db + "-wal"));
  CHECK_FALSE(has(db + "-shm"));
  {
    SQLite::Database raw(db, SQLite::OPEN_READONLY);
    CHECK(raw.execAndGet("PRAGMA journal_mode").getString() == "delete");
  }
  {
    TuningDb ro(db, true);
    CHECK(ro.count("measurements") == 3);
    CHECK(ro.winners().size() == 3);
    CHECK_FALSE(has(db + "-wal"));
    CHECK_FALSE(has(db + "-shm"));
  }
  CHECK_FALSE(has(db + "-wal"));
  CHECK_FALSE(has(db + "-shm"));
  CHECK_FALSE(has(db + "-journal"));

  // Two writers: the first to close cannot switch (the other is open), the last one does.
  {
    auto a = std::make_unique<TuningDb>(db);
    auto b = std::make_unique<TuningDb>(db);
    CHECK(format_bytes(db) == std::make_pair(2, 2));
    a.reset();
    CHECK(format_bytes(db) == std::make_pair(2, 2));
    CHECK(b->count("measurements") == 3);
    b.reset();
    CHECK(format_bytes(db) == std::make_pair(1, 1));
  }
}

TEST_CASE("a database in a folder that cannot be written opens read-only, WAL or not", "[db]") {
  TempDir dir;
  const fs::path ro = dir.path / "ro";
  fs::create_directories(ro);
  const std::string finished = (ro / "finished.db").string();  // as autotune leaves it: rollback journal
  const std::string legacy = (ro / "legacy.db").string();      // WAL mode, as older builds left it
  populate(finished, 4);
  populate(legacy, 5);
  raw_exec(legacy, "PRAGMA journal_mode = WAL");
  REQUIRE(format_bytes(legacy) == std::make_pair(2, 2));
  REQUIRE_FALSE(has(legacy + "-wal"));
  fs::permissions(ro, fs::perms(0555));
  if (const std::string why = kt_test::unprivileged_can_reach(ro.string()); !why.empty()) {
    WARN("skipped: " << why << " (set TMPDIR to a world-searchable folder)");
    return;
  }

  const std::string result = kt_test::run_unprivileged([&]() -> std::string {
    if (access(ro.c_str(), W_OK) == 0) return "the folder is writable for the checking user";
    for (const auto& [path, rows] : {std::make_pair(finished, 4), std::make_pair(legacy, 5)}) {
      TuningDb db(path, true);
      if (db.count("measurements") != rows) return path + ": wrong row count";
      if (db.winners().size() != size_t(rows)) return path + ": wrong winner count";
      if (!db.get_binary("bin-GPU-1")) return path + ": binary missing";
    }
    // A read-write open says why it cannot write, instead of "unable to open database file".
    const std::string rw = error_of([&] { TuningDb db(finished); });
    if (rw.find(finished) == std::string::npos || rw.find("not writable") == std::string::npos)
      return "read-write open: '" + rw + "'";
    const std::string create = error_of([&] { TuningDb db((ro / "new.db").string()); });
    if (create.find("folder '" + ro.string() + "' is not writable") == std::string::npos)
      return "create: '" + create + "'";
    return "";
  });
  CHECK(result == "");
  for (const char* suffix : {"-wal", "-shm", "-journal"}) {
    CHECK_FALSE(has(finished + suffix));
    CHECK_FALSE(has(legacy + suffix));
  }
  CHECK_FALSE(has((ro / "new.db").string()));
}

TEST_CASE("bad database files are refused at open, naming the file and what is wrong", "[db]") {
  TempDir dir;
  const std::string good = dir.at("good.db");
  populate(good, 40);
  const std::string good_bytes = bytes_of(good);

  auto make = [&](const std::string& name, const std::string& bytes) {
    const std::string p = dir.at(name);
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  };
  auto copy = [&](const std::string& name) {
    const std::string p = dir.at(name);
    fs::copy_file(good, p);
    return p;
  };
  // Each case: the file, whether to open it read-only, and a phrase the error must contain.
  struct Case {
    std::string path;
    bool read_only;
    std::string phrase;
  };
  std::vector<Case> cases;
  const std::string zero = make("zero.db", "");
  cases.push_back({zero, true, "empty (0 bytes)"});
  cases.push_back({make("t50.db", good_bytes.substr(0, 50)), true, "shorter than the 100-byte SQLite header"});
  cases.push_back({make("t50rw.db", good_bytes.substr(0, 50)), false, "shorter than the 100-byte SQLite header"});
  cases.push_back({make("t1000.db", good_bytes.substr(0, 1000)), true, "not a whole number of"});
  cases.push_back({make("tpage.db", good_bytes.substr(0, 4096)), false, "its header says"});
  cases.push_back({make("text.db", std::string(300, 'x')), true, "not a SQLite database"});
  fs::create_directories(dir.path / "adir.db");
  cases.push_back({dir.at("adir.db"), true, "is a directory"});
  cases.push_back({dir.at("adir.db"), false, "is a directory"});
  cases.push_back({dir.at("missing.db"), true, "no such file"});
  cases.push_back({dir.at("no_folder/x.db"), false, "folder '" + dir.at("no_folder") + "' does not exist"});

  const std::string v0 = copy("v0.db");
  raw_exec(v0, "PRAGMA user_version = 0");
  cases.push_back({v0, true, "no kerntune schema version"});
  cases.push_back({v0, false, "no kerntune schema version"});  // never "table devices already exists"
  const std::string vneg = copy("vneg.db");
  raw_exec(vneg, "PRAGMA user_version = -1");
  cases.push_back({vneg, true, "schema version -1 is not one kerntune writes"});
  cases.push_back({vneg, false, "schema version -1 is not one kerntune writes"});
  const std::string empty_sqlite = dir.at("empty_sqlite.db");
  {
    SQLite::Database raw(empty_sqlite, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    raw.exec("CREATE TABLE t(x); DROP TABLE t");  // a valid SQLite file with no tables and user_version 0
  }
  cases.push_back({empty_sqlite, true, "no kerntune schema and no tuning results"});
  const std::string no_view = copy("no_view.db");
  raw_exec(no_view, "DROP VIEW winners");
  cases.push_back({no_view, true, "no 'winners' view"});
  cases.push_back({no_view, false, "no 'winners' view"});
  const std::string renamed = copy("renamed.db");
  raw_exec(renamed, "ALTER TABLE measurements RENAME TO m_old");
  cases.push_back({renamed, true, "no 'measurements' table"});
  // The measurements table's root page overwritten: what the winners view reads first.
  const std::string damaged = copy("damaged.db");
  {
    long long root = 0, page = 0;
    {
      SQLite::Database raw(damaged, SQLite::OPEN_READONLY);
      root = raw.execAndGet("SELECT rootpage FROM sqlite_master WHERE name = 'measurements'").getInt64();
      page = raw.execAndGet("PRAGMA page_size").getInt64();
    }
    std::fstream f(damaged, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp((root - 1) * page);
    const std::string junk(static_cast<size_t>(page), '\xa5');
    f.write(junk.data(), page);
  }
  cases.push_back({damaged, true, "table 'measurements' is damaged"});
  cases.push_back({damaged, false, "table 'measurements' is damaged"});
  // A later page damaged, the root intact: the right-most child pointer of the measurements table's
  // interior root page points past the end of the file, so the first row still reads.
  const std::string deep = dir.at("deep_damaged.db");
  populate(deep, 400);
  {
    long long root = 0, page = 0;
    {
      SQLite::Database raw(deep, SQLite::OPEN_READONLY);
      root = raw.execAndGet("SELECT rootpage FROM sqlite_master WHERE name = 'measurements'").getInt64();
      page = raw.execAndGet("PRAGMA page_size").getInt64();
      raw.execAndGet("SELECT 1 FROM measurements NOT INDEXED LIMIT 1");
    }
    std::fstream f(deep, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg((root - 1) * page);
    char type = 0;
    f.read(&type, 1);
    REQUIRE(type == 0x05);  // an interior table b-tree page: 400 rows span several pages
    f.seekp((root - 1) * page + 8);
    const char past_end[4] = {'\x7f', '\x00', '\x00', '\x00'};
    f.write(past_end, 4);
  }
  {
    SQLite::Database raw(deep, SQLite::OPEN_READONLY);
    CHECK_NOTHROW(raw.execAndGet("SELECT 1 FROM measurements NOT INDEXED LIMIT 1"));
  }
  cases.push_back({deep, true, "table 'measurements' is damaged"});
  cases.push_back({deep, false, "table 'measurements' is damaged"});

  for (const Case& c : cases) {
    const std::string before = fs::is_regular_file(c.path) ? bytes_of(c.path) : "";
    const std::string e = error_of([&] { TuningDb db(c.path, c.read_only); });
    INFO(c.path << (c.read_only ? " (read-only)" : " (read-write)") << ": " << e);
    CHECK(e.find("tuning db '" + c.path + "'") == 0);
    CHECK(e.find(c.phrase) != std::string::npos);
    CHECK(e.find("open it read-write once") == std::string::npos);
    CHECK(e.find("unable to open database file") == std::string::npos);
    CHECK(e.find("disk I/O error") == std::string::npos);
    if (fs::is_regular_file(c.path)) CHECK(bytes_of(c.path) == before);  // a refused file is left as it was
    CHECK_FALSE(has(c.path + "-wal"));
    CHECK_FALSE(has(c.path + "-shm"));
  }
  CHECK_FALSE(fs::exists(dir.at("missing.db")));
  CHECK_FALSE(fs::exists(dir.at("no_folder")));

  // A 0-byte file opened read-write becomes a new database (what `touch x.db; autotune --db x.db` expects).
  {
    TuningDb db(zero);
    CHECK(db.migrations_applied() == TuningDb::kSchemaVersion);
  }
  CHECK(TuningDb(zero, true).count("measurements") == 0);
  // The good file was never touched and still opens.
  CHECK(TuningDb(good, true).count("measurements") == 40);
}

TEST_CASE("the runtime reports a damaged database as a DbError before looking for a GPU", "[db][runtime]") {
  TempDir dir;
  const std::string no_view = dir.at("no_view.db");
  populate(no_view, 2);
  raw_exec(no_view, "DROP VIEW winners");
  const std::string zero = dir.at("zero.db");
  std::ofstream(zero).close();
  for (const std::string& path : {no_view, zero}) {
    std::string what;
    try {
      kt::Runtime rt(path);
    } catch (const DbError& e) {
      what = e.what();
    } catch (const std::exception& e) {
      what = std::string("not a DbError: ") + e.what();
    }
    INFO(what);
    CHECK(what.find("tuning db '" + path + "'") == 0);
  }
}

TEST_CASE("merge: sources are checked first; several inputs are all or nothing; counts are rows inserted", "[db]") {
  TempDir dir;
  const std::string a = dir.at("a.db"), b = dir.at("b.db"), out = dir.at("out.db");
  populate(a, 10, "GPU-a", 100);
  populate(b, 7, "GPU-b", 200);

  // A source with a row that the schema forbids (status outside the CHECK list): it opens, but copying fails
  // half-way through the inputs.
  const std::string bad = dir.at("bad.db");
  populate(bad, 3, "GPU-bad", 300);
  raw_exec(bad, "PRAGMA ignore_check_constraints = 1; UPDATE measurements SET status = 'bogus' WHERE id = 2");

  populate(out, 1, "GPU-out", 50);
  const long long before = TuningDb(out, true).count("measurements");
  {
    TuningDb o(out);
    const std::string e = error_of([&] { o.merge_from(std::vector<std::string>{a, b, bad}); });
    INFO(e);
    CHECK(e.find("tuning db '" + out + "'") == 0);
    CHECK(e.find(bad) != std::string::npos);
    CHECK(o.count("measurements") == before);  // a and b were not committed either
    CHECK(o.count("devices") == 1);
  }
  for (const auto& entry : fs::directory_iterator(dir.path))
    CHECK(entry.path().filename().string().find(".merge-") == std::string::npos);  // staging file removed

  {
    TuningDb o(out);
    const MergeCounts c = o.merge_from(std::vector<std::string>{a, b});
    CHECK(c.measurements == 17);
    CHECK(c.devices == 2);
    CHECK(c.runs == 2);
    CHECK(c.binaries == 2);
    CHECK(o.count("measurements") == before + 17);
    const MergeCounts again = o.merge_from(std::vector<std::string>{a, b, out});
    CHECK(again.measurements == 0);
    CHECK(again.devices == 0);
    CHECK(again.runs == 0);
    CHECK(again.binaries == 0);
  }

  // A newer source is refused as newer (never "open it with this build first").
  const std::string newer = dir.at("newer.db");
  populate(newer, 1, "GPU-n", 400);
  raw_exec(newer, "PRAGMA user_version = " + std::to_string(TuningDb::kSchemaVersion + 1));
  const std::string e = error_of([&] { TuningDb(out).merge_from(newer); });
  INFO(e);
  CHECK(e.find(newer) != std::string::npos);
  CHECK(e.find("newer than this build") != std::string::npos);
  CHECK(e.find("open it with this build") == std::string::npos);

  // Concurrent merges of one source: each reports the rows it inserted, so the counts add up to the rows.
  const std::string conc = dir.at("conc.db");
  { TuningDb init(conc); }
  std::vector<long long> added(4, -1);
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      try {
        TuningDb o(conc);
        added[t] = o.merge_from(a).measurements;
      } catch (const std::exception& ex) {
        errors[t] = ex.what();
      }
    });
  for (auto& th : threads) th.join();
  long long sum = 0;
  for (int t = 0; t < 4; ++t) {
    CHECK(errors[t] == "");
    sum += added[t];
  }
  CHECK(sum == 10);
  CHECK(TuningDb(conc, true).count("measurements") == 10);
}

TEST_CASE("autotune show / merge on bad files: clear errors, exit 2, no output file created", "[db][cli]") {
  TempDir dir;
  const std::string good = dir.at("good.db"), zero = dir.at("zero.db"), out = dir.at("out.db");
  populate(good, 3);
  std::ofstream(zero).close();

  auto [rc, text] = run_autotune("show --db " + zero);
  CHECK(rc == 2);
  CHECK_THAT(text, Catch::Contains(zero) && Catch::Contains("empty (0 bytes)"));

  std::tie(rc, text) = run_autotune("merge " + out + " " + good + " " + dir.at("missing.db"));
  CHECK(rc == 2);
  CHECK_THAT(
      text, Catch::Contains(dir.at("missing.db")) && Catch::Contains("no such file") && Catch::Contains("not created"));
  CHECK_FALSE(has(out));

  std::tie(rc, text) = run_autotune("merge " + out + " " + good + " " + zero);
  CHECK(rc == 2);
  CHECK_FALSE(has(out));

  std::tie(rc, text) = run_autotune("merge " + out + " " + good + " " + good);
  CHECK(rc == 0);
  CHECK_THAT(text, Catch::Contains("+3 measurements"));
  CHECK(format_bytes(out) == std::make_pair(1, 1));  // left in rollback-journal mode
  CHECK_FALSE(has(out + "-wal"));

  std::tie(rc, text) = run_autotune("show --db " + out + " --family no_such_family");
  CHECK(rc == 2);
  CHECK_THAT(text, Catch::Contains("unknown family 'no_such_family'"));

  std::tie(rc, text) = run_autotune("show --db " + out);
  CHECK(rc == 0);
  CHECK_THAT(text, Catch::Contains("3 winners (") && Catch::Contains("); 3 measurements"));
  CHECK_FALSE(has(out + "-wal"));
  CHECK_FALSE(has(out + "-shm"));
}
