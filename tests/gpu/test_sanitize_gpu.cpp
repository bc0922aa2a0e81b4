// Hidden ([.sanitize], left out of "[gpu]~[.]"): every winner of a tuned database launched on random inputs and checked against the float64 reference, one
// launch pass each, for compute-sanitizer (memcheck, racecheck, synccheck: scripts/gpu_all.sh sanitize).
//   KT_SANITIZE_DB=db.sqlite kerntune_tests "[.sanitize]"
// KT_SANITIZE_ONLY: ECMAScript regex on the variant name (default all); KT_SANITIZE_BUDGET_MS: timing budget per
// winner after its check (default 0.01: the fewest timed launches).
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "cache/tuning_db.h"
#include "cuda/driver.h"
#include "runtime/loaded_kernel.h"
#include "tests/support.h"
#include "tuner/session.h"

using namespace kt;

TEST_CASE("sanitize: every winner of $KT_SANITIZE_DB launches and matches the reference", "[gpu][.sanitize]") {
  const char* path = std::getenv("KT_SANITIZE_DB");
  if (!path || !*path) KT_SKIP("KT_SANITIZE_DB names no tuned database (scripts/gpu_all.sh sanitize sets it)");
  const char* only_env = std::getenv("KT_SANITIZE_ONLY");
  const std::regex only(only_env ? only_env : "");
  const char* budget_env = std::getenv("KT_SANITIZE_BUDGET_MS");
  const double budget_ms = budget_env ? std::stod(budget_env) : 0.01;

  cuda::Context ctx(0);
  cuda::Stream stream;
  const cuda::DeviceInfo dev = cuda::device_info(0);
  db::TuningDb db(path, true);
  int checked = 0;
  for (const auto& w : db.winners()) {
    if (!std::regex_search(w.variant_name, only)) continue;
    INFO(w.family << " " << w.problem_key << ": " << w.variant_name);
    const auto bin = db.get_binary(w.binary_hash);
    REQUIRE(bin.has_value());
    auto session = make_session(w.family, nlohmann::json::parse(w.problem_json), 1, 64, size_t(dev.l2_bytes));
    const LoadedKernel kernel(bin->cubin, bin->lowered_name, unsigned(bin->dynamic_smem_bytes));
    const Outcome out = session->measure(kernel, nlohmann::json::parse(w.config_json), stream.get(), budget_ms);
    INFO(out.error << " (rel err " << out.rel_err << ")");
    CHECK(out.status == db::Status::ok);
    ++checked;
    std::printf("sanitize: %s %s ok\n", w.problem_key.c_str(), w.variant_name.c_str());
  }
  CHECK(checked > 0);  // a database without (matching) winners checks nothing
}
