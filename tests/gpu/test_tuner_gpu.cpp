// [gpu] tuner: fault isolation in worker processes (a faulting and a hanging kernel, compiled only
// here), and an end-to-end tune of a small shapes file whose winners the runtime then launches.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <SQLiteCpp/SQLiteCpp.h>

#include "../support.h"
#include "cache/tuning_db.h"
#include "cuda/driver.h"
#include "generator/arch.h"
#include "generator/attention_family.h"
#include "generator/compiler.h"
#include "runtime/runtime.h"
#include "tuner/attention_harness.h"
#include "tuner/worker.h"
#include "tuner/writer_lock.h"

using namespace kt;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kt_" + std::to_string(::getpid()) + "_" + name)).string();
}

ArchId device_arch() {
  const auto d = cuda::device_info(0);
  return ArchId{d.cc_major * 10 + d.cc_minor, d.cc_major == 9};
}

db::BinaryRecord record_of(const CompileResult& r) {
  db::BinaryRecord b;
  b.hash = r.cache_key;
  b.family = r.kernel.family;
  b.variant_name = r.kernel.variant_name;
  b.name_expression = r.kernel.name_expression;
  b.lowered_name = r.report.lowered_name;
  b.arch = arch_name(r.kernel.arch);
  b.cubin = r.cubin;
  b.registers = r.report.registers;
  b.dynamic_smem_bytes = int(r.kernel.dynamic_smem_bytes);
  return b;
}

// Test-only kernels with the attention kernel's signature: one writes far out of bounds, one spins.
const char* kBadKernels = R"(
#include "attention/attention_config.h"
template <int Mode>
__global__ void bad_kernel(const kt::attn::FwdParams p) {
  if (Mode == 0) {
    if (threadIdx.x == 0) *(reinterpret_cast<volatile int*>(p.o) + (1ll << 40)) = 1;  // illegal address
  } else {
    while (*reinterpret_cast<volatile int*>(p.o) != 12345) {}  // o is NaN-poisoned: spins forever
  }
}
)";

}  // namespace

// A database holding one good attention binary and the two bad ones, and the worker messages that measure them.
struct FaultBinaries {
  std::string dbp = temp_path("faults.db");
  attn::Problem p;
  attn::Config good_cfg;
  CompileResult good, bad[2];  // bad[0] faults, bad[1] hangs

  FaultBinaries() {
    const ArchId arch = device_arch();
    p.dtype = DType::bf16;
    p.seqlen_q = p.seqlen_k = 300;
    p.num_heads = 8;
    p.num_kv_heads = 2;
    p.head_dim = 128;
    p.causal = true;
    good_cfg = attn::default_config(arch, p);
    Compiler compiler(nullptr);
    good = compiler.compile(attn::kernel_source(p, good_cfg, arch));
    REQUIRE(good.ok);
    for (int mode = 0; mode < 2; ++mode) {
      const KernelSource src{"test_faults",
                             mode ? "hang_kernel" : "fault_kernel",
                             "bad_kernel<" + std::to_string(mode) + ">",
                             kBadKernels,
                             arch,
                             unsigned(attn::smem_bytes(good_cfg, p.head_dim))};
      bad[mode] = compiler.compile(src);
      INFO(bad[mode].error);
      REQUIRE(bad[mode].ok);
    }
    db::TuningDb db(dbp);
    db.put_binary(record_of(good));
    db.put_binary(record_of(bad[0]));
    db.put_binary(record_of(bad[1]));
  }
  ~FaultBinaries() { std::filesystem::remove(dbp); }

  std::unique_ptr<WorkerPool> pool(int gpu) const {
    auto w = std::make_unique<WorkerPool>(
        std::vector<std::string>{kt_test::autotune_path(), "__worker", "--db", dbp, "--device", std::to_string(gpu)},
        /*watchdog_s=*/5, /*setup_watchdog_s=*/120);
    w->set_problem({{"cmd", "problem"},
                    {"family", attn::kFamily},
                    {"problem", attn::problem_to_json(p)},
                    {"seed", 3},
                    {"ref_rows", 256}});
    return w;
  }
  WorkerResult measure(WorkerPool& w, const CompileResult& r) const {
    return w.measure({{"cmd", "measure"},
                      {"config", attn::config_to_json(good_cfg)},
                      {"variant", r.kernel.variant_name},
                      {"binary_hash", r.cache_key},
                      {"budget_ms", 5}});
  }
};

