// Parallel NVRTC compilation of kernel variants, with a resource report per variant and the
// content-addressed cubin cache in front.
#pragma once
#include <atomic>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cache/cubin_cache.h"
#include "common/kt_types.h"

namespace kt {

/// One translation unit to compile: `source` #includes embedded headers; `name_expression` is the
/// kernel template instantiation (e.g. "kt::attn::flash_fwd<kt::DType::bf16, 128, true, 128, 64, 4, 2, 0>")
/// resolved through nvrtcAddNameExpression / nvrtcGetLoweredName.
struct KernelSource {
  std::string family;
  std::string variant_name;
  std::string name_expression;
  std::string source;
  ArchId arch;
  unsigned dynamic_smem_bytes = 0;  ///< shared memory the launch requests (derived from the config)
};

/// Outcome of compiling one KernelSource. On failure `ok` is false and `error` holds the NVRTC log.
struct CompileResult {
  KernelSource kernel;
  bool ok = false;
  bool cache_hit = false;
  std::string cache_key;
  std::string cubin;  ///< ELF bytes for kernel.arch
  CompileReport report;
  std::string error;
  /// Why the compiled cubin could not be stored in the cache ("" when it was, or there is no cache).
  /// A failed cache write never fails the compile: `ok` and `cubin` stand.
  std::string cache_warning;
};

/// Parses a ptxas -v log (NVRTC with -Xptxas=-v) into registers, spill bytes, stack and static
/// shared memory. Fields that the log does not mention keep their defaults.
CompileReport parse_ptxas_log(const std::string& log);

/// Compiles kernel variants with NVRTC on `jobs` threads (0 = one per core of the process's CPU affinity mask).
/// Cache key = content_hash(name expression, source, embedded headers hash, NVRTC version,
/// options, arch): any change of template, compiler or flags misses. A cache hit is used only if its
/// cubin is an ELF cubin for the variant's SM (cubin_image.h); any other entry is compiled again and
/// replaced. Cache trouble (a rejected entry, a failed write, a read-only cache) is a warning, reported
/// once per cause, never a compile failure.
class Compiler {
 public:
  /// cache may be null (always compile). Throws std::runtime_error if NVRTC cannot be loaded.
  explicit Compiler(CubinCache* cache, int jobs = 0);

  /// NVRTC options used for `arch`.
  std::vector<std::string> options(ArchId arch) const;
  std::string cache_key(const KernelSource& k) const;

  /// Compiles one variant (cache first). Never throws for a compile error: it is returned.
  CompileResult compile(const KernelSource& k) const;

  /// Compiles all variants in parallel; results are in input order. `progress(done, total, result)`
  /// is called (serialized) after each variant.
  std::vector<CompileResult> compile_all(
      const std::vector<KernelSource>& kernels,
      const std::function<void(size_t, size_t, const CompileResult&)>& progress = nullptr) const;

  int jobs() const { return jobs_; }

  /// Where warnings go; each distinct cause is passed once per Compiler (thread-safe, serialized).
  /// Default: one line on stderr, "kerntune: warning: <message>".
  void set_warning_handler(std::function<void(const std::string&)> handler);
  /// How many compiled kernels could not be stored in the cache (each one still compiled fine).
  size_t cache_write_failures() const { return cache_write_failures_.load(std::memory_order_relaxed); }

 private:
  void warn_once(const std::string& cause, const std::string& message) const;

  CubinCache* cache_;
  int jobs_;
  std::string nvrtc_version_;
  std::function<void(const std::string&)> warn_;
  mutable std::mutex warn_mu_;
  mutable std::set<std::string> warned_;
  mutable std::atomic<size_t> cache_write_failures_{0};
};

}  // namespace kt
