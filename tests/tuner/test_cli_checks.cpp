// The autotune command line without a GPU: option ranges and contradictions (tuner/cli_checks.h), and the
// exit statuses the README promises (2 for any bad input, 130 when interrupted), run on the built binary.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>

#include "../support.h"
#include "cache/tuning_db.h"
#include "cuda/driver.h"
#include "tests/support.h"
#include "tuner/cli_checks.h"

using kt::cli::CliError;
using kt::cli::TuneOptions;
namespace fs = std::filesystem;

namespace {

using kt_test::TempDir;

std::string error_of(const TuneOptions& o) {
  try {
    kt::cli::check_tune_options(o);
  } catch (const CliError& e) {
    return e.what();
  }
  return "";
}

TuneOptions valid() {
  TuneOptions o;
  o.arch = "sm_90a";
  return o;
}

const char* kPrefill = R"({"model":"tiny","hidden_size":3584,"num_attention_heads":28,"num_key_value_heads":4,
  "head_dim":128,"dtypes":["bf16"],"workloads":{"attention_prefill":[{"batch":1,"seqlen":512}]}})";

}  // namespace

TEST_CASE("check_tune_options: numeric options are range-checked, NaN and infinity included", "[tuner][cli]") {
  CHECK(error_of(valid()) == "");
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (double b : {0.0, -5.0, nan, inf, 60000.5}) {
    TuneOptions o = valid();
    o.budget_ms = b;
    o.watchdog_s = 1000;
    CHECK_THAT(error_of(o), Catch::StartsWith("--budget-ms must be a number of milliseconds in (0, 60000], got"));
  }
  for (double w : {0.0, -1.0, nan, inf, 86401.0}) {
    TuneOptions o = valid();
    o.watchdog_s = w;
    CHECK_THAT(error_of(o), Catch::StartsWith("--watchdog-s must be a number of seconds in (0, 86400], got"));
  }
  TuneOptions o = valid();
  o.budget_ms = 60000;
  o.watchdog_s = 86400;
  CHECK(error_of(o) == "");  // both at their bound
  o.watchdog_s = 60;         // the budget must be below the watchdog, or every candidate times out
  CHECK_THAT(error_of(o), Catch::Contains("--budget-ms 60000 is not below --watchdog-s 60") &&
                              Catch::Contains("every candidate would be killed as timed out"));
  o.compile_only = true;  // nothing is measured: no conflict
  CHECK(error_of(o) == "");

  o = valid();
  o.max_candidates = -1;
  CHECK(error_of(o) == "--max-candidates must be >= 0 (0 = all candidates), got -1");
  o = valid();
  o.jobs = -3;
  CHECK(error_of(o) == "--jobs must be in [0, 256] (0 = all hardware threads), got -3");
  o.jobs = 100000;
  CHECK(error_of(o) == "--jobs must be in [0, 256] (0 = all hardware threads), got 100000");
  o.jobs = 256;
  CHECK(error_of(o) == "");
  o.strategy = "random";
  CHECK(error_of(o) == "unknown --strategy 'random': use fast, exhaustive or halving");
  o = valid();
  o.time_budget_s = -1;
  CHECK(error_of(o) == "--time-budget must be a number of seconds >= 0 (0 = none), got -1");
  o.time_budget_s = std::nan("");
  CHECK_THAT(error_of(o), Catch::StartsWith("--time-budget must be a number of seconds >= 0"));
  o.time_budget_s = 900;
  CHECK(error_of(o) == "");
}

TEST_CASE("check_tune_options: contradicting options and unusable paths are refused", "[tuner][cli]") {
  TuneOptions o = valid();
  o.compile_only = true;
  o.retune = true;
  CHECK(error_of(o) == "--retune has no effect with --compile-only (nothing is measured)");
  o.retune = false;
  o.strategy_given = true;
  CHECK(error_of(o) == "--strategy has no effect with --compile-only (nothing is measured)");
  o.strategy_given = false;
  o.time_budget_s = 60;
  CHECK(error_of(o) == "--time-budget has no effect with --compile-only (nothing is measured)");
  o.time_budget_s = 0;
  o.arch = "";
  CHECK_THAT(error_of(o), Catch::StartsWith("--compile-only needs --arch") && Catch::Contains("sm_90a"));
  o = valid();
  o.no_cache = true;
  o.cache_dir_given = true;
  CHECK(error_of(o) == "--no-cache and --cache-dir contradict each other: give one of them");

  TempDir t;
  o = valid();
  for (const char* db : {":memory:", "file:x.db?mode=memory"}) {
    o.db = db;
    CHECK_THAT(error_of(o), Catch::StartsWith(std::string("--db '") + db + "' is not a file"));
  }
  o.db = (t.path / "no_such_folder" / "x.db").string();
  CHECK(error_of(o) == "--db '" + o.db + "': folder '" + (t.path / "no_such_folder").string() + "' does not exist");
  o.db = t.path.string();
  CHECK(error_of(o) == "--db '" + o.db + "' is a directory; give a file name");
  o.db = (t.path / "x.db").string();
  CHECK(error_of(o) == "");
  o.json_out = t.write("afile", "x") + "/r.json";
  CHECK_THAT(error_of(o), Catch::StartsWith("--json '" + o.json_out + "':") && Catch::Contains("is not a folder"));
}