TEST_CASE("a faulting or hanging candidate is recorded and tuning continues in a fresh worker", "[gpu][tuner]") {
  const FaultBinaries f;
  auto pool = f.pool(0);
  auto ok1 = f.measure(*pool, f.good);
  CHECK(ok1.status == db::Status::ok);
  CHECK(ok1.median_us > 0);
  auto fault = f.measure(*pool, f.bad[0]);
  CHECK(fault.status == db::Status::launch_failed);
  CHECK_THAT(fault.error, Catch::Contains("CUDA_ERROR"));
  auto ok2 = f.measure(*pool, f.good);  // a fresh worker, the problem set up again
  CHECK(ok2.status == db::Status::ok);
  CHECK(pool->workers_started() == 2);
  const auto t0 = std::chrono::steady_clock::now();
  auto hang = f.measure(*pool, f.bad[1]);
  CHECK(hang.status == db::Status::timeout);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60));
  auto ok3 = f.measure(*pool, f.good);
  CHECK(ok3.status == db::Status::ok);
  CHECK(pool->workers_started() == 3);
}

TEST_CASE("worker pools of two GPUs: a death on one costs only its own candidate, the other's worker goes on",
          "[gpu][tuner]") {
  int count = 0;
  cuda::check(cuda::api().cuDeviceGetCount(&count), "cuDeviceGetCount");
  const FaultBinaries f;
  // GPU 0 and the last GPU (the same one on a one-GPU machine: two workers of one GPU are still two processes; there
  // the spinning kernel is left out, since it would share the GPU's time with the steady worker's timing).
  auto steady = f.pool(0), faulty = f.pool(count - 1);
  std::vector<WorkerResult> steady_rows;
  std::atomic<bool> faults_done{false};
  std::thread other([&] {  // measures until the other GPU's faults are over, and at least 3 times
    while (steady_rows.size() < 3 || !faults_done) steady_rows.push_back(f.measure(*steady, f.good));
  });
  const auto fault = f.measure(*faulty, f.bad[0]);
  WorkerResult hang;  // the spinning kernel only where the faulty worker has a GPU of its own
  if (count > 1) hang = f.measure(*faulty, f.bad[1]);
  const auto after = f.measure(*faulty, f.good);
  faults_done = true;
  other.join();
  CHECK(fault.status == db::Status::launch_failed);
  if (count > 1) CHECK(hang.status == db::Status::timeout);
  CHECK(after.status == db::Status::ok);
  CHECK(faulty->workers_started() == (count > 1 ? 3 : 2));  // the first, then one after each death
  CHECK(steady->workers_started() == 1);  // never restarted: its candidates measured through the other's deaths
  for (const auto& r : steady_rows) {
    INFO(r.error);
    CHECK(r.status == db::Status::ok);
    CHECK(r.median_us > 0);
  }
}

