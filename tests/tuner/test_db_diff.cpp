// autotune diff (tuner/db_diff.h): two tuning databases compared problem by problem, the library call and the CLI's
// exit codes (0 none slower, 1 a winner slower than the threshold or, with --require-all, missing, 2 bad input).
#include <catch2/catch.hpp>

#include <string>
#include <utility>

#include "cache/tuning_db.h"
#include "tests/support.h"
#include "tests/winner_db.h"
#include "tuner/db_diff.h"

using namespace kt;

namespace {

/// A database holding, for device "GPU X", one ok measurement per (family, problem key, variant, median us), each
/// with a placeholder binary (never loaded).
void make_db(const std::string& path,
             const std::vector<std::tuple<std::string, std::string, std::string, double>>& rows) {
  db::DeviceRecord d;
  d.name = "GPU X";
  d.uuid = "GPU-x";
  d.cc_major = 9;
  d.sm_count = 132;
  kt_test::WinnerDb wdb(path, d, "test_db_diff");
  for (const auto& [family, key, variant, us] : rows) {
    db::BinaryRecord b;
    b.hash = "hash-" + variant;
    b.family = family;
    b.variant_name = variant;
    b.name_expression = "expr-" + variant;
    b.lowered_name = "lowered";
    b.arch = "sm_90a";
    b.cubin = "not a cubin";
    wdb.put_binary(b);
    wdb.add(family, key, "{}", variant, "{}", b.hash, us);
  }
  wdb.finish("GPU X", std::get<0>(rows.front()));
}

}  // namespace

TEST_CASE("autotune diff: per-problem winners, ratios, the threshold, missing problems and exit codes", "[tuner]") {
  kt_test::TempDir tmp("kt_db_diff");
  const std::string old_db = (tmp.path / "old.db").string(), new_db = (tmp.path / "new.db").string();
  // a: 3% slower; b: 25% slower (and another winner); c: only in old; d: only in new; e: faster (decode family).
  make_db(old_db, {{"qkv_proj", "a", "va", 10.0},
                   {"qkv_proj", "b", "vb", 20.0},
                   {"qkv_proj", "b", "vb2", 22.0},
                   {"qkv_proj", "c", "vc", 5.0},
                   {"attention_decode", "e", "ve", 40.0}});
  make_db(new_db, {{"qkv_proj", "a", "va", 10.3},
                   {"qkv_proj", "b", "vb", 26.0},
                   {"qkv_proj", "b", "vb2", 25.0},
                   {"qkv_proj", "d", "vd", 7.0},
                   {"attention_decode", "e", "ve", 30.0}});
  const db::TuningDb o(old_db, true), n(new_db, true);

  SECTION("library") {
    const tune::DiffReport r = tune::diff_winners(o, n, "", 0.05);
    REQUIRE(r.rows.size() == 5);
    CHECK(r.slower == 1);
    CHECK(r.only_old == 1);
    CHECK(r.only_new == 1);
    for (const auto& d : r.rows) {
      if (d.problem_key == "a") CHECK(d.ratio() == Approx(1.03));
      if (d.problem_key == "b") {  // the fastest of each database: vb (20) old, vb2 (25) new
        CHECK(d.old_variant == "vb");
        CHECK(d.new_variant == "vb2");
        CHECK(d.ratio() == Approx(1.25));
      }
      if (d.problem_key == "c") CHECK((d.in_old() && !d.in_new() && d.ratio() == 0));
      if (d.problem_key == "e") CHECK(d.ratio() == Approx(0.75));
    }
    CHECK(tune::diff_winners(o, n, "", 0.02).slower == 2);  // a's 3% too
    CHECK(tune::diff_winners(o, n, "", 0.30).slower == 0);
    CHECK(tune::diff_winners(o, n, "attention_decode", 0.0).rows.size() == 1);
    CHECK_THROWS_AS(tune::diff_winners(o, n, "", -0.1), std::invalid_argument);
  }
  SECTION("CLI") {
    auto [rc, out] = kt_test::run_autotune("diff " + old_db + " " + new_db);
    CHECK(rc == 1);
    CHECK_THAT(out, Catch::Contains("SLOWER"));
    CHECK_THAT(out, Catch::Contains("MISSING in new"));
    CHECK_THAT(out, Catch::Contains("5 problems: 1 slower than 5.0%, 1 missing"));
    std::tie(rc, out) = kt_test::run_autotune("diff " + old_db + " " + new_db + " --threshold 30");
    CHECK(rc == 0);
    std::tie(rc, out) = kt_test::run_autotune("diff " + old_db + " " + new_db + " --threshold 30 --require-all");
    CHECK(rc == 1);
    std::tie(rc, out) =
        kt_test::run_autotune("diff " + old_db + " " + new_db + " --family attention_decode --threshold 0");
    CHECK(rc == 0);
    std::tie(rc, out) = kt_test::run_autotune("diff " + old_db + " " + (tmp.path / "missing.db").string());
    CHECK(rc == 2);
    CHECK_THAT(out, Catch::Contains("autotune diff:"));
    std::tie(rc, out) = kt_test::run_autotune("diff " + old_db + " " + new_db + " --family nope");
    CHECK(rc == 2);
    std::tie(rc, out) = kt_test::run_autotune("diff " + old_db + " " + new_db + " --threshold -1");
    CHECK(rc == 2);
    std::tie(rc, out) = kt_test::run_autotune("diff " + old_db + " " + new_db + " --budget-ms 5");
    CHECK(rc == 2);
  }
}
