#include "cache/cubin_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include <nlohmann/json.hpp>

#include "cache/cubin_image.h"
#include "cache/hash.h"

namespace kt {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[] = "KTCUBIN1\n";
constexpr size_t kMagicLen = sizeof(kMagic) - 1;  // 9
constexpr size_t kChecksumLen = 16;

std::string errno_text(int e) { return std::strerror(e); }

void validate_key(const std::string& key) {
  if (!is_content_hash(key))
    throw std::invalid_argument("CubinCache: invalid key '" + key + "' (expected 32 lowercase hex chars)");
}

void append_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

bool read_u64(const std::string& in, size_t& pos, size_t end, uint64_t& v) {
  if (end - pos < 8) return false;
  v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(static_cast<unsigned char>(in[pos + i])) << (8 * i);
  pos += 8;
  return true;
}

nlohmann::json report_to_json(const CompileReport& r) {
  return nlohmann::json{{"registers", r.registers},
                        {"spill_store_bytes", r.spill_store_bytes},
                        {"spill_load_bytes", r.spill_load_bytes},
                        {"stack_bytes", r.stack_bytes},
                        {"static_smem_bytes", r.static_smem_bytes},
                        {"compile_ms", r.compile_ms},
                        {"lowered_name", r.lowered_name},
                        {"log", r.log}};
}

CompileReport report_from_json(const nlohmann::json& j) {  // throws nlohmann::json::exception
  CompileReport r;
  r.registers = j.value("registers", r.registers);
  r.spill_store_bytes = j.value("spill_store_bytes", r.spill_store_bytes);
  r.spill_load_bytes = j.value("spill_load_bytes", r.spill_load_bytes);
  r.stack_bytes = j.value("stack_bytes", r.stack_bytes);
  r.static_smem_bytes = j.value("static_smem_bytes", r.static_smem_bytes);
  r.compile_ms = j.value("compile_ms", r.compile_ms);
  r.lowered_name = j.value("lowered_name", r.lowered_name);
  r.log = j.value("log", r.log);
  return r;
}

// Reads the whole file. false if it does not exist or cannot be read (both are misses).
bool read_file(const std::string& path, std::string& out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return false;
  }
  out.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::read(fd, &out[got], out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(got);  // a short read is caught by the format checks
  return true;
}

// Parses and verifies one file's bytes; nullopt if corrupt.
std::optional<CubinEntry> decode(const std::string& data) {
  if (data.size() < kMagicLen + 8 + 8 + kChecksumLen) return std::nullopt;
  if (data.compare(0, kMagicLen, kMagic) != 0) return std::nullopt;
  const size_t body_end = data.size() - kChecksumLen;
  if (data.compare(body_end, kChecksumLen, hex64(xxh3_64(data.data(), body_end))) != 0) return std::nullopt;
  size_t pos = kMagicLen;
  uint64_t json_len = 0, cubin_len = 0;
  if (!read_u64(data, pos, body_end, json_len) || json_len > body_end - pos) return std::nullopt;
  std::string_view json_text(data.data() + pos, static_cast<size_t>(json_len));
  pos += static_cast<size_t>(json_len);
  if (!read_u64(data, pos, body_end, cubin_len) || cubin_len != body_end - pos) return std::nullopt;
  CubinEntry e;
  try {
    nlohmann::json j = nlohmann::json::parse(json_text.begin(), json_text.end());
    if (!j.is_object()) return std::nullopt;
    e.report = report_from_json(j);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  e.cubin.assign(data, pos, static_cast<size_t>(cubin_len));
  return e;
}

std::string encode(const CubinEntry& e) {
  const std::string json = report_to_json(e.report).dump();
  std::string out;
  out.reserve(kMagicLen + 16 + json.size() + e.cubin.size() + kChecksumLen);
  out.append(kMagic, kMagicLen);
  append_u64(out, json.size());
  out += json;
  append_u64(out, e.cubin.size());
  out += e.cubin;
  out += hex64(xxh3_64(out.data(), out.size()));
  return out;
}

std::atomic<uint64_t> g_tmp_counter{0};

}  // namespace

CubinCache::CubinCache(std::string dir) : dir_(std::move(dir)) {
  if (dir_.empty()) throw std::runtime_error("CubinCache: empty cache directory path");
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_, ec))
    throw std::runtime_error("CubinCache: cannot create cache directory '" + dir_ + "'" +
                             (ec ? ": " + ec.message() : std::string(": not a directory")));
  if (::access(dir_.c_str(), R_OK | X_OK) != 0)
    throw std::runtime_error("CubinCache: cache directory '" + dir_ + "' is not readable: " + errno_text(errno));
  // Readable but not writable: a pre-populated cache (container image, installed package) is still
  // useful for reads.
  writable_ = ::access(dir_.c_str(), W_OK) == 0;
}

std::string CubinCache::default_dir() {
  const char* env = std::getenv("KERNTUNE_CACHE_DIR");
  if (env && *env) return env;
  const char* home = std::getenv("HOME");
  if (home && *home) return std::string(home) + "/.cache/kerntune";
  throw std::runtime_error(
      "CubinCache::default_dir: neither KERNTUNE_CACHE_DIR nor HOME is set; set KERNTUNE_CACHE_DIR");
}

std::string CubinCache::path_for(const std::string& key) const {
  validate_key(key);
  return dir_ + "/" + key.substr(0, 2) + "/" + key + ".ktbin";
}

std::optional<CubinEntry> CubinCache::get(const std::string& key, int expected_sm, std::string* why_rejected) const {
  const std::string path = path_for(key);
  std::string data;
  std::optional<CubinEntry> e;
  if (read_file(path, data)) e = decode(data);
  if (e && expected_sm > 0) {
    std::string why = cubin_image_problem(e->cubin, expected_sm);
    if (!why.empty()) {
      rejected_.fetch_add(1, std::memory_order_relaxed);
      if (why_rejected) *why_rejected = "cubin cache entry '" + path + "' rejected: " + why;
      e.reset();
    }
  }
  (e ? hits_ : misses_).fetch_add(1, std::memory_order_relaxed);
  return e;
}

void CubinCache::put(const std::string& key, const CubinEntry& entry) {
  const std::string path = path_for(key);
  if (!writable_)
    throw CacheWriteError("CubinCache::put: cache directory '" + dir_ + "' is read-only", "read-only cache directory");
  auto fail = [](const std::string& what, int e) { throw CacheWriteError(what + ": " + errno_text(e), errno_text(e)); };
  const std::string sub = dir_ + "/" + key.substr(0, 2);
  if (::mkdir(sub.c_str(), 0755) != 0) {
    const int e = errno;
    if (e != EEXIST) fail("CubinCache::put: cannot create directory '" + sub + "'", e);
  }

  const std::string bytes = encode(entry);

  // Unique temporary name in the same directory (same filesystem, so rename(2) is atomic).
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
          std::to_string(g_tmp_counter.fetch_add(1, std::memory_order_relaxed));
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    const int e = errno;
    if (fd < 0 && e != EEXIST) fail("CubinCache::put: cannot create '" + tmp + "'", e);
  }
  if (fd < 0) fail("CubinCache::put: cannot create a unique temporary file next to '" + path + "'", EEXIST);

  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = n < 0 ? errno : EIO;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("CubinCache::put: cannot write '" + tmp + "'", e);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail("CubinCache::put: cannot write '" + tmp + "'", e);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail("CubinCache::put: cannot rename '" + tmp + "' to '" + path + "'", e);
  }
}

}  // namespace kt