TEST_CASE("check_families: a family the file has no workloads for, or nothing tunable, is an error", "[tuner][cli]") {
  kt::ShapesFile s;
  s.source = "x.json";
  s.dtypes = {kt::DType::bf16};  // the registry's families count problems (workloads x dtypes)
  s.model = {"m", 3584, 28, 4, 128, true, 1e6};
  s.decode = {{1, 4096}};
  CHECK(kt::cli::check_families(s, {}).empty());  // attention_decode is a registered family: nothing skipped
  CHECK(kt::cli::check_families(s, {"attention_decode"}).empty());
  CHECK_THROWS_WITH(kt::cli::check_families(s, {"attention_prefill"}),
                    "--families attention_prefill: x.json has no attention_prefill workloads");
  s.prefill = {{1, 512, 512, true}};
  CHECK(kt::cli::check_families(s, {}).empty());
  CHECK(kt::cli::check_families(s, {"attention_prefill"}).empty());
  CHECK_THROWS_WITH(kt::cli::check_families(s, {"qkv_proj"}), "--families qkv_proj: x.json has no qkv_proj workloads");
  CHECK_THROWS_WITH(kt::cli::check_families(s, {"foo"}), Catch::StartsWith("unknown family 'foo': known are"));
  s.prefill.clear();
  s.qkv_tokens = {1};
  s.qkv_formats = {"int4"};
  CHECK_THROWS_WITH(kt::cli::check_families(s, {"attention_prefill"}),
                    "--families attention_prefill: x.json has no attention_prefill workloads");
}

TEST_CASE("arch_for_gpu and compile_estimate", "[tuner][cli]") {
  CHECK(kt::cli::arch_for_gpu("NVIDIA H100", 9, 0) == "sm_90a");
  CHECK(kt::cli::arch_for_gpu("NVIDIA A100", 8, 0) == "sm_80");
  CHECK(kt::cli::arch_for_gpu("NVIDIA L4", 8, 9) == "sm_89");
  CHECK_THROWS_WITH(kt::cli::arch_for_gpu("Tesla T4", 7, 5),
                    Catch::Contains("Tesla T4 (compute capability 7.5), has no kerntune kernels: supported are sm_80"));
  CHECK(kt::cli::compile_estimate(10, 1) == "about 3 s");
  CHECK(kt::cli::compile_estimate(1000, 1) == "about 5 min");
  CHECK(kt::cli::compile_estimate(1000, 10) == "about 30 s");
  CHECK(kt::cli::compile_estimate(100000, 1) == "about 8.3 h");
}

