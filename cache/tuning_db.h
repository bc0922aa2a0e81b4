// The SQLite tuning database: one file holding devices, tuning runs, compiled binaries (cubins) and
// every measurement, with a winners view. Readable with the plain `sqlite3` shell. No CUDA here.
//
// Schema (PRAGMA user_version = 4; migrations are applied in order on open; 2 rewrote qkv_proj's config_json and
// variant names, cache/migration_v2.h; 3 added measurements.screened; 4 made the winners view's fastest median win
// outright, where rows within 1% of it had tied):
//   devices(id, name, uuid UNIQUE, cc_major, cc_minor, sm_count, l2_bytes, driver_version,
//           sm_clock_khz, mem_clock_khz)
//   runs(id, argv, shapes_path, shapes_hash, kerntune_version, host, started_at, ended_at)   -- unix seconds
//   binaries(hash PRIMARY KEY, family, variant_name, name_expression, lowered_name, arch, nvrtc_version,
//            options, cubin BLOB, registers, spill_store_bytes, spill_load_bytes, stack_bytes,
//            static_smem_bytes, dynamic_smem_bytes, compile_ms, log)
//   measurements(id, run_id, device_id, family, problem_key, problem_json, variant_name, config_json,
//                binary_hash NULL, status, median_us, p20_us, p80_us, samples_json, error,
//                sm_clock_mhz, rel_err, metric, measured_at, screened)
//       status in ('ok','invalid','compile_failed','launch_failed','wrong_result','timeout'); screened 1: a
//       first-round row whose candidate the strategy's final round left out (Measurement::screened)
//   VIEW winners: per (device_name, family, problem_key), among the 'ok' rows that are not screened (all 'ok'
//       rows when every one is): the smallest median; equal medians are broken by fewer registers, then less
//       shared memory (static + dynamic), then variant_name, then the lower measurement id. The same rule as the
//       tuner's pick_winner, so every reader of one database picks the same kernel.
// Concurrency: WAL journal while a writer has the file open, busy_timeout 30 s, one transaction per
// add_measurements() batch, so several autotune processes can write one file at once. The last writer to
// close puts the file back in rollback-journal mode (journal_mode=DELETE), so a finished database opens
// read-only from a read-only folder and readers leave no -wal / -shm files.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace SQLite {
class Database;
}

namespace kt {
namespace db {

/// Any database failure. The message names the database file and the operation.
struct DbError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The GPU a measurement was taken on. `uuid` identifies the physical device; `name` is its class
/// (e.g. "NVIDIA H100 80GB HBM3"): winners are per class.
struct DeviceRecord {
  std::string name;
  std::string uuid;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  long long l2_bytes = 0;
  int driver_version = 0;
  int sm_clock_khz = -1;   ///< max SM clock, -1 unknown
  int mem_clock_khz = -1;  ///< max memory clock, -1 unknown
};

/// One autotune invocation.
struct RunRecord {
  std::string argv;
  std::string shapes_path;
  std::string shapes_hash;
  std::string kerntune_version;
  std::string host;
  long long started_at = 0;  ///< unix seconds
  long long ended_at = 0;    ///< 0 while running (or interrupted)
};

/// A compiled kernel variant, with its cubin. `hash` is the cubin cache key (content_hash).
struct BinaryRecord {
  std::string hash;
  std::string family;
  std::string variant_name;
  std::string name_expression;
  std::string lowered_name;
  std::string arch;
  std::string nvrtc_version;
  std::string options;
  std::string cubin;  ///< ELF bytes
  int registers = -1;
  int spill_store_bytes = 0, spill_load_bytes = 0, stack_bytes = 0;
  int static_smem_bytes = 0, dynamic_smem_bytes = 0;
  double compile_ms = 0;
  std::string log;
};

/// Outcome of one candidate on one problem. A failure is data, never dropped.
enum class Status { ok, invalid, compile_failed, launch_failed, wrong_result, timeout };
const char* status_name(Status s);
/// Throws DbError for an unknown name.
Status parse_status(const std::string& name);

struct Measurement {
  long long id = 0;  ///< set when read back
  long long run_id = 0;
  long long device_id = 0;
  std::string family;
  std::string problem_key;  ///< canonical key (e.g. attn::Problem::key())
  std::string problem_json;
  std::string variant_name;
  std::string config_json;
  std::string binary_hash;  ///< empty when there is no binary (compile_failed, invalid)
  Status status = Status::ok;
  double median_us = 0, p20_us = 0, p80_us = 0;  ///< microseconds; 0 unless timed
  std::vector<double> samples_us;                ///< every sample kept
  std::string error;                             ///< error text / NVRTC log for failures
  double sm_clock_mhz = -1;                      ///< SM clock seen while measuring, -1 unknown
  double rel_err = -1;                           ///< ||out-ref||/||ref|| from verification, -1 unknown
  double metric = 0;                             ///< TFLOP/s (compute-bound families) or GB/s
  long long measured_at = 0;                     ///< unix seconds
  /// A first-round row of a two-round strategy whose candidate the final round left out (tuner/strategy.h): the
  /// winners view compares it with the final round's rows only when its problem has no unscreened 'ok' row.
  bool screened = false;
};

/// A row of the winners view, with what a runtime needs to launch it.
struct Winner {
  std::string device_name;
  std::string family;
  std::string problem_key;
  std::string problem_json;
  std::string variant_name;
  std::string config_json;
  std::string binary_hash;
  double median_us = 0;
  double metric = 0;
  int registers = -1;
  long long measurement_id = 0;
};

/// The best 'ok' median of one variant on one problem (every variant measured, not only the winner): what the
/// runtime's nearest step checks a tuned config against the default with.
struct VariantMedian {
  std::string family;
  std::string problem_key;
  std::string variant_name;
  std::string config_json;
  /// Microseconds: the smallest median among the variant's unscreened 'ok' rows for the problem, or among its
  /// screened ones when it has no other (Measurement::screened).
  double median_us = 0;
  /// Every 'ok' row of the variant is screened: its final round left it out, so it ran slower than that round's
  /// finalists, and its median compares only with other screened medians.
  bool screened = false;
};

/// Rows one merge inserted (what was already there is not counted).
struct MergeCounts {
  long long devices = 0, runs = 0, binaries = 0, measurements = 0;
};

class TuningDb {
 public:
  /// Opens (or, unless read_only, creates) a database file; ":memory:" gives a private in-memory one.
  /// Applies pending migrations (PRAGMA user_version), then checks that every table and the winners
  /// view exist and that each table can be read. Throws DbError naming the path and what is wrong: a
  /// missing file (read-only) or folder, a directory, an unreadable file, a file or folder that cannot
  /// be written (read-write), an empty, truncated, damaged or non-SQLite file, a SQLite file that is not
  /// a kerntune tuning database, a schema older (read-only) or newer than this build's.
  /// A read-write open sets WAL mode; closing puts the file back in rollback-journal mode (see
  /// ~TuningDb). A read-only open never writes the file; of a rollback-journal database it creates no
  /// -wal / -shm files, and a WAL-mode database in a folder it cannot write opens immutable.
  explicit TuningDb(const std::string& path, bool read_only = false);
  /// A read-write connection switches the file to journal_mode=DELETE when it is the last one open, so
  /// a finished database opens read-only anywhere (a read-only folder, another user); while other
  /// connections are open the file stays in WAL mode and the last writer to close switches it.
  ~TuningDb();
  TuningDb(const TuningDb&) = delete;
  TuningDb& operator=(const TuningDb&) = delete;

