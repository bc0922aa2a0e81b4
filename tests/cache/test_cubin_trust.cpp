// What the cubin cache trusts and what a cache it cannot write costs: an entry must be an ELF cubin for
// the expected SM (a forged or foreign entry is a miss and is compiled again); a read-only cache serves
// reads; a failed write is a warning, once per cause, and never fails the compile. The [nvrtc] cases
// compile real kernels (CPU only, a few seconds).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cache/cubin_cache.h"
#include "cache/cubin_image.h"
#include "cache/hash.h"
#include "generator/arch.h"
#include "generator/attention_family.h"
#include "generator/compiler.h"
#include "runtime/loaded_kernel.h"
#include "tests/support.h"
#include "unprivileged.h"

namespace fs = std::filesystem;
using namespace kt;

namespace {

using kt_test::TempDir;

void put_le(std::string& s, size_t off, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s[off + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// A minimal CUDA ELF64 image: header, padding, one 64-byte section header at offset 64. `abi` 7 puts the SM
// in e_flags bits 0-7, 8 in bits 8-15, the way NVRTC writes them.
std::string fake_cubin(int sm, int abi = 8) {
  std::string s(128, '\0');
  s[0] = '\x7f';
  s[1] = 'E';
  s[2] = 'L';
  s[3] = 'F';
  s[4] = 2;  // ELFCLASS64
  s[5] = 1;  // little-endian
  s[6] = 1;
  s[7] = abi == 8 ? 0x41 : 0x33;
  s[8] = static_cast<char>(abi);
  put_le(s, 16, 2, 2);    // ET_EXEC
  put_le(s, 18, 190, 2);  // EM_CUDA
  put_le(s, 20, 1, 4);
  put_le(s, 40, 64, 8);  // e_shoff
  put_le(s, 48, abi == 8 ? (0x06000004u | (unsigned(sm) << 8)) : (0x00000500u | unsigned(sm)), 4);
  put_le(s, 52, 64, 2);  // e_ehsize
  put_le(s, 58, 64, 2);  // e_shentsize
  put_le(s, 60, 1, 2);   // e_shnum
  return s;
}

CubinEntry entry_with(const std::string& cubin) {
  CubinEntry e;
  e.cubin = cubin;
  e.report.registers = 7;
  e.report.lowered_name = "_Z6forged";
  return e;
}

}  // namespace

TEST_CASE("cubin_image_problem: ELF64, EM_CUDA, both e_flags layouts, the SM, tables inside the image", "[cache]") {
  for (int sm : {80, 86, 89, 90}) {
    for (int abi : {7, 8}) {
      INFO("sm " << sm << " abi " << abi);
      CHECK(cubin_sm(fake_cubin(sm, abi)) == sm);
      CHECK(cubin_image_problem(fake_cubin(sm, abi), sm) == "");
      CHECK_THAT(cubin_image_problem(fake_cubin(sm, abi), sm == 90 ? 80 : 90),
                 Catch::Contains("built for sm_" + std::to_string(sm)));
    }
  }
  const std::string good = fake_cubin(90);
  auto broken = [&](size_t off, char v) {
    std::string s = good;
    s[off] = v;
    return cubin_image_problem(s, 90);
  };
  CHECK_THAT(cubin_image_problem("", 90), Catch::Contains("shorter than an ELF64 header"));
  CHECK_THAT(cubin_image_problem(good.substr(0, 63), 90), Catch::Contains("shorter than an ELF64 header"));
  CHECK_THAT(cubin_image_problem(std::string(200, 'A'), 90), Catch::Contains("no ELF magic"));
  CHECK_THAT(broken(4, 1), Catch::Contains("not a 64-bit ELF"));
  CHECK_THAT(broken(5, 2), Catch::Contains("not a little-endian"));
  CHECK_THAT(broken(18, 62), Catch::Contains("e_machine 62") && Catch::Contains("EM_CUDA (190)"));  // x86-64
  CHECK_THAT(broken(8, 9), Catch::Contains("unknown CUDA ELF ABI version 9"));
  CHECK_THAT(cubin_image_problem(good.substr(0, 100), 90), Catch::Contains("section header table lies outside"));
  std::string far = good;
  put_le(far, 40, ~uint64_t(0) - 8, 8);  // an offset that would overflow a naive bounds check
  CHECK_THAT(cubin_image_problem(far, 90), Catch::Contains("section header table lies outside"));
  std::string many = good;
  put_le(many, 60, 0xffff, 2);
  CHECK_THAT(cubin_image_problem(many, 90), Catch::Contains("section header table lies outside"));
  CHECK(cubin_sm(std::string(200, 'A')) == -1);
}

TEST_CASE("CubinCache::get with an expected SM rejects a forged or foreign entry as a miss", "[cache]") {
  TempDir t;
  CubinCache c(t.path.string());
  const std::string key = content_hash({"forged"});
  // A well-formed entry (magic, lengths, checksum all right) whose "cubin" is not an ELF image: what a
  // forger with write access to a shared cache can produce, since the checksum is unkeyed.
  c.put(key, entry_with(std::string(4096, '\x90')));
  CHECK(c.get(key).has_value());  // no SM given: the format alone is checked
  std::string why;
  CHECK_FALSE(c.get(key, 90, &why).has_value());
  CHECK_THAT(why, Catch::Contains(c.path_for(key)) && Catch::Contains("no ELF magic"));
  CHECK(c.rejected() == 1);
  CHECK(c.hits() == 1);
  CHECK(c.misses() == 1);

  c.put(key, entry_with(fake_cubin(80)));  // a real-looking cubin for another GPU
  why.clear();
  CHECK_FALSE(c.get(key, 90, &why).has_value());
  CHECK_THAT(why, Catch::Contains("built for sm_80, expected sm_90"));
  CHECK(c.rejected() == 2);

  c.put(key, entry_with(fake_cubin(90)));
  why.clear();
  const auto hit = c.get(key, 90, &why);
  REQUIRE(hit.has_value());
  CHECK(hit->cubin == fake_cubin(90));
  CHECK(why == "");
  CHECK(c.rejected() == 2);
}

TEST_CASE("CubinCache::put failures are CacheWriteError with the cause; a read-only cache serves reads", "[cache]") {
  TempDir t;
  CubinCache c(t.path.string());
  CHECK(c.writable());
  const std::string key = content_hash({"k1"});
  // A file where the two-character prefix folder should be.
  std::ofstream((t.path / key.substr(0, 2)).string()) << "x";
  try {
    c.put(key, entry_with(fake_cubin(90)));
    FAIL("put succeeded");
  } catch (const CacheWriteError& e) {
    CHECK(e.cause() == std::strerror(ENOTDIR));
    CHECK_THAT(e.what(), Catch::Contains((t.path / key.substr(0, 2)).string()));
  }
  // A directory where the entry should be.
  const std::string key2 = content_hash({"k2"});
  fs::create_directories(c.path_for(key2));
  fs::create_directories(fs::path(c.path_for(key2)) / "inside");  // not empty: rename(2) cannot replace it
  try {
    c.put(key2, entry_with(fake_cubin(90)));
    FAIL("put succeeded");
  } catch (const CacheWriteError& e) {
    CHECK_FALSE(e.cause().empty());
    CHECK_THAT(e.what(), Catch::Contains(c.path_for(key2)));
  }
  CHECK_FALSE(c.get(key2, 90).has_value());
  for (auto& p : fs::recursive_directory_iterator(t.path))
    CHECK(p.path().filename().string().find(".tmp.") == std::string::npos);  // no temporary left

  // A pre-populated cache in a folder the user cannot write (a container image, another user's cache).
  const fs::path ro = t.path / "ro";
  const std::string key3 = content_hash({"k3"});
  {
    CubinCache w(ro.string());
    w.put(key3, entry_with(fake_cubin(90)));
  }
  for (auto& p : fs::recursive_directory_iterator(ro))
    fs::permissions(p.path(), p.is_directory() ? fs::perms(0555) : fs::perms(0444));
  fs::permissions(ro, fs::perms(0555));
  if (const std::string why = kt_test::unprivileged_can_reach(ro.string()); !why.empty()) {
    WARN("skipped: " << why << " (set TMPDIR to a world-searchable folder)");
    return;
  }
  const std::string result = kt_test::run_unprivileged([&]() -> std::string {
    CubinCache r(ro.string());
    if (r.writable()) return "a read-only cache reports writable()";
    const auto e = r.get(key3, 90);
    if (!e || e->cubin != fake_cubin(90)) return "the read-only cache does not serve its entry";
    try {
      r.put(content_hash({"k4"}), entry_with(fake_cubin(90)));
      return "put on a read-only cache succeeded";
    } catch (const CacheWriteError& ex) {
      if (std::string(ex.what()).find(ro.string()) == std::string::npos) return std::string("put: ") + ex.what();
    }
    return "";
  });
  CHECK(result == "");
}

TEST_CASE("Compiler: a cache write failure is one warning per cause and the compile stands", "[cache][nvrtc]") {
  TempDir t;
  CubinCache cache(t.path.string());
  Compiler compiler(&cache, 1);
  std::vector<std::string> warnings;
  compiler.set_warning_handler([&](const std::string& w) { warnings.push_back(w); });
  attn::Problem p;
  p.head_dim = 64;
  const ArchId arch = parse_arch("sm_90a");
  std::vector<KernelSource> sources;
  for (const auto& c : attn::valid_configs(p, arch)) {
    sources.push_back(attn::kernel_source(p, c, arch));
    if (sources.size() == 2) break;
  }
  REQUIRE(sources.size() == 2);
  // Block every prefix folder the two entries need with a file.
  for (const auto& s : sources) std::ofstream((t.path / compiler.cache_key(s).substr(0, 2)).string()) << "x";
  const auto results = compiler.compile_all(sources);
  for (const auto& r : results) {
    INFO(r.error);
    CHECK(r.ok);
    CHECK(cubin_image_problem(r.cubin, 90) == "");
    CHECK_THAT(r.cache_warning, Catch::Contains("Not a directory"));
  }
  CHECK(compiler.cache_write_failures() == 2);
  REQUIRE(warnings.size() == 1);  // one cause, one warning
  CHECK_THAT(warnings[0], Catch::Contains("Not a directory") && Catch::Contains("the compiled kernel is used"));

  // A forged entry (correct checksum, not a cubin) under the first kernel's key: not a hit, compiled
  // again, and the entry is replaced by the real cubin.
  fs::remove(t.path / compiler.cache_key(sources[0]).substr(0, 2));
  cache.put(compiler.cache_key(sources[0]), entry_with(std::string(8192, '\xcc')));
  const auto again = compiler.compile(sources[0]);
  CHECK(again.ok);
  CHECK_FALSE(again.cache_hit);
  CHECK(again.cubin == results[0].cubin);
  REQUIRE(warnings.size() == 2);
  CHECK_THAT(warnings[1], Catch::Contains("rejected") && Catch::Contains("no ELF magic"));
  const auto hit = compiler.compile(sources[0]);
  CHECK(hit.cache_hit);
  CHECK(hit.cubin == results[0].cubin);
}

TEST_CASE("NVRTC cubins record the SM they were built for the way cubin_image.h reads it", "[cache][nvrtc]") {
  Compiler compiler(nullptr, 1);
  attn::Problem p;
  p.head_dim = 64;
  for (const std::string& name : supported_archs()) {
    const ArchId arch = parse_arch(name);
    const auto configs = attn::valid_configs(p, arch);
    REQUIRE_FALSE(configs.empty());
    const auto r = compiler.compile(attn::kernel_source(p, configs.front(), arch));
    INFO(name << ": " << r.error);
    REQUIRE(r.ok);
    CHECK(cubin_sm(r.cubin) == arch.sm);
    CHECK(cubin_image_problem(r.cubin, arch.sm) == "");
  }
}

TEST_CASE("LoadedKernel refuses an image that is not a CUDA ELF before the driver reads it", "[cache][runtime]") {
  // The driver reads cuModuleLoadData's image with no length: a short or forged blob from a database must
  // not reach it. No context is needed: the check comes first (so this runs without a GPU too).
  for (const std::string& bad : {std::string(4096, '\x90'), fake_cubin(90).substr(0, 100),
                                 std::string("\x7f"
                                             "ELF")}) {
    try {
      LoadedKernel k(bad, "_Z6kernel", 0);
      FAIL("a bad image was accepted");
    } catch (const cuda::CudaError& e) {
      CHECK(e.code == CUDA_ERROR_INVALID_IMAGE);
      CHECK_THAT(e.what(), Catch::Contains("not a cubin"));
    }
  }
}
