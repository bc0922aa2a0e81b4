// [gpu] correctness of attention_decode variants against the float64 reference, launched directly through the
// generator (sources, launch dims, workspace) and the cuda/ layer. Outputs and LSE are poisoned with NaN before every
// launch; cache positions past each sequence's length (and pool pages the block table does not name) hold NaN, so a
// read the kernel must not make shows up in the result. Every launch runs twice and must give the same bits, and the
// split counters must be zero again afterwards.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "cuda/driver.h"
#include "generator/arch.h"
#include "generator/decode_family.h"
#include "reference/attention_decode_ref.h"
#include "reference/attention_ref.h"
#include "reference/dtype_convert.h"
#include "runtime/decode.h"
#include "runtime/loaded_kernel.h"

using namespace kt;
using namespace kt::decode;

namespace {

/// Context, stream, arch and a compiler with the default cubin cache, shared by the [gpu] tests of this file.
struct GpuEnv {
  cuda::Context ctx{0};
  cuda::Stream stream;
  ArchId arch{};
  CubinCache cache{CubinCache::default_dir()};
  Compiler compiler{&cache};
  GpuEnv() {
    const auto d = cuda::device_info(0);
    arch = ArchId{d.cc_major * 10 + d.cc_minor, d.cc_major == 9};
  }
  static GpuEnv& get() {
    static GpuEnv env;
    return env;
  }
};

struct Variant {
  Config config;
  std::shared_ptr<LoadedKernel> kernel;
  std::string name;
};

/// Compiles (in parallel, one binary per name expression) and loads `configs` for the kernel class of p.
std::vector<Variant> load_variants(const Problem& p, const std::vector<Config>& configs) {
  auto& env = GpuEnv::get();
  std::vector<KernelSource> src;
  std::map<std::string, size_t> index;  // name expression -> position in src
  for (const auto& c : configs) {
    auto s = kernel_source(p, c, env.arch);
    if (index.emplace(s.name_expression, src.size()).second) src.push_back(s);
  }
  const auto res = env.compiler.compile_all(src);
  std::vector<std::shared_ptr<LoadedKernel>> kernels;
  for (size_t i = 0; i < res.size(); ++i) {
    INFO(res[i].kernel.variant_name << "\n" << res[i].error);
    REQUIRE(res[i].ok);
    kernels.push_back(std::make_shared<LoadedKernel>(res[i].cubin, res[i].report.lowered_name,
                                                     unsigned(res[i].kernel.dynamic_smem_bytes)));
  }
  std::vector<Variant> out;
  for (const auto& c : configs)
    out.push_back({c, kernels[index.at(name_expression(p, c))], variant_name(p, c, env.arch)});
  return out;
}

/// One test problem: the kernel problem (kv_len = the grid's sizing length), the sequences' lengths (may exceed
/// kv_len, up to capacity), the cache capacity per sequence, and a softmax scale (0: 1/sqrt(D)).
struct Case {
  Problem p;
  std::vector<int> lens;
  int capacity = 0;
  float scale = 0.f;
  uint64_t seed = 1;
  int bad_entry = -1;  ///< paged: this entry of the flattened block table points past num_pages on the device
};

Problem make(DType dt, int b, int q_len, int hq, int hkv, int d, int kv_len, KvLayout layout, int page_size,
             bool causal = true) {
  Problem p;
  p.dtype = dt;
  p.batch = b;
  p.q_len = q_len;
  p.num_heads = hq;
  p.num_kv_heads = hkv;
  p.head_dim = d;
  p.kv_len = kv_len;
  p.kv_layout = layout;
  p.page_size = layout == KvLayout::paged ? page_size : 0;
  p.causal = causal;
  return p;
}

/// Host data of a case in the device layouts, its float views for the reference, and the reference rows.
struct HostCase {
  Case c;
  int max_pages = 0, num_pages = 0;
  std::vector<uint16_t> q, k, v;         // q [B, q_len, Hq, D]; k/v [B, capacity, Hkv, D] or [num_pages, ps, Hkv, D]
  std::vector<int> table;                // [B, max_pages] (paged), as the reference reads it
  std::vector<int> device_table;         // as the kernel reads it (differs at bad_entry)
  std::vector<std::array<int, 3>> rows;  // reference rows (b, i, h)
  std::vector<double> ref_out;           // [rows, D]
  std::vector<double> ref_lse;           // [rows]
};

constexpr uint16_t kNaN16 = 0xFFFF;  // NaN in fp16 and bf16

/// A pool page no block-table entry names (the pool has 3 spare pages).
int perm_spare(const HostCase& h) {
  std::vector<bool> used(size_t(h.num_pages), false);
  for (int e : h.table) used[size_t(e)] = true;
  for (int i = 0; i < h.num_pages; ++i)
    if (!used[size_t(i)]) return i;
  return -1;
}

HostCase make_host(const Case& c, size_t max_rows) {
  HostCase h;
  h.c = c;
  const Problem& p = c.p;
  const int D = p.head_dim;
  const size_t row = size_t(p.num_kv_heads) * D;
  std::mt19937_64 rng(c.seed);
  h.q.resize(size_t(p.batch) * p.q_len * p.num_heads * D);
  fill_random(p.dtype, h.q.data(), h.q.size(), c.seed);
  // Contiguous: [B, capacity] token slots; paged: a pool of B * max_pages pages + 3 unused, shuffled.
  const bool paged = p.kv_layout == KvLayout::paged;
  size_t slots = size_t(p.batch) * c.capacity;
  if (paged) {
    h.max_pages = (c.capacity + p.page_size - 1) / p.page_size;
    h.num_pages = p.batch * h.max_pages + 3;
    std::vector<int> perm(size_t(h.num_pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    h.table.assign(perm.begin(), perm.begin() + size_t(p.batch) * h.max_pages);
    slots = size_t(h.num_pages) * p.page_size;
  }
  h.k.assign(slots * row, kNaN16);
  h.v.assign(slots * row, kNaN16);
  std::vector<uint16_t> tok(row);
  for (int b = 0; b < p.batch; ++b)
    for (int t = 0; t < c.lens[b]; ++t) {
      const size_t slot =
          paged ? size_t(h.table[size_t(b) * h.max_pages + t / p.page_size]) * p.page_size + t % p.page_size
                : size_t(b) * c.capacity + t;
      fill_random(p.dtype, tok.data(), row, rng());
      std::copy(tok.begin(), tok.end(), h.k.begin() + slot * row);
      fill_random(p.dtype, tok.data(), row, rng());
      std::copy(tok.begin(), tok.end(), h.v.begin() + slot * row);
    }
  // A block-table entry past num_pages reads as zeros: the reference reads a spare page of zeros there instead.
  h.device_table = h.table;
  if (c.bad_entry >= 0) {
    const int spare = perm_spare(h);
    std::fill_n(h.k.begin() + size_t(spare) * p.page_size * row, size_t(p.page_size) * row, uint16_t(0));
    std::fill_n(h.v.begin() + size_t(spare) * p.page_size * row, size_t(p.page_size) * row, uint16_t(0));
    h.table[size_t(c.bad_entry)] = spare;
    h.device_table[size_t(c.bad_entry)] = h.num_pages + 7;
  }
  // Reference rows: all of them, or max_rows drawn at random.
  for (int b = 0; b < p.batch; ++b)
    for (int i = 0; i < p.q_len; ++i)
      for (int hh = 0; hh < p.num_heads; ++hh) h.rows.push_back({b, i, hh});
  if (h.rows.size() > max_rows) {
    std::shuffle(h.rows.begin(), h.rows.end(), rng);
    h.rows.resize(max_rows);
  }
  auto to_f = [&](const std::vector<uint16_t>& bits) {
    std::vector<float> f(bits.size());
    for (size_t e = 0; e < bits.size(); ++e) f[e] = dtype_to_float(p.dtype, bits[e]);
    return f;
  };
  const auto qf = to_f(h.q), kf = to_f(h.k), vf = to_f(h.v);
  const double scale = c.scale > 0.f ? c.scale : 1.0 / std::sqrt(double(D));
  const ref::DecodeShape shape{p.batch, p.q_len, p.num_heads, p.num_kv_heads, D, p.causal, scale};
  const ref::KvCacheView view{kf.data(),   vf.data(),   paged,       c.capacity,
                              p.page_size, h.num_pages, h.max_pages, paged ? h.table.data() : nullptr};
  h.ref_out.resize(h.rows.size() * D);
  for (size_t n = 0; n < h.rows.size(); ++n)
    h.ref_lse.push_back(ref::attention_decode_row(shape, qf.data(), view, c.lens.data(), h.rows[n][0], h.rows[n][1],
                                                  h.rows[n][2], h.ref_out.data() + n * D));
  return h;
}

double tolerance(DType dt) { return dt == DType::f16 ? 2e-3 : 1e-2; }  // as the prefill family's

template <class T>
T* as(const cuda::DeviceBuffer& b) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(b.ptr()));
}

/// The device copy of a case: inputs, poisoned outputs, and the kernel arguments without a workspace.
struct DeviceCase {
  cuda::DeviceBuffer q, k, v, o, lse, lens, table;
  DecodeParams base{};
  explicit DeviceCase(const HostCase& h)
      : q(h.q.size() * 2),
        k(h.k.size() * 2),
        v(h.v.size() * 2),
        o(h.q.size() * 2),
        lse(h.q.size() / h.c.p.head_dim * 4),
        lens(h.c.lens.size() * 4),
        table(std::max<size_t>(1, h.device_table.size()) * 4) {
    const Problem& p = h.c.p;
    q.upload(h.q.data(), h.q.size() * 2);
    k.upload(h.k.data(), h.k.size() * 2);
    v.upload(h.v.data(), h.v.size() * 2);
    lens.upload(h.c.lens.data(), h.c.lens.size() * 4);
    if (!h.device_table.empty()) table.upload(h.device_table.data(), h.device_table.size() * 4);
    base = p.kv_layout == KvLayout::paged
               ? paged_params(p, as<void>(q), as<void>(k), as<void>(v), as<void>(o), as<float>(lse), as<int>(lens),
                              as<int>(table), h.num_pages, h.max_pages, h.c.scale)
               : contiguous_params(p, as<void>(q), as<void>(k), as<void>(v), as<void>(o), as<float>(lse), as<int>(lens),
                                   h.c.capacity, h.c.scale);
  }
};

/// Launches variant v on the case (outputs poisoned first) through the runtime's launch path (decode::launch: the
/// cooperative launch where the grid is resident at once) and downloads o and lse.
void run_once(const HostCase& h, DeviceCase& dev, const Variant& v, cuda::DeviceBuffer& ws, cuda::DeviceBuffer& cnt,
              std::vector<uint16_t>& out, std::vector<float>& lse) {
  auto& env = GpuEnv::get();
  const Problem& p = h.c.p;
  dev.o.fill_u16(kNaN16);
  dev.lse.fill_u32(0x7FC00000u);  // quiet NaN
  launch(*v.kernel, p, v.config, dev.base, uses_workspace(p, v.config) ? as<float>(ws) : nullptr,
         uses_workspace(p, v.config) ? as<unsigned>(cnt) : nullptr, env.stream.get());
  env.stream.synchronize();
  out.resize(h.q.size());
  lse.resize(h.q.size() / p.head_dim);
  dev.o.download(out.data(), out.size() * 2);
  dev.lse.download(lse.data(), lse.size() * 4);
}

/// Runs every variant on the case twice and checks: every output and LSE element written and finite (LSE may be
/// -inf), the reference rows within tolerance (rows without a visible key exactly 0 with LSE -inf), the same bits on
/// both runs, and the counters zero afterwards (a cooperative launch's generation words advanced by at most 2, and
/// by 2 for at least one group). Returns the variants that launched cooperatively.
int check_case(const HostCase& h, const std::vector<Variant>& variants) {
  int cooperative = 0;
  const Problem& p = h.c.p;
  const int D = p.head_dim;
  DeviceCase dev(h);
  for (const auto& v : variants) {
    cuda::DeviceBuffer ws(std::max<size_t>(16, workspace_bytes(p, v.config)));
    cuda::DeviceBuffer cnt(std::max<size_t>(4, counter_bytes(p, v.config)));
    cnt.fill_u32(0);
    std::vector<uint16_t> out, out2;
    std::vector<float> lse, lse2;
    run_once(h, dev, v, ws, cnt, out, lse);
    run_once(h, dev, v, ws, cnt, out2, lse2);
    INFO(p.key() << " lens[0] " << h.c.lens[0] << " with " << v.name);
    long long bad_out = 0, bad_lse = 0;
    for (uint16_t bits : out) bad_out += !std::isfinite(dtype_to_float(p.dtype, bits));
    for (float x : lse) bad_lse += std::isnan(x) || x == INFINITY;
    CHECK(bad_out == 0);
    CHECK(bad_lse == 0);
    std::vector<float> got(h.rows.size() * D);
    double lse_err = 0;
    long long empty_rows_wrong = 0;
    for (size_t n = 0; n < h.rows.size(); ++n) {
      const auto& r = h.rows[n];
      const size_t base = ((size_t(r[0]) * p.q_len + r[1]) * p.num_heads + r[2]) * D;
      for (int d = 0; d < D; ++d) got[n * D + d] = dtype_to_float(p.dtype, out[base + d]);
      const float l = lse[(size_t(r[0]) * p.num_heads + r[2]) * p.q_len + r[1]];
      if (std::isinf(h.ref_lse[n])) {
        empty_rows_wrong += !(std::isinf(l) && l < 0);
        for (int d = 0; d < D; ++d) empty_rows_wrong += got[n * D + d] != 0.f;
      } else {
        lse_err = std::max(lse_err, std::isfinite(l) ? std::fabs(double(l) - h.ref_lse[n]) : INFINITY);
      }
    }
    const auto cmp = ref::compare(got.data(), h.ref_out.data(), got.size());
    CHECK(cmp.nan_count == 0);
    CHECK(cmp.rel_l2 <= tolerance(p.dtype));
    CHECK(lse_err <= 1e-3);
    CHECK(empty_rows_wrong == 0);
    // Deterministic: the same bits on every run, whichever split block arrives last.
    CHECK(std::memcmp(out.data(), out2.data(), out.size() * 2) == 0);
    CHECK(std::memcmp(lse.data(), lse2.data(), lse.size() * 4) == 0);
    if (uses_workspace(p, v.config)) {
      std::vector<unsigned> counters(counter_bytes(p, v.config) / 4);
      cnt.download(counters.data(), counters.size() * 4);
      const size_t groups = v.config.cooperative ? counters.size() / 2 : counters.size();
      CHECK(std::all_of(counters.begin(), counters.begin() + groups, [](unsigned x) { return x == 0; }));
      if (cooperative_launch(*v.kernel, p, v.config)) {
        ++cooperative;
        CHECK(std::all_of(counters.begin() + groups, counters.end(), [](unsigned x) { return x <= 2; }));
        CHECK(std::any_of(counters.begin() + groups, counters.end(), [](unsigned x) { return x == 2; }));
      }
    }
  }
  return cooperative;
}

/// Whether environment variable `name` is "1".
bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && std::string(v) == "1";
}