TEST_CASE("autotune: every argument error exits 2 and names the option", "[tuner][cli]") {
  TempDir t;
  const std::string shapes = t.write("s.json", kPrefill);
  const std::string base = "--arch sm_90a --compile-only --shapes " + shapes + " ";
  const std::pair<const char*, const char*> cases[] = {
      {"--budget-ms nan", "--budget-ms must be"},
      {"--budget-ms inf", "--budget-ms must be"},
      {"--budget-ms 0", "--budget-ms must be"},
      {"--watchdog-s -1", "--watchdog-s must be"},
      {"--max-candidates -1", "--max-candidates must"},
      {"--jobs 100000", "--jobs must be in [0, 256]"},
      {"--retune", "--retune has no effect"},
      {"--strategy halving", "--strategy has no effect"},
      {"--time-budget 60", "--time-budget has no effect"},
      {"--time-budget -5", "--time-budget must be"},
      {"--no-cache --cache-dir /tmp/x", "--no-cache and --cache-dir"},
      // CLI11's own errors (it would exit 104 / 109 / 114).
      {"--budget-ms abc", "--budget-ms = abc"},
      {"--budget 5", "not expected"},
      {"--arch sm_80", "--arch"},
      {"--max-candidates 99999999999", "--max-candidates"},
  };
  for (const auto& [opt, msg] : cases) {
    INFO(opt);
    const auto [rc, out] = kt_test::run_autotune(base + opt);
    CHECK(rc == 2);
    CHECK_THAT(out, Catch::Contains(msg));
  }
  for (const char* args : {"show", "merge", "merge out.db", "show --db x.db merge a.db b.db"}) {
    INFO(args);
    CHECK(kt_test::run_autotune(args).first == 2);
  }
  for (const char* args : {"--arch sm_90a show --db x.db", "--compile-only merge out.db in.db"}) {
    INFO(args);
    const auto [rc, out] = kt_test::run_autotune(args);
    CHECK(rc == 2);
    CHECK_THAT(out, Catch::Contains("is a tuning option; it does not apply here"));
    CHECK_FALSE(fs::exists("out.db"));
  }
  auto [rc, out] = kt_test::run_autotune("show --db " + (t.path / "none.db").string() + " --family foo");
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains("--family: unknown family 'foo'"));
  std::tie(rc, out) = kt_test::run_autotune("--help");
  CHECK(rc == 0);
  CHECK_THAT(out, Catch::Contains("--shapes"));
  std::tie(rc, out) = kt_test::run_autotune("--arch sm_90a");
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains("--shapes FILE is required"));
}

TEST_CASE("autotune: shapes files without tunable work, and Hugging Face configs, say so", "[tuner][cli]") {
  TempDir t;
  auto [rc, out] =
      kt_test::run_autotune("--arch sm_90a --compile-only --families qkv_proj --shapes " + t.write("p.json", kPrefill));
  CHECK(rc == 2);
  CHECK_THAT(out,
             Catch::Contains("--families qkv_proj: " + (t.path / "p.json").string() + " has no qkv_proj workloads"));
  const std::string decode = t.write("d.json", R"({"model":"tiny","hidden_size":3584,"num_attention_heads":28,
    "num_key_value_heads":4,"head_dim":128,"workloads":{"attention_decode":[{"batch":1,"kv_len":512}]}})");
  std::tie(rc, out) = kt_test::run_autotune("--arch sm_90a --compile-only --families qkv_proj --shapes " + decode);
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains("--families qkv_proj: " + decode + " has no qkv_proj workloads"));
  // A Hugging Face config is announced (this one then fails on head_dim 96, before compiling anything).
  const std::string hf = t.write("config.json", R"({"architectures":["PhiForCausalLM"],"hidden_size":3072,
    "num_attention_heads":32,"num_key_value_heads":8,"head_dim":96})");
  std::tie(rc, out) = kt_test::run_autotune("--arch sm_90a --compile-only --shapes " + hf);
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains("reading " + hf + " as a Hugging Face config.json (model PhiForCausalLM") &&
                      Catch::Contains("head_dim 96 is not supported"));
  // A misspelt "workloads" in a kerntune file is an error, not a Hugging Face config.
  std::string misspelt = kPrefill;
  misspelt.replace(misspelt.find("\"workloads\""), 11, "\"workload\"");
  std::tie(rc, out) = kt_test::run_autotune("--arch sm_90a --compile-only --shapes " + t.write("m.json", misspelt));
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains("unknown field 'workload'"));
  CHECK_THAT(out, !Catch::Contains("Hugging Face config.json ("));
}

TEST_CASE("autotune without a GPU: --db gets the binaries, --json a compile report, no --arch is an error",
          "[tuner][cli]") {
  if (kt::cuda::gpu_available()) {
    WARN("a GPU is present: the no-GPU paths are not exercised");
    return;
  }
  TempDir t;
  const std::string shapes = t.write("s.json", kPrefill);
  const std::string db = (t.path / "k.db").string(), json = (t.path / "r.json").string();
  auto [rc, out] = kt_test::run_autotune("--shapes " + shapes + " --db " + db);
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains("no GPU found") && Catch::Contains("--arch is needed to compile without a GPU"));
  CHECK_FALSE(fs::exists(db));  // no empty database left behind

  std::tie(rc, out) =
      kt_test::run_autotune("--arch sm_90a --max-candidates 1 --shapes " + shapes + " --db " + db + " --json " + json);
  CHECK(rc == 0);
  CHECK_THAT(out, Catch::Contains("stored 1 compiled binaries in " + db));
  {
    kt::db::TuningDb d(db, true);
    CHECK(d.count("binaries") == 1);
    CHECK(d.count("runs") == 1);
    CHECK(d.count("measurements") == 0);
  }
  std::ifstream jf(json);
  REQUIRE(jf);
  const auto doc = nlohmann::json::parse(jf);
  CHECK(doc["measured"] == false);
  REQUIRE(doc["problems"].size() == 1);
  CHECK(doc["problems"][0]["candidates"] == 1);
  REQUIRE(doc["binaries"].size() == 1);
  CHECK(doc["binaries"][0]["ok"] == true);

  // --compile-only with --db stores the binaries too (it used to ignore --db and --json).
  const std::string db2 = (t.path / "co.db").string();
  std::tie(rc, out) =
      kt_test::run_autotune("--arch sm_90a --compile-only --max-candidates 1 --shapes " + shapes + " --db " + db2);
  CHECK(rc == 0);
  kt::db::TuningDb d2(db2, true);
  CHECK(d2.count("binaries") == 1);
}

