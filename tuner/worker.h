// Candidates run in a worker process so that a faulting kernel (illegal address, misaligned access),
// which poisons its CUDA context, or a hanging one costs only the worker: the tuner records the
// failure, starts a fresh worker and goes on. The parent never initializes CUDA.
//
// Protocol: one JSON object per line. Parent -> worker:
//   {"cmd":"problem","family":"attention_prefill","problem":{...},"seed":1,"ref_rows":512}
//   {"cmd":"measure","config":{...},"variant":"...","binary_hash":"...","budget_ms":100}
//   {"cmd":"quit"}
// Worker -> parent: first {"type":"hello","device":{...},"device_count":N} (or {"type":"error","error":...} and exit),
// then {"type":"ready"} per problem and {"type":"result",...} per measure. After a CUDA error the worker
// reports it as a launch_failed result and exits.
#pragma once
#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/tuning_db.h"
#include "cuda/driver.h"

namespace kt {

/// The database's record of a GPU from what the driver says of it (cuda::device_info): name, uuid, compute
/// capability, SMs, L2 bytes, driver version, SM and memory clocks in kHz (-1 where the driver does not report one).
db::DeviceRecord device_record(const cuda::DeviceInfo& info);

/// Entry point of `autotune __worker --db FILE [--device N]`: measures on CUDA device N (ordinal, default 0) and
/// serves requests on in_fd/out_fd until quit or EOF. Binaries are read from the tuning database (read-only). Its
/// hello names the device and the machine's device count. Returns the process exit code.
int worker_main(const std::string& db_path, int device, int in_fd, int out_fd);

/// Result of one candidate as reported by a worker (or by the pool when the worker died or hung).
struct WorkerResult {
  db::Status status = db::Status::launch_failed;
  std::string error;
  double median_us = 0, p20_us = 0, p80_us = 0;
  std::vector<double> samples_us;
  double rel_err = -1;
  double sm_clock_mhz = -1;
  /// Where the worker's time went, wall ms: loading the cubin (first use of a binary), the check (poison, launch,
  /// download, verify) and the timing.
  double load_ms = 0, check_ms = 0, time_ms = 0;
};

/// One candidate's passes of the final round as one row (tuner/strategy.h, final_pass_orders). When a pass is not ok:
/// the first such pass's row, with the load, check and timing times of all passes summed. Otherwise every pass's
/// samples, and the median, p20 and p80 each the median of the passes' (two passes: their mean; four: the mean of
/// the middle two, so one pass that a dip of the SM clock slowed is set aside, while a drift that is linear over the
/// balanced round still adds alike to every finalist; the pooled samples' median instead follows whichever pass fits
/// more samples into its budget); rel_err the largest; the SM clock the mean of those known (-1 when none is); the
/// times summed. Throws std::invalid_argument for no passes.
WorkerResult merge_passes(const std::vector<WorkerResult>& passes);

/// Supervises worker processes. Not thread-safe (one tuner thread).
class WorkerPool {
 public:
  /// argv: the worker command line (e.g. {"/proc/self/exe", "__worker", "--db", path}).
  /// watchdog_s bounds one measure request; setup_watchdog_s bounds a problem setup (inputs + reference).
  WorkerPool(std::vector<std::string> argv, double watchdog_s, double setup_watchdog_s);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  /// Starts a worker if none runs and returns the device it reported. Throws std::runtime_error with the
  /// worker's message when it has no GPU (or cannot start).
  db::DeviceRecord device();
  /// CUDA devices of the machine, as the worker counted them (starts a worker if none runs).
  int device_count() {
    device();
    return device_count_;
  }

  /// Sets the problem for following measures; sent to the current worker now and to every new one.
  /// Throws std::runtime_error if the worker cannot set it up (its message).
  void set_problem(const nlohmann::json& problem_cmd);
  /// Wall time the workers spent setting problems up (inputs, reference rows, buffers), ms, over the pool's life.
  double setup_ms() const { return setup_ms_; }

  /// Measures one candidate. A worker that dies yields launch_failed with its exit status, one that
  /// exceeds the watchdog is killed and yields timeout; either way the next call starts a fresh worker.
  WorkerResult measure(const nlohmann::json& measure_cmd);

  /// Workers started so far (1 + restarts after faults).
  int workers_started() const { return started_; }

  /// Kills the current worker (e.g. on Ctrl-C).
  void kill_worker();

 private:
  void start();
  bool send(const nlohmann::json& j);
  /// Reads one line; false on EOF or timeout (*timed_out tells which).
  bool read_line(std::string& line, double timeout_s, bool* timed_out);
  std::string reap();  // waits for the dead worker; returns "exit status N" / "signal N"

  std::vector<std::string> argv_;
  double watchdog_s_, setup_watchdog_s_;
  pid_t pid_ = -1;
  int to_worker_ = -1, from_worker_ = -1;
  std::string buffer_;
  nlohmann::json device_;
  int device_count_ = 1;
  nlohmann::json problem_;
  bool problem_sent_ = false;
  double setup_ms_ = 0;
  int started_ = 0;
};

}  // namespace kt