/// Every config of the space valid for the class on this GPU (one binary per (tile_m, tile_n, warps, stages)), each
/// without split and with the finest split (kv_chunk = tile_n) and a coarser one (4 tiles), each split also with the
/// cooperative merge (Config::cooperative; it runs so where the case's grid fits the GPU at once); on sm_90, for the
/// shapes of 3 stages (every tile_m, tile_n and warp count, so 1, 2, 4 and 8 key groups), also a cluster of 2 and of 16
/// over the whole length, and for those of 4 warps a cluster of 4 and clusters of 4 finest chunks that merge through
/// the workspace. Each shape with mma.sync and, where valid (tile_m 64, sm_90a), with wgmma. KT_DECODE_CLUSTERS_ONLY=1
/// keeps the cluster configs alone (a quick check of the cluster merge), KT_DECODE_WGMMA_ONLY=1 the wgmma ones.
std::vector<Config> every_variant(const Problem& cls, ArchId arch) {
  const bool clusters_only = env_flag("KT_DECODE_CLUSTERS_ONLY"), wgmma_only = env_flag("KT_DECODE_WGMMA_ONLY");
  std::vector<Config> out;
  std::set<std::tuple<int, int, int, int, int>> seen;
  for (const auto& c : config_space()) {
    if (invalid_reason(cls.dtype, cls.head_dim, cls.kv_layout, c, arch) != nullptr) continue;
    if (wgmma_only && !c.wgmma) continue;
    if (!seen.insert({c.tile_m, c.tile_n, c.warps, c.stages, c.wgmma}).second) continue;
    for (const auto& [chunk, cluster] : {std::pair{0, 1}, std::pair{c.tile_n, 1}, std::pair{4 * c.tile_n, 1},
                                         std::pair{0, 2}, std::pair{0, 4}, std::pair{0, 16}, std::pair{c.tile_n, 4}}) {
      if (cluster > 1 && c.stages != 3) continue;
      if ((cluster == 4 && c.warps != 4) || (clusters_only && cluster == 1)) continue;
      Config x = c;
      x.kv_chunk = chunk;
      x.cluster = cluster;
      if (invalid_reason(cls.dtype, cls.head_dim, cls.kv_layout, x, arch) != nullptr) continue;
      out.push_back(x);
      x.cooperative = 1;  // the same split with the cooperative merge (where the case's grid is resident at once)
      if (chunk != 0 && cluster == 1 && !clusters_only) out.push_back(x);
    }
  }
  return out;
}

