// Content hash and on-disk cubin cache.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cache/cubin_cache.h"
#include "cache/hash.h"
#include "tests/support.h"

#define XXH_INLINE_ALL  // independent reference for the hash format checks
#include <xxhash.h>

namespace fs = std::filesystem;
using kt::CompileReport;
using kt::CubinCache;
using kt::CubinEntry;

namespace {

using kt_test::TempDir;

// A fresh directory under the system temp dir, removed (recursively) at scope exit.

std::string random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

CubinEntry sample_entry(size_t n, uint64_t seed) {
  CubinEntry e;
  e.cubin = random_bytes(n, seed);
  e.report.registers = 168;
  e.report.spill_store_bytes = 12;
  e.report.spill_load_bytes = 20;
  e.report.stack_bytes = 32;
  e.report.static_smem_bytes = 1024;
  e.report.compile_ms = 1234.5625;
  e.report.lowered_name = "_ZN2kt9flash_fwdINS_4bf16ELi128ELb1EEEvNS_6ParamsE";
  e.report.log = "ptxas info    : Used 168 registers\n\"quoted\" \\ and \x01 control, utf8 \xc3\xa9";
  return e;
}

void check_same(const CubinEntry& a, const CubinEntry& b) {
  CHECK(a.cubin == b.cubin);
  CHECK(a.report.registers == b.report.registers);
  CHECK(a.report.spill_store_bytes == b.report.spill_store_bytes);
  CHECK(a.report.spill_load_bytes == b.report.spill_load_bytes);
  CHECK(a.report.stack_bytes == b.report.stack_bytes);
  CHECK(a.report.static_smem_bytes == b.report.static_smem_bytes);
  CHECK(a.report.compile_ms == b.report.compile_ms);
  CHECK(a.report.lowered_name == b.report.lowered_name);
  CHECK(a.report.log == b.report.log);
}

size_t count_files(const fs::path& dir, const std::string& needle) {
  size_t n = 0;
  for (auto& p : fs::recursive_directory_iterator(dir))
    if (p.is_regular_file() && p.path().filename().string().find(needle) != std::string::npos) ++n;
  return n;
}

}  // namespace

TEST_CASE("content_hash: 32 lowercase hex chars, deterministic, length-prefixed", "[cache]") {
  const std::string h = kt::content_hash({"flash_fwd<bf16,128>", "sm_90a", "-O3"});
  REQUIRE(h.size() == 32);
  CHECK(h.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(kt::is_content_hash(h));
  CHECK(kt::content_hash({"flash_fwd<bf16,128>", "sm_90a", "-O3"}) == h);
  // Order, split and content all matter.
  CHECK(kt::content_hash({"ab", "c"}) != kt::content_hash({"a", "bc"}));
  CHECK(kt::content_hash({"ab", "c"}) != kt::content_hash({"abc"}));
  CHECK(kt::content_hash({"abc"}) != kt::content_hash({"abc", ""}));
  CHECK(kt::content_hash({}) != kt::content_hash({""}));
  CHECK(kt::content_hash({"sm_90a", "-O3"}) != kt::content_hash({"-O3", "sm_90a"}));
  CHECK(kt::content_hash({"x"}) != kt::content_hash({"y"}));
  // Binary data with embedded NULs.
  std::string a("a\0b", 3), b("a\0c", 3);
  CHECK(kt::content_hash({a}) != kt::content_hash({b}));
  // Many random inputs give distinct hashes.
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) seen.insert(kt::content_hash({random_bytes(37, i)}));
  CHECK(seen.size() == 1000);
  // Matches the documented construction, computed independently: XXH3-128 of the concatenation of
  // (8-byte little-endian length, bytes) per part, printed as the canonical big-endian digest.
  {
    std::string buf;
    for (std::string p : {std::string("flash_fwd<bf16,128>"), std::string("sm_90a"), std::string("-O3")}) {
      for (int i = 0; i < 8; ++i) buf.push_back(static_cast<char>((uint64_t(p.size()) >> (8 * i)) & 0xff));
      buf += p;
    }
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, XXH3_128bits(buf.data(), buf.size()));
    std::string expect;
    for (unsigned char byte : canon.digest) {
      expect += "0123456789abcdef"[byte >> 4];
      expect += "0123456789abcdef"[byte & 15];
    }
    CHECK(h == expect);
    CHECK(kt::xxh3_64(buf.data(), buf.size()) == XXH3_64bits(buf.data(), buf.size()));
  }
  CHECK(kt::hex64(0x0123456789abcdefULL) == "0123456789abcdef");
  CHECK_FALSE(kt::is_content_hash(std::string(32, 'G')));
  CHECK_FALSE(kt::is_content_hash(std::string(31, 'a')));
  CHECK_FALSE(kt::is_content_hash(std::string(32, 'A')));
}