  const std::string& path() const;
  /// Current PRAGMA user_version (kSchemaVersion after open).
  int schema_version() const;
  static constexpr int kSchemaVersion = 4;
  /// How many migration scripts this open applied (0 when the file was already current).
  int migrations_applied() const;

  /// Inserts the device, or updates its mutable fields (driver, clocks) if its uuid is known. Returns its id.
  long long upsert_device(const DeviceRecord& d);
  /// Every device row, ordered by name then uuid.
  std::vector<DeviceRecord> devices() const;
  /// Returns the run id.
  long long begin_run(const RunRecord& r);
  void end_run(long long run_id, long long ended_at);
  /// Read back a run / device by id (nullopt when there is none).
  std::optional<RunRecord> get_run(long long run_id) const;
  std::optional<DeviceRecord> get_device(long long device_id) const;

  /// Inserts a binary unless one with the same hash exists.
  void put_binary(const BinaryRecord& b);
  std::optional<BinaryRecord> get_binary(const std::string& hash) const;
  /// (registers, static + dynamic shared memory bytes) of a stored binary, without reading its cubin; nullopt when
  /// the database does not hold it.
  std::optional<std::pair<int, int>> binary_resources(const std::string& hash) const;
  bool has_binary(const std::string& hash) const;

  /// Appends measurements in one transaction (all or nothing).
  void add_measurements(const std::vector<Measurement>& ms);
  /// The variants of a problem that any device of class `device_name` has a measurement of (any status): what a
  /// resumed run skips, on the same GPU or on another of the same name (another machine, a merged shard).
  std::set<std::string> measured_variants(const std::string& device_name, const std::string& family,
                                          const std::string& problem_key) const;
  /// All measurements of a problem on a device class (device name), oldest first.
  std::vector<Measurement> measurements(const std::string& device_name, const std::string& family,
                                        const std::string& problem_key) const;

  /// Rows of the winners view, optionally for one device class and/or family, ordered by
  /// (device_name, family, problem_key).
  std::vector<Winner> winners(const std::string& device_name = "", const std::string& family = "") const;
  std::optional<Winner> winner(const std::string& device_name, const std::string& family,
                               const std::string& problem_key) const;
  /// Per (family, problem key, variant) measured 'ok' on device class `device_name`: its median (VariantMedian),
  /// ordered by family, problem key, variant name.
  std::vector<VariantMedian> variant_medians(const std::string& device_name) const;

  /// Copies every device, run, binary and measurement of another database file into this one
  /// (ids remapped, devices unified by uuid, binaries by hash, measurements and runs kept as they
  /// are: provenance survives), in one transaction. Merging the same file twice adds no duplicate
  /// measurements (a measurement is identified by device uuid, run start + argv, problem key, variant,
  /// measured_at). The source is opened read-only first and refused, naming it and the reason, as
  /// TuningDb(other_path, true) would. Returns the rows inserted here (exact under concurrent merges).
  MergeCounts merge_from(const std::string& other_path);
  /// Merges several files, all or nothing: they are merged into a temporary staging file next to this
  /// database (removed afterwards), which is then merged here in one transaction; if any input is
  /// refused, this database is unchanged (":memory:" has no folder for it: its inputs merge one by one).
  /// Returns the rows inserted here.
  MergeCounts merge_from(const std::vector<std::string>& paths);

  /// Counts for reports and tests.
  long long count(const std::string& table) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace db
}  // namespace kt