/// The edge cases for one kernel class (paged: page_size tokens per page, compiled into the kernel): kv lengths
/// 1, 17, 4097, a page boundary crossed by one token (17 over pages of 16, 65 over 64, 257 over 256), ragged lengths
/// with 0 and the maximum, shuffled block tables, q_len 1 / 2 / 5 / 16, GQA ratios 1 / 4 / 7 / 8 / 32, a sequence
/// longer than the grid's sizing length, causal and not.
std::vector<Case> edge_cases(DType dt, int d, KvLayout layout, int page_size) {
  const KvLayout L = layout;
  const int P = page_size;
  std::vector<Case> cs;
  cs.push_back({make(dt, 3, 1, 8, 8, d, 17, L, P), {1, 17, 0}, 17});
  cs.push_back({make(dt, 2, 5, 28, 4, d, 4097, L, P), {4097, 65}, 4097});
  cs.push_back({make(dt, 4, 16, 32, 1, d, 300, L, P), {0, 33, 300, 129}, 320});
  cs.push_back({make(dt, 2, 2, 32, 4, d, 512, L, P, false), {257, 1000}, 1024});  // 1000 > kv_len 512
  cs.push_back({make(dt, 5, 1, 16, 4, d, 2048, L, P), {2048, 1, 17, 0, 129}, 2048});
  for (size_t i = 0; i < cs.size(); ++i) cs[i].seed = 100 + i;
  return cs;
}

}  // namespace