TEST_CASE("CubinCache: miss, then hit with identical bytes and report", "[cache]") {
  TempDir t;
  CubinCache c((t.path / "nested" / "dir").string());  // parents are created
  CHECK(fs::is_directory(t.path / "nested" / "dir"));
  const std::string key = kt::content_hash({"kernel", "1"});
  CHECK_FALSE(c.get(key).has_value());
  CHECK(c.misses() == 1);
  CHECK(c.hits() == 0);

  CubinEntry e = sample_entry(577, 1);
  c.put(key, e);
  CHECK(fs::exists(c.dir() + "/" + key.substr(0, 2) + "/" + key + ".ktbin"));
  CHECK(c.path_for(key) == c.dir() + "/" + key.substr(0, 2) + "/" + key + ".ktbin");
  auto got = c.get(key);
  REQUIRE(got.has_value());
  check_same(*got, e);
  CHECK(c.hits() == 1);
  CHECK(c.misses() == 1);

  // Another key is still a miss; another instance on the same dir sees the entry.
  CHECK_FALSE(c.get(kt::content_hash({"kernel", "2"})).has_value());
  CubinCache c2(c.dir());
  auto got2 = c2.get(key);
  REQUIRE(got2.has_value());
  check_same(*got2, e);

  // Overwrite replaces; empty cubin and default report round-trip too.
  CubinEntry empty;
  c.put(key, empty);
  auto got3 = c.get(key);
  REQUIRE(got3.has_value());
  check_same(*got3, empty);
  CHECK(got3->report.registers == -1);
  CHECK(count_files(t.path, ".tmp.") == 0);
}