TEST_CASE("end to end: tune a small shapes file, kill and resume, then the runtime launches every winner",
          "[gpu][tuner][runtime]") {
  const std::string shapes = temp_path("small_shapes.json");
  const std::string dbp = temp_path("e2e.db");
  std::filesystem::remove(dbp);
  std::ofstream(shapes) << R"({"model": "small-gqa", "hidden_size": 1024, "num_attention_heads": 14,
    "num_key_value_heads": 2, "head_dim": 128, "dtypes": ["bf16", "fp16"],
    "workloads": {"attention_prefill": [{"batch": 1, "seqlen": 1000, "causal": true},
                                        {"batch": 2, "seqlen": 333, "seqlen_k": 777, "causal": false}]}})";
  const std::string arch = arch_name(device_arch());
  const std::string base = std::string(kt_test::autotune_path()) + " --arch " + arch + " --shapes " + shapes +
                           " --db " + dbp + " --budget-ms 5 --max-candidates 12";
  // Start a tune and kill it mid-run: whatever it measured must survive.
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", (base + " > /dev/null 2>&1").c_str(), (char*)nullptr);
    _exit(127);
  }
  long long before_kill = 0;
  for (int i = 0; i < 600 && before_kill < 8; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    try {
      if (std::filesystem::exists(dbp)) before_kill = db::TuningDb(dbp, true).count("measurements");
    } catch (const std::exception&) {
    }
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  // The pattern's first character in brackets matches dbp but not the pattern itself, so pkill / pgrep never match
  // the shell that runs them.
  const std::string pattern = "'[" + dbp.substr(0, 1) + "]" + dbp.substr(1) + "'";
  ::system(("pkill -9 -f " + pattern + " 2>/dev/null").c_str());  // the killed run's autotune (under sh) and worker
  // SIGKILL is asynchronous: until the killed autotune is gone its writer lock holds, and the resume would be refused.
  for (int i = 0; i < 200 && ::system(("pgrep -f " + pattern + " > /dev/null 2>&1").c_str()) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // A process leaves the process list (its command line empties) before the kernel closes its files: wait for the
  // killed run's writer lock itself.
  {
    std::string why;
    bool free = false;
    for (int i = 0; i < 200 && !free; ++i) {
      kt::WriterLock probe;
      free = probe.acquire(dbp, &why);
      if (!free) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    INFO(why);
    REQUIRE(free);
  }
  REQUIRE(before_kill >= 8);
  const long long after_kill = db::TuningDb(dbp, true).count("measurements");
  CHECK(after_kill >= before_kill);

  // Resume: completes, measuring only what is missing.
  auto [rc, out] = kt_test::run_command(base);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK_THAT(out, Catch::Contains("already in"));
  db::TuningDb db(dbp, true);
  const long long total = db.count("measurements");
  // Every problem has its 12 candidates (and the depth siblings the refinement of its leaders adds), each measured
  // once: neither the kill nor the resume lost or repeated a row.
  REQUIRE(db.winners().size() == 4);
  long long rows = 0;
  for (const auto& w : db.winners()) {
    std::set<std::string> names;
    for (const auto& m : db.measurements(w.device_name, w.family, w.problem_key)) {
      CHECK(names.insert(m.variant_name).second);
      ++rows;
    }
    CHECK(names.size() >= 12);
  }
  CHECK(rows == total);
  // The same command again measures nothing.
  auto [rc2, out2] = kt_test::run_command(base);
  CHECK(rc2 == 0);
  CHECK_THAT(out2, Catch::Contains("0 candidates to measure"));
  CHECK(db::TuningDb(dbp, true).count("measurements") == total);

  // Every winner, launched by the runtime from the database, matches the float64 reference.
  const auto winners = db.winners();
  REQUIRE(winners.size() == 4);
  cuda::Context ctx(0);
  cuda::Stream stream;
  Runtime rt(dbp);
  for (const auto& w : winners) {
    const auto p = attn::problem_from_json(nlohmann::json::parse(w.problem_json));
    const auto choice = rt.explain(p);
    INFO(w.problem_key << ": " << choice.why);
    CHECK(choice.step == "exact");
    CHECK(choice.variant_name == w.variant_name);
    const auto in = attn::make_inputs(p, 11);
    const auto ref = attn::reference_rows(in, 1.0 / std::sqrt(double(p.head_dim)), 2048, 5);
    attn::DeviceProblem dev(in, 1, true);
    rt.attention_prefill(p, dev.params(0, 0.f), stream.get());
    stream.synchronize();
    std::vector<uint16_t> o;
    std::vector<float> lse;
    dev.download(0, o, lse);
    const auto v = attn::verify(in, ref, o, lse);
    INFO(v.message);
    CHECK(v.pass);
  }
  const auto show = kt_test::run_command(std::string(kt_test::autotune_path()) + " show --db " + dbp);
  CHECK(show.first == 0);
  CHECK_THAT(show.second, Catch::Contains("4 winners"));
  std::filesystem::remove(dbp);
  std::filesystem::remove(shapes);
}

TEST_CASE("autotune --devices all: a worker per GPU, every row tagged with its GPU, the winners of a one-GPU run",
          "[gpu][tuner]") {
  int count = 0;
  cuda::check(cuda::api().cuDeviceGetCount(&count), "cuDeviceGetCount");
  const std::string shapes = temp_path("devices_shapes.json");
  std::ofstream(shapes) << R"({"model": "qwen-qkv", "hidden_size": 3584, "num_attention_heads": 28,
    "num_key_value_heads": 4, "head_dim": 128, "qkv_bias": true, "dtypes": ["bf16"],
    "workloads": {"qkv_proj": {"tokens": [1, 16, 64, 256, 1024, 4096], "formats": ["int4"]}}})";
  const std::string arch = arch_name(device_arch());
  const std::string all_db = temp_path("devices_all.db"), one_db = temp_path("devices_one.db");
  std::filesystem::remove(all_db);
  std::filesystem::remove(one_db);
  const std::string base = std::string(kt_test::autotune_path()) + " --arch " + arch + " --shapes " + shapes +
                           " --grid listed --budget-ms 20 --max-candidates 6";
  auto [rc, out] = kt_test::run_command(base + " --devices all --db " + all_db);
  INFO(out);
  REQUIRE(rc == 0);
  if (count > 1) CHECK_THAT(out, Catch::Contains("measuring on " + std::to_string(count) + " GPUs"));
  {
    db::TuningDb db(all_db, true);
    CHECK(db.count("devices") == count);  // one row per GPU (by uuid), all of one device class
    const auto ws = db.winners();
    CHECK(ws.size() == 6);  // one winner per problem, pooled over the GPUs
    std::set<long long> used;
    for (const auto& w : ws)
      for (const auto& m : db.measurements(ws.front().device_name, w.family, w.problem_key)) used.insert(m.device_id);
    CHECK(used.size() == size_t(std::min(count, 6)));  // every GPU measured (each takes a problem at the start)
  }
  // The same work on GPU 0 alone: per problem, the multi-GPU winner is within 5% of the one-GPU winner there.
  std::tie(rc, out) = kt_test::run_command(base + " --devices 0 --db " + one_db);
  REQUIRE(rc == 0);
  db::TuningDb all(all_db, true), one(one_db, true);
  for (const auto& w : all.winners()) {
    const auto o = one.winner(w.device_name, w.family, w.problem_key);
    REQUIRE(o);
    double same = -1;
    for (const auto& m : one.measurements(w.device_name, w.family, w.problem_key))
      if (m.variant_name == w.variant_name && m.status == db::Status::ok) same = m.median_us;
    INFO(w.problem_key << ": " << w.variant_name << " " << same << " us on GPU 0 alone, its winner " << o->median_us);
    CHECK(same > 0);
    CHECK(same <= o->median_us * 1.05);
  }
  // A GPU the machine does not have is refused before any work.
  std::tie(rc, out) = kt_test::run_command(base + " --devices 0," + std::to_string(count) + " --db " + one_db);
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains("GPU " + std::to_string(count) + " does not exist"));
  std::filesystem::remove(all_db);
  std::filesystem::remove(one_db);
  std::filesystem::remove(shapes);
}