// Paged: the page sizes 16, 64 and 256 take every load path of every tile_n (a block-table entry per row, pieces of
// one page, a tile inside one page); 32 and 128 run in the broad sweep.
TEST_CASE("attention_decode: every valid variant matches the float64 reference on the edge cases",
          "[gpu][attention_decode]") {
  auto& env = GpuEnv::get();
  for (DType dt : {DType::f16, DType::bf16})
    for (int d : {64, 128})
      for (KvLayout layout : {KvLayout::contiguous, KvLayout::paged})
        for (int page : {16, 64, 256}) {
          if (layout == KvLayout::contiguous && page != 16) continue;
          const Problem cls = make(dt, 1, 1, 8, 8, d, 17, layout, page);
          const auto configs = every_variant(cls, env.arch);
          REQUIRE(configs.size() >= 20);  // also with KT_DECODE_CLUSTERS_ONLY or KT_DECODE_WGMMA_ONLY
          const auto variants = load_variants(cls, configs);
          int cooperative = 0;
          for (const Case& c : edge_cases(dt, d, layout, page))
            cooperative += check_case(make_host(c, 1 << 12), variants);
          if (!env_flag("KT_DECODE_CLUSTERS_ONLY")) CHECK(cooperative > 0);  // the cooperative merge did run
        }
}

