// A tuning database of hand-picked "winners": the runtime's [gpu] tests compile the variants they want the runtime to
// find (NVRTC, no cubin cache) and record them as ok measurements of the current device, so that the runtime's exact
// and nearest steps resolve to known configs and never to the default; CPU tests of the database tools (autotune
// diff) store placeholder binaries for a made-up device.
#pragma once
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "cache/tuning_db.h"
#include "cuda/driver.h"
#include "generator/arch.h"
#include "generator/compiler.h"
#include "tuner/worker.h"

namespace kt_test {

class WinnerDb {
 public:
  /// Opens (creates) the database at path and starts a run on `device`; argv names the test.
  WinnerDb(const std::string& path, const kt::db::DeviceRecord& device, const std::string& argv) : db_(path) {
    device_id_ = db_.upsert_device(device);
    kt::db::RunRecord run;
    run.argv = argv;
    run.started_at = 1700000000;
    run_id_ = db_.begin_run(run);
  }

  /// The same, on the device `info` describes (the GPU the test runs on).
  WinnerDb(const std::string& path, const kt::cuda::DeviceInfo& info, const std::string& argv)
      : WinnerDb(path, kt::device_record(info), argv) {}

  /// Stores a ready binary record (no compile).
  void put_binary(const kt::db::BinaryRecord& b) { db_.put_binary(b); }

  /// Compiles src (REQUIREs success) and stores its binary; returns the binary's hash.
  std::string put_binary(const kt::KernelSource& src) {
    const kt::CompileResult r = compiler_.compile(src);
    INFO(r.error);
    REQUIRE(r.ok);
    kt::db::BinaryRecord b;
    b.hash = compiler_.cache_key(src);
    b.family = src.family;
    b.variant_name = src.variant_name;
    b.name_expression = src.name_expression;
    b.lowered_name = r.report.lowered_name;
    b.arch = kt::arch_name(src.arch);
    b.cubin = r.cubin;
    b.registers = r.report.registers;
    b.static_smem_bytes = r.report.static_smem_bytes;
    b.dynamic_smem_bytes = int(src.dynamic_smem_bytes);
    put_binary(b);
    return b.hash;
  }

  /// Records an ok measurement of median_us (every sample equal) for one problem; the binary named by
  /// binary_hash must have been stored (put_binary). Kept until finish().
  void add(const std::string& family, const std::string& problem_key, const std::string& problem_json,
           const std::string& variant_name, const std::string& config_json, const std::string& binary_hash,
           double median_us) {
    kt::db::Measurement m;
    m.run_id = run_id_;
    m.device_id = device_id_;
    m.family = family;
    m.problem_key = problem_key;
    m.problem_json = problem_json;
    m.variant_name = variant_name;
    m.config_json = config_json;
    m.binary_hash = binary_hash;
    m.status = kt::db::Status::ok;
    m.median_us = m.p20_us = m.p80_us = median_us;
    m.samples_us = {median_us};
    m.measured_at = 1700000001;
    pending_.push_back(m);
  }

  /// Writes the measurements, ends the run, and returns the number of winners the family now has on this device.
  size_t finish(const std::string& device_name, const std::string& family) {
    db_.add_measurements(pending_);
    pending_.clear();
    db_.end_run(run_id_, 1700000002);
    return db_.winners(device_name, family).size();
  }

 private:
  kt::Compiler compiler_{nullptr};
  kt::db::TuningDb db_;
  long long device_id_ = 0;
  long long run_id_ = 0;
  std::vector<kt::db::Measurement> pending_;
};

}  // namespace kt_test