TEST_CASE("autotune resumes a database measured on another GPU of the same name: nothing is measured again",
          "[gpu][tuner]") {
  const std::string shapes = temp_path("resume_class_shapes.json");
  std::ofstream(shapes) << R"({"model": "qwen-qkv", "hidden_size": 3584, "num_attention_heads": 28,
    "num_key_value_heads": 4, "head_dim": 128, "qkv_bias": true, "dtypes": ["bf16"],
    "workloads": {"qkv_proj": {"tokens": [1, 256], "formats": ["int4"]}}})";
  const std::string dbp = temp_path("resume_class.db");
  std::filesystem::remove(dbp);
  const std::string cmd = std::string(kt_test::autotune_path()) + " --arch " + arch_name(device_arch()) + " --shapes " +
                          shapes + " --grid listed --budget-ms 5 --max-candidates 4 --db " + dbp;
  auto [rc, out] = kt_test::run_command(cmd);
  INFO(out);
  REQUIRE(rc == 0);
  long long rows = 0;
  {
    db::TuningDb db(dbp, true);
    rows = db.count("measurements");
    REQUIRE(rows >= 8);
  }
  {  // the same database on "another machine": the measuring GPU's uuid is not this one's
    SQLite::Database raw(dbp, SQLite::OPEN_READWRITE);
    REQUIRE(raw.exec("UPDATE devices SET uuid = 'GPU-another-machine'") == 1);
  }
  std::tie(rc, out) = kt_test::run_command(cmd);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK_THAT(out, Catch::Contains("autotune: 0 candidates to measure"));
  db::TuningDb db(dbp, true);
  CHECK(db.count("measurements") == rows);
  CHECK(db.count("devices") == 2);  // this GPU is recorded beside the other; the winners pool by name
  CHECK(db.winners().size() == 2);
  std::tie(rc, out) = kt_test::run_command(cmd + " --retune");  // --retune measures again
  REQUIRE(rc == 0);
  CHECK(db::TuningDb(dbp, true).count("measurements") > rows);
  std::filesystem::remove(dbp);
  std::filesystem::remove(shapes);
}