// The cooperative merge (every split block merges its share once all have stored their partials) with many splits
// per row block: 256 (a lane merges 8 splits before the butterfly), 128, 32, 16 and 8, ragged lengths (a full
// sequence beside one of 1 token, 0 tokens, or a split's length plus one), one to four row blocks, mma.sync and
// wgmma, contiguous and paged.
TEST_CASE("attention_decode: the cooperative merge over up to 256 splits", "[gpu][attention_decode]") {
  auto& env = GpuEnv::get();
  struct Item {
    int q_len, hq, hkv, d;
    std::vector<int> lens;
    Config c;
  };
  const std::vector<Item> items = {
      {1, 8, 1, 128, {8192, 1}, Config{16, 32, 2, 2, 32, 1, 0, 1}},         // 256 splits
      {1, 8, 1, 64, {8192, 0}, Config{16, 64, 4, 3, 64, 1, 0, 1}},          // 128 splits
      {1, 28, 4, 128, {8192, 257}, Config{16, 64, 4, 3, 256, 1, 0, 1}},     // 32 splits
      {4, 28, 4, 128, {8000, 8192}, Config{32, 64, 8, 3, 512, 1, 0, 1}},    // 16 splits, 28 packed rows
      {8, 28, 4, 128, {8192, 1025}, Config{64, 128, 8, 3, 1024, 1, 1, 1}},  // 8 splits, wgmma, 56 packed rows
  };
  int idx = 0;
  for (const Item& it : items)
    for (KvLayout layout : {KvLayout::contiguous, KvLayout::paged}) {
      Case c{make(DType::bf16, 2, it.q_len, it.hq, it.hkv, it.d, 8192, layout, 64), it.lens, 8192};
      c.seed = 900 + idx++;
      if (it.c.wgmma && !(env.arch.sm >= 90 && env.arch.arch_specific)) continue;  // wgmma: sm_90a only
      REQUIRE(invalid_reason(c.p.dtype, c.p.head_dim, c.p.kv_layout, it.c, env.arch) == nullptr);
      const auto variants = load_variants(c.p, {it.c});
      INFO(variants[0].name);
      REQUIRE(cooperative_launch(*variants[0].kernel, c.p, it.c));
      CHECK(check_case(make_host(c, 1 << 10), variants) == 1);
    }
}