TEST_CASE("autotune: SIGINT and SIGTERM during compilation stop cleanly with exit 130", "[tuner][cli]") {
  for (int sig : {SIGINT, SIGTERM}) {
    INFO("signal " << sig);
    TempDir t;
    const std::string log = (t.path / "log.txt").string(), cache = (t.path / "cache").string();
    const std::string shapes = std::string(KT_SOURCE_DIR) + "/shapes/qwen7b.json";
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      std::freopen(log.c_str(), "w", stdout);
      ::dup2(fileno(stdout), 2);
      const std::string exe = kt_test::autotune_path();
      ::execl(exe.c_str(), exe.c_str(), "--arch", "sm_90a", "--compile-only", "--shapes", shapes.c_str(), "--cache-dir",
              cache.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Wait until compilation has started (the estimate line), then interrupt.
    for (int i = 0; i < 300; ++i) {
      std::ifstream f(log);
      std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      if (text.find("autotune: compiling ") != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ::kill(pid, sig);
    int st = 0;
    REQUIRE(::waitpid(pid, &st, 0) == pid);
    std::ifstream f(log);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    INFO(text);
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 130);
    CHECK_THAT(text, Catch::Contains("autotune: interrupted") && Catch::Contains("rerun the same command to resume"));
    // No half-written cache entry is left.
    for (const auto& e : fs::recursive_directory_iterator(cache))
      CHECK(e.path().filename().string().find(".tmp") == std::string::npos);
  }
}

TEST_CASE("example_attention_prefill checks its database before the GPU", "[tuner][cli]") {
  TempDir t;
  const std::string bad = t.write("notsqlite.db", std::string(4096, 'x'));
  // $KT_EXAMPLE_PREFILL, else the build's, else next to this test binary (scripts/stage_gpu.sh's layout).
  std::string exe = KT_EXAMPLE_PREFILL_PATH;
  if (const char* e = std::getenv("KT_EXAMPLE_PREFILL"); e && *e) exe = e;
  else if (!fs::exists(exe))
    exe = (fs::read_symlink("/proc/self/exe").parent_path() / "example_attention_prefill").string();
  REQUIRE(fs::exists(exe));
  auto run_example = [&](const std::string& args) { return kt_test::run_command(exe + " " + args); };
  auto [rc, out] = run_example(bad);
  CHECK(rc == 1);
  CHECK_THAT(out, Catch::StartsWith("error: KT_ERROR_DATABASE") && Catch::Contains("tuning db '" + bad + "'") &&
                      Catch::Contains("not a SQLite database"));
  std::tie(rc, out) = run_example("");  // no database: the GPU decides
  if (!kt::cuda::gpu_available()) {
    CHECK(rc == 0);
    CHECK_THAT(out, Catch::StartsWith("no GPU found"));
  }
  std::tie(rc, out) = run_example((t.path / "missing.db").string());
  CHECK(rc == 1);
}

TEST_CASE("scripts/run.sh without a GPU refuses with an estimate and writes no database", "[tuner][cli]") {
  if (kt::cuda::gpu_available()) {
    WARN("a GPU is present: run.sh would tune");
    return;
  }
  TempDir t;
  const std::string db = (t.path / "k.db").string();
  const auto [st, out] =
      kt_test::run_command("env -u KT_COMPILE_ONLY KT_DB=" + db + " " + KT_SOURCE_DIR + "/scripts/run.sh");
  CHECK(st == 2);
  CHECK_THAT(out, Catch::Contains("no NVIDIA GPU found") && Catch::Contains(" min on this machine's") &&
                      Catch::Contains("KT_COMPILE_ONLY=1 ./scripts/run.sh"));
  CHECK_FALSE(fs::exists(db));
}