TEST_CASE("autotune --grid buckets: the same command again measures nothing and compiles nothing", "[gpu][tuner]") {
  const std::string shapes = temp_path("grid_again_shapes.json");
  std::ofstream(shapes) << R"({"model": "qwen-qkv", "hidden_size": 3584, "num_attention_heads": 28,
    "num_key_value_heads": 4, "head_dim": 128, "qkv_bias": true, "dtypes": ["bf16"],
    "workloads": {"qkv_proj": {"tokens": [1, 16], "formats": ["int4"]}}})";
  const std::string dbp = temp_path("grid_again.db");
  std::filesystem::remove(dbp);
  const std::string cmd = std::string(kt_test::autotune_path()) + " --arch " + arch_name(device_arch()) + " --shapes " +
                          shapes + " --grid buckets --budget-ms 5 --max-candidates 4 --db " + dbp;
  auto [rc, out] = kt_test::run_command(cmd);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK_THAT(out, Catch::Contains("fill the runtime's power-of-two buckets"));  // M 2, 4 and 8 between 1 and 16
  CHECK_THAT(out, !Catch::Contains("interrupted") && !Catch::Contains("rerun the same command"));
  const long long rows = db::TuningDb(dbp, true).count("measurements");
  // Again: every grid problem's neighbours are measured, so its candidates are known and measured too.
  std::tie(rc, out) = kt_test::run_command(cmd);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK_THAT(out, Catch::Contains("autotune: 0 candidates to measure"));
  CHECK_THAT(out, Catch::Contains("autotune: compiling 0 binaries"));
  CHECK_THAT(out, !Catch::Contains("interrupted") && !Catch::Contains("rerun the same command"));
  CHECK(db::TuningDb(dbp, true).count("measurements") == rows);
  std::filesystem::remove(dbp);
  std::filesystem::remove(shapes);
}

TEST_CASE("autotune --time-budget: stops measuring once spent, exits 0, and the same command continues",
          "[gpu][tuner]") {
  const std::string shapes = temp_path("budget_shapes.json");
  std::ofstream(shapes) << R"({"model": "qwen-qkv", "hidden_size": 3584, "num_attention_heads": 28,
    "num_key_value_heads": 4, "head_dim": 128, "qkv_bias": true, "dtypes": ["bf16"],
    "workloads": {"qkv_proj": {"tokens": [1, 16, 64, 256, 1024, 4096], "formats": ["int4", "nf4"]}}})";
  const std::string dbp = temp_path("budget.db");
  std::filesystem::remove(dbp);
  const std::string base = std::string(kt_test::autotune_path()) + " --arch " + arch_name(device_arch()) +
                           " --shapes " + shapes + " --db " + dbp + " --grid listed --budget-ms 20 --max-candidates 6";
  const double budget_s = 3;
  const auto t0 = std::chrono::steady_clock::now();
  auto [rc, out] = kt_test::run_command(base + " --time-budget 3");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(out);
  CHECK(rc == 0);
  // The candidate in flight and the report finish after the budget; nothing new starts.
  CHECK(took < budget_s + 20);
  // A problem left without its 6 candidates means the budget was spent (a stop stores every row it took); spent with
  // every problem's 6 rows means the stop cut a leader's refinement or a final round, never a run that had ended.
  bool complete = true;
  size_t winners = 0;
  {
    db::TuningDb db(dbp, true);
    const auto ws = db.winners();
    winners = ws.size();
    complete = ws.size() == 12;
    for (const auto& w : ws) complete = complete && db.measurements(w.device_name, w.family, w.problem_key).size() >= 6;
  }
  const bool spent = out.find("--time-budget 3 s spent") != std::string::npos;
  if (!complete) CHECK(spent);
  if (spent) CHECK(took >= budget_s);
  if (winners < 12) CHECK_THAT(out, Catch::Contains("not measured yet (--time-budget spent"));
  // The same command without a budget measures only what is missing and completes: every problem has its 6
  // candidates (and the leaders' depth siblings the refinement adds), none measured twice.
  std::tie(rc, out) = kt_test::run_command(base);
  REQUIRE(rc == 0);
  db::TuningDb db(dbp, true);
  CHECK(db.count("measurements") >= 12 * 6);
  CHECK(db.winners().size() == 12);
  std::map<std::string, std::set<std::string>> seen;
  for (const auto& w : db.winners()) {
    const auto ms = db.measurements(w.device_name, w.family, w.problem_key);
    auto& names = seen[w.problem_key];
    for (const auto& m : ms) CHECK(names.insert(m.variant_name).second);  // one row per candidate
    CHECK(names.size() >= 6);
  }
  CHECK(seen.size() == 12);
  std::filesystem::remove(dbp);
  std::filesystem::remove(shapes);
}
