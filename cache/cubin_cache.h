// Content-addressed on-disk store of compiled kernels (cubins). No CUDA.
//
// Layout: one file per key, <dir>/<key[0:2]>/<key>.ktbin, format (all integers little-endian):
//   "KTCUBIN1\n"                      9 bytes, magic + format version
//   u64 json_len, json_len bytes      the CompileReport as a JSON object (nlohmann::json dump)
//   u64 cubin_len, cubin_len bytes    the cubin, verbatim
//   16 lowercase hex chars            XXH3-64 (seed 0) of every byte before it
// A file that is short, has trailing bytes, a wrong magic, bad lengths, a checksum mismatch or
// unparsable JSON is corrupt and read as a miss (the next put() replaces it). The checksum is unkeyed:
// it catches damage, not forgery, so get() can also check that the cubin is an ELF cubin for the
// expected SM (cubin_image.h). A cache is executable content: share one only between users who trust
// each other, like a folder of code.
#pragma once

#include <atomic>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>

namespace kt {

/// What NVRTC/ptxas reported for one compiled variant.
struct CompileReport {
  int registers = -1;         ///< registers per thread; -1 when unknown
  int spill_store_bytes = 0;  ///< bytes of spill stores per thread (ptxas -v)
  int spill_load_bytes = 0;   ///< bytes of spill loads per thread (ptxas -v)
  int stack_bytes = 0;        ///< stack frame per thread, bytes
  int static_smem_bytes = 0;  ///< static shared memory per block, bytes
  double compile_ms = 0;      ///< NVRTC wall time, milliseconds
  std::string lowered_name;   ///< mangled kernel name (nvrtcGetLoweredName), for cuModuleGetFunction
  std::string log;            ///< NVRTC program log (warnings, ptxas -v output)
};

/// One cached compile result: the cubin bytes (an ELF image for cuModuleLoadData) and its report.
struct CubinEntry {
  std::string cubin;
  CompileReport report;
};

/// A failed CubinCache::put. `cause()` is the reason without the path (e.g. "Permission denied",
/// "No space left on device"), so a caller can report each distinct cause once.
class CacheWriteError : public std::runtime_error {
 public:
  CacheWriteError(const std::string& what, std::string cause) : std::runtime_error(what), cause_(std::move(cause)) {}
  const std::string& cause() const { return cause_; }

 private:
  std::string cause_;
};

/// Content-addressed on-disk store of compiled kernels, safe to share between threads and processes.
/// Keys are content_hash() values of everything that determines the cubin (see content_hash in cache/hash.h).
class CubinCache {
 public:
  /// Opens (creating it with parents if missing) the cache directory `dir`. A directory that exists and
  /// can be read but not written (a pre-populated cache in a container image, another user's folder)
  /// opens read-only: get() works, put() throws CacheWriteError. Throws std::runtime_error naming dir
  /// if it cannot be created, is not a directory, or cannot be read.
  explicit CubinCache(std::string dir);

  /// $KERNTUNE_CACHE_DIR if set and non-empty, else $HOME/.cache/kerntune.
  /// Throws std::runtime_error if neither KERNTUNE_CACHE_DIR nor HOME is set (non-empty).
  static std::string default_dir();

  /// Looks up `key` (32 lowercase hex chars, as content_hash returns). Returns nullopt on a miss,
  /// including when the file is truncated or corrupt (never an error). With expected_sm > 0 (e.g. 90
  /// for sm_90a) the cubin must also be an ELF cubin for that SM (cubin_image_problem); an entry that
  /// is not is rejected: a miss, counted in rejected(), with the reason in *why_rejected if given.
  /// Counts a hit or a miss. Throws std::invalid_argument for a malformed key.
  std::optional<CubinEntry> get(const std::string& key, int expected_sm = 0, std::string* why_rejected = nullptr) const;

  /// Stores `entry` under `key`, replacing any previous entry. Atomic: writes a uniquely named
  /// temporary file (<key>.ktbin.tmp.<pid>.<n>) in the same directory, then rename(2)s it into place,
  /// so concurrent put()s and get()s of the same key from threads or processes never see a partial
  /// file; the last rename wins. Not fsync'ed: after a power loss a torn file fails its checksum and
  /// reads as a miss. Throws std::invalid_argument for a malformed key, CacheWriteError naming the
  /// path and the cause on an I/O error (the temporary file is removed) or when the cache is read-only.
  void put(const std::string& key, const CubinEntry& entry);

  /// The cache directory, as given to the constructor.
  const std::string& dir() const { return dir_; }
  /// false when the directory could be read but not written at construction (put() then throws).
  bool writable() const { return writable_; }
  /// Path of the file that holds `key` (whether or not it exists). Throws std::invalid_argument for a malformed key.
  std::string path_for(const std::string& key) const;

  /// Number of get() calls that returned an entry / returned nullopt, since construction.
  size_t hits() const { return hits_.load(std::memory_order_relaxed); }
  size_t misses() const { return misses_.load(std::memory_order_relaxed); }
  /// Number of get() calls that found an intact entry whose cubin failed the expected_sm check.
  size_t rejected() const { return rejected_.load(std::memory_order_relaxed); }

 private:
  std::string dir_;
  bool writable_ = true;
  mutable std::atomic<size_t> rejected_{0};
  mutable std::atomic<size_t> hits_{0};
  mutable std::atomic<size_t> misses_{0};
};

}  // namespace kt