TEST_CASE("attention_decode: broad problem sweep with a few variants", "[gpu][attention_decode]") {
  auto& env = GpuEnv::get();
  const int ratios[][2] = {{4, 4}, {16, 4}, {28, 4}, {32, 4}, {32, 1}};  // Hq/Hkv = 1, 4, 7, 8, 32
  std::map<std::string, std::vector<Variant>> cache;
  int idx = 0;
  for (DType dt : {DType::f16, DType::bf16})
    for (KvLayout layout : {KvLayout::contiguous, KvLayout::paged})
      for (int kv : {1, 64, 1000, 4096, 8191})
        for (const auto& r : ratios) {
          const int d = idx % 3 == 0 ? 64 : 128;
          const int b = 1 + (idx * 7) % 17;
          const int q_len = idx % 4 == 0 ? 4 : idx % 4 == 1 ? 1 : idx % 4 == 2 ? 8 : 1;
          const int page = 16 << (idx % 5);
          ++idx;
          Case c{make(dt, b, q_len, r[0], r[1], d, kv, layout, page, idx % 5 != 0), {}, kv};
          std::mt19937 rng(idx);
          for (int s = 0; s < b; ++s) c.lens.push_back(s == 0 ? kv : int(rng() % (kv + 1)));
          c.seed = 500 + idx;
          const std::string key = variant_name(c.p, Config{0, 0, 0, 0, 0}, env.arch);
          auto it = cache.find(key);
          if (it == cache.end()) {
            std::vector<Config> cs = {default_config(env.arch, c.p)};
            for (const Config& x :
                 {Config{16, 64, 4, 4, 256}, Config{32, 128, 8, 3, 1024}, Config{64, 128, 8, 3, 1024, 1, 1}})
              if (invalid_reason(c.p.dtype, c.p.head_dim, c.p.kv_layout, x, env.arch) == nullptr) cs.push_back(x);
            it = cache.emplace(key, load_variants(c.p, cs)).first;
          }
          check_case(make_host(c, 512), it->second);
        }
}