TEST_CASE("CubinCache: file format is as documented", "[cache]") {
  TempDir t;
  CubinCache c(t.path.string());
  const std::string key = kt::content_hash({"fmt"});
  CubinEntry e = sample_entry(100, 2);
  c.put(key, e);
  std::ifstream f(c.path_for(key), std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  REQUIRE(data.size() > 9 + 8 + 8 + 16);
  CHECK(data.substr(0, 9) == "KTCUBIN1\n");
  uint64_t jl = 0;
  for (int i = 0; i < 8; ++i) jl |= uint64_t(static_cast<unsigned char>(data[9 + i])) << (8 * i);
  CHECK(data[17] == '{');
  uint64_t cl = 0;
  for (int i = 0; i < 8; ++i) cl |= uint64_t(static_cast<unsigned char>(data[17 + jl + i])) << (8 * i);
  CHECK(cl == 100);
  CHECK(data.substr(17 + jl + 8, cl) == e.cubin);
  CHECK(data.size() == 17 + jl + 8 + cl + 16);
  CHECK(data.substr(data.size() - 16) == kt::hex64(kt::xxh3_64(data.data(), data.size() - 16)));
}

TEST_CASE("CubinCache: truncated, flipped, garbage and extended files are misses", "[cache]") {
  TempDir t;
  CubinCache c(t.path.string());
  const std::string key = kt::content_hash({"corrupt"});
  const CubinEntry e = sample_entry(1000, 3);
  const std::string path = c.path_for(key);
  c.put(key, e);
  std::string good;
  {
    std::ifstream f(path, std::ios::binary);
    good.assign((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }
  auto write = [&](const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  };
  // Truncated at several points, including inside each section.
  for (size_t len : {size_t(0), size_t(5), size_t(9), size_t(20), good.size() / 2, good.size() - 17, good.size() - 1}) {
    write(good.substr(0, len));
    INFO("truncated to " << len);
    CHECK_FALSE(c.get(key).has_value());
  }
  // One flipped bit anywhere (magic, lengths, JSON, cubin, checksum).
  std::mt19937 rng(7);
  std::vector<size_t> positions = {0, 9, 12, 20, good.size() - 500, good.size() - 17, good.size() - 1};
  for (int i = 0; i < 20; ++i) positions.push_back(rng() % good.size());
  for (size_t pos : positions) {
    std::string bad = good;
    bad[pos] = static_cast<char>(bad[pos] ^ 0x10);
    write(bad);
    INFO("flipped byte " << pos);
    CHECK_FALSE(c.get(key).has_value());
  }
  write(good + "x");  // trailing garbage
  CHECK_FALSE(c.get(key).has_value());
  write(random_bytes(good.size(), 9));
  CHECK_FALSE(c.get(key).has_value());
  // The pristine bytes still read back; a put repairs a corrupt file.
  write(good);
  REQUIRE(c.get(key).has_value());
  write(good.substr(0, 30));
  CHECK_FALSE(c.get(key).has_value());
  c.put(key, e);
  auto got = c.get(key);
  REQUIRE(got.has_value());
  check_same(*got, e);
}

TEST_CASE("CubinCache: concurrent puts of one key are atomic", "[cache]") {
  TempDir t;
  CubinCache c(t.path.string());
  const std::string key = kt::content_hash({"race"});
  constexpr int kWriters = 8, kPuts = 50, kReaders = 4;
  constexpr size_t kSize = 1 << 20;  // 1 MiB payloads
  // Payload of (writer, i): 8-byte id followed by bytes determined by the id; the report names it too.
  auto payload = [](int w, int i) {
    uint64_t id = uint64_t(w) * 1000 + uint64_t(i);
    std::string s = random_bytes(kSize, id);
    for (int b = 0; b < 8; ++b) s[b] = static_cast<char>((id >> (8 * b)) & 0xff);
    return s;
  };
  std::atomic<bool> done{false}, first_put_done{false};
  std::atomic<int> good_reads{0}, bad_reads{0}, late_misses{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < kReaders; ++r)
    threads.emplace_back([&] {
      while (!done.load()) {
        const bool existed = first_put_done.load();
        auto e = c.get(key);
        if (!e) {
          // Once an entry exists, rename(2) replaces it atomically: a reader never sees it missing
          // (an in-place rewrite would show up here as a truncated file, i.e. a miss).
          if (existed) ++late_misses;
          continue;
        }
        uint64_t id = 0;
        if (e->cubin.size() != kSize) {
          ++bad_reads;
          continue;
        }
        for (int b = 0; b < 8; ++b) id |= uint64_t(static_cast<unsigned char>(e->cubin[b])) << (8 * b);
        int w = static_cast<int>(id / 1000), i = static_cast<int>(id % 1000);
        bool ok = w < kWriters && i < kPuts && e->cubin == payload(w, i) &&
                  e->report.lowered_name == "w" + std::to_string(w) + "_" + std::to_string(i) &&
                  e->report.registers == w * 100 + i;
        ok ? ++good_reads : ++bad_reads;
      }
    });
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w)
    writers.emplace_back([&, w] {
      for (int i = 0; i < kPuts; ++i) {
        CubinEntry e;
        e.cubin = payload(w, i);
        e.report.lowered_name = "w" + std::to_string(w) + "_" + std::to_string(i);
        e.report.registers = w * 100 + i;
        c.put(key, e);
        first_put_done = true;
      }
    });
  for (auto& th : writers) th.join();
  done = true;
  for (auto& th : threads) th.join();
  CHECK(bad_reads.load() == 0);
  CHECK(late_misses.load() == 0);
  CHECK(good_reads.load() > 0);
  // The final entry is one of the last puts of some writer, intact.
  auto final_entry = c.get(key);
  REQUIRE(final_entry.has_value());
  CHECK(final_entry->cubin.size() == kSize);
  CHECK(final_entry->report.registers % 100 == kPuts - 1);
  // No temporary files remain; only the one entry file exists.
  CHECK(count_files(t.path, ".tmp.") == 0);
  CHECK(count_files(t.path, ".ktbin") == 1);
}

TEST_CASE("CubinCache: invalid keys throw std::invalid_argument", "[cache]") {
  TempDir t;
  CubinCache c(t.path.string());
  CubinEntry e;
  for (std::string bad :
       {std::string(""), std::string(31, 'a'), std::string(33, 'a'), std::string(32, 'A'), std::string(32, 'g'),
        std::string("../../../../../../../../etc/passwd00"), std::string(30, 'a') + "/x"}) {
    INFO("key '" << bad << "'");
    CHECK_THROWS_AS(c.get(bad), std::invalid_argument);
    CHECK_THROWS_AS(c.put(bad, e), std::invalid_argument);
  }
  CHECK(c.hits() == 0);
  CHECK(c.misses() == 0);
}

TEST_CASE("CubinCache: directory that cannot be created throws naming it", "[cache]") {
  TempDir t;
  const fs::path file = t.path / "plain_file";
  std::ofstream(file) << "x";
  const std::string bad = (file / "sub").string();
  CHECK_THROWS_WITH(CubinCache(bad), Catch::Contains(bad));
  CHECK_THROWS_AS(CubinCache(bad), std::runtime_error);
  CHECK_THROWS_AS(CubinCache(""), std::runtime_error);
}

TEST_CASE("CubinCache::default_dir honours KERNTUNE_CACHE_DIR, then HOME", "[cache]") {
  // Save and restore the environment.
  auto save = [](const char* n) -> std::optional<std::string> {
    const char* v = std::getenv(n);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  auto restore = [](const char* n, const std::optional<std::string>& v) {
    if (v) setenv(n, v->c_str(), 1);
    else unsetenv(n);
  };
  const auto old_dir = save("KERNTUNE_CACHE_DIR"), old_home = save("HOME");

  setenv("KERNTUNE_CACHE_DIR", "/tmp/kt_custom_cache", 1);
  setenv("HOME", "/home/someone", 1);
  CHECK(CubinCache::default_dir() == "/tmp/kt_custom_cache");
  setenv("KERNTUNE_CACHE_DIR", "", 1);  // empty means unset
  CHECK(CubinCache::default_dir() == "/home/someone/.cache/kerntune");
  unsetenv("KERNTUNE_CACHE_DIR");
  CHECK(CubinCache::default_dir() == "/home/someone/.cache/kerntune");
  unsetenv("HOME");
  CHECK_THROWS_AS(CubinCache::default_dir(), std::runtime_error);
  setenv("KERNTUNE_CACHE_DIR", "/x", 1);
  CHECK(CubinCache::default_dir() == "/x");

  restore("KERNTUNE_CACHE_DIR", old_dir);
  restore("HOME", old_home);
}