TEST_CASE("attention_decode: a block-table entry past num_pages reads as zeros, never out of bounds",
          "[gpu][attention_decode]") {
  auto& env = GpuEnv::get();
  for (int d : {64, 128}) {
    const Problem p = make(DType::bf16, 2, 1, 8, 2, d, 100, KvLayout::paged, 16);
    Case c{p, {100, 70}, 112, 0.f, 91};
    c.bad_entry = 7 + 2;  // sequence 1, its third page (tokens 32..47)
    const HostCase h = make_host(c, 1 << 12);
    std::vector<Config> cs = {default_config(env.arch, p), Config{16, 32, 2, 2, 32}, Config{16, 64, 4, 3, 0}};
    check_case(h, load_variants(p, cs));
  }
}

TEST_CASE("attention_decode: strided views (Q inside a fused QKV buffer, K and V interleaved in one cache)",
          "[gpu][attention_decode]") {
  auto& env = GpuEnv::get();
  for (DType dt : {DType::f16, DType::bf16}) {
    const Problem p = make(dt, 3, 4, 28, 4, 128, 700, KvLayout::contiguous, 0);
    Case c{p, {700, 3, 455}, 700, 0.07f, 77};
    const HostCase h = make_host(c, 1 << 12);
    const int D = p.head_dim, H = p.num_heads + 2 * p.num_kv_heads, hkv = p.num_kv_heads;
    // Q rows inside a [B, q_len, Hq + 2 Hkv, D] buffer; the cache as [B, capacity, 2, Hkv, D] (K then V per token).
    std::vector<uint16_t> fused(size_t(p.batch) * p.q_len * H * D, kNaN16);
    for (size_t t = 0; t < size_t(p.batch) * p.q_len; ++t)
      std::copy_n(h.q.begin() + t * p.num_heads * D, p.num_heads * D, fused.begin() + t * H * D);
    std::vector<uint16_t> kv(h.k.size() * 2);
    for (size_t t = 0; t < h.k.size() / (hkv * D); ++t) {
      std::copy_n(h.k.begin() + t * hkv * D, hkv * D, kv.begin() + 2 * t * hkv * D);
      std::copy_n(h.v.begin() + t * hkv * D, hkv * D, kv.begin() + (2 * t + 1) * hkv * D);
    }
    DeviceCase dev(h);
    cuda::DeviceBuffer dq(fused.size() * 2), dkv(kv.size() * 2);
    dq.upload(fused.data(), fused.size() * 2);
    dkv.upload(kv.data(), kv.size() * 2);
    dev.base.q = as<void>(dq);
    dev.base.q_row_stride = (long long)H * D;
    dev.base.q_batch_stride = dev.base.q_row_stride * p.q_len;
    dev.base.k = as<void>(dkv);
    dev.base.v = as<uint16_t>(dkv) + hkv * D;
    dev.base.k_row_stride = dev.base.v_row_stride = 2LL * hkv * D;
    dev.base.k_batch_stride = dev.base.v_batch_stride = dev.base.k_row_stride * c.capacity;
    std::vector<Config> cs = {default_config(env.arch, p)};
    for (const Config& x : {Config{32, 64, 2, 3, 128}, Config{16, 128, 8, 2, 0}})
      if (invalid_reason(p.dtype, p.head_dim, p.kv_layout, x, env.arch) == nullptr) cs.push_back(x);
    const auto variants = load_variants(p, cs);
    // check_case launches on DeviceCase's own tensors; these views go through run_once and the row comparison.
    for (const auto& v : variants) {
      cuda::DeviceBuffer ws(std::max<size_t>(16, workspace_bytes(p, v.config)));
      cuda::DeviceBuffer cnt(std::max<size_t>(4, counter_bytes(p, v.config)));
      cnt.fill_u32(0);
      std::vector<uint16_t> out;
      std::vector<float> lse;
      run_once(h, dev, v, ws, cnt, out, lse);
      std::vector<float> got(h.rows.size() * D);
      for (size_t n = 0; n < h.rows.size(); ++n) {
        const auto& r = h.rows[n];
        const size_t base = ((size_t(r[0]) * p.q_len + r[1]) * p.num_heads + r[2]) * D;
        for (int d = 0; d < D; ++d) got[n * D + d] = dtype_to_float(p.dtype, out[base + d]);
      }
      const auto cmp = ref::compare(got.data(), h.ref_out.data(), got.size());
      INFO(v.name);
      CHECK(cmp.nan_count == 0);
      CHECK(cmp.rel_l2 <= tolerance(p.dtype));
    }
  }
}
