// [gpu] qkv_proj variants against the float64 reference (dequantize exactly the packed weight, GEMM, bias,
// RoPE), outputs poisoned with NaN before every launch.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

#include "cuda/driver.h"
#include "generator/arch.h"
#include "generator/qkv_family.h"
#include "reference/dtype_convert.h"
#include "reference/qkv_ref.h"
#include "runtime/qkv.h"
#include "tests/support.h"
#include "tuner/qkv_harness.h"

using namespace kt;
using namespace kt::qkv;

namespace {

struct Env {
  cuda::Context ctx{0};
  cuda::Stream stream;
  ArchId arch{};
  CubinCache cache{CubinCache::default_dir()};
  Compiler compiler{&cache};
  Env() {
    const auto d = cuda::device_info(0);
    arch = ArchId{d.cc_major * 10 + d.cc_minor, d.cc_major == 9};
  }
  static Env& get() {
    static Env e;
    return e;
  }
};

/// Compiles and loads every distinct binary of `configs` (one per name expression).
std::map<std::string, std::shared_ptr<LoadedKernel>> load(const Problem& p, const std::vector<Config>& configs) {
  auto& env = Env::get();
  std::vector<KernelSource> src;
  std::set<std::string> seen;
  for (const auto& c : configs)
    if (seen.insert(name_expression(p, c)).second) src.push_back(kernel_source(p, c, env.arch));
  const auto res = env.compiler.compile_all(src);
  std::map<std::string, std::shared_ptr<LoadedKernel>> out;
  for (const auto& r : res) {
    INFO(r.kernel.variant_name << "\n" << r.error);
    REQUIRE(r.ok);
    out[r.kernel.name_expression] =
        std::make_shared<LoadedKernel>(r.cubin, r.report.lowered_name, r.kernel.dynamic_smem_bytes);
  }
  return out;
}

HostInputs truncate(const HostInputs& big, int m) {
  HostInputs in = big;
  in.problem.m = m;
  in.x.resize(size_t(m) * big.problem.k);
  in.xf.resize(in.x.size());
  in.positions.resize(size_t(m));
  return in;
}

void run_and_check(const HostInputs& in, const std::vector<Config>& configs,
                   const std::map<std::string, std::shared_ptr<LoadedKernel>>& kernels, size_t ref_rows) {
  auto& env = Env::get();
  const RefRows ref = reference_rows(in, ref_rows, 7);
  DeviceInputs dev(in, 1);
  for (const auto& c : configs)
    // Configs with a workspace run twice: their counters reset themselves, so the second launch must be right too.
    for (int run = 0; run < (uses_workspace(c) ? 2 : 1); ++run) {
      dev.poison();
      const auto& k = kernels.at(name_expression(in.problem, c));
      launch(*k, in.problem, c, dev.params(0, c), env.stream.get());
      env.stream.synchronize();
      std::vector<uint16_t> q, kk, v;
      dev.download(q, kk, v);
      const Verdict vd = verify(in, ref, q, kk, v);
      INFO(in.problem.key() << " with " << variant_name(in.problem, c, env.arch) << " (launch " << run + 1
                            << "): " << vd.message << " rel " << vd.rel_l2);
      CHECK(vd.pass);
    }
}

/// One list of configs to run at M = m (big's inputs truncated to m), checked on ref_rows reference rows.
struct MSet {
  int m;
  std::vector<Config> configs;
  size_t ref_rows;
};

/// Compiles the kernels of every set together (one NVRTC batch for big's class), then runs and checks each set.
void run_sets(const HostInputs& big, const std::vector<MSet>& sets) {
  std::vector<Config> all;
  for (const auto& s : sets) all.insert(all.end(), s.configs.begin(), s.configs.end());
  const auto kernels = load(big.problem, all);
  for (const auto& s : sets)
    run_and_check(s.m == big.problem.m ? big : truncate(big, s.m), s.configs, kernels, s.ref_rows);
}

std::vector<std::pair<quant::Format, DType>> format_dtypes() {
  std::vector<std::pair<quant::Format, DType>> out = {{quant::Format::fp16, DType::f16},
                                                      {quant::Format::bf16, DType::bf16},
                                                      {quant::Format::fp16_kb64, DType::f16},
                                                      {quant::Format::bf16_kb64, DType::bf16}};
  for (auto f :
       {quant::Format::int8, quant::Format::int4, quant::Format::nf4, quant::Format::mxfp4, quant::Format::nvfp4})
    for (auto d : {DType::f16, DType::bf16}) out.push_back({f, d});
  // K-blocked packed weights (the element formats' binaries, read through other tensor maps): one dtype each.
  out.push_back({quant::Format::int8_kb64, DType::f16});
  out.push_back({quant::Format::int4_kb128, DType::bf16});
  out.push_back({quant::Format::nf4_kb128, DType::f16});
  out.push_back({quant::Format::mxfp4_kb128, DType::bf16});
  out.push_back({quant::Format::nvfp4_kb128, DType::f16});
  return out;
}

/// How a config splits K between blocks, as one number: 0 for wgmma_ws stream-K and the gemv balanced tail (split by
/// the SM count at launch), else the blocks per output tile (k_split_blocks: split_k, or a gemv cluster's size).
int split_of(const Config& c) {
  if ((c.mainloop == Mainloop::gemv && gemv_balanced(c)) || (c.mainloop == Mainloop::wgmma_ws && ws_stream_k(c)))
    return 0;
  return k_split_blocks(c);
}

/// The valid configs of problem p on this GPU with the given mainloop whose split (split_of) is 1..max_split (stream-K
/// or the balanced tail, split 0, only when max_split is 0).
/// keep: a further filter (e.g. on stages).
std::vector<Config> configs_of(const Problem& p, Mainloop mainloop, int max_split = 16,
                               const std::function<bool(const Config&)>& keep = nullptr) {
  std::vector<Config> out;
  for (const auto& c : valid_configs(p, Env::get().arch))
    if (c.mainloop == mainloop && (max_split == 0 ? split_of(c) == 0 : split_of(c) >= 1 && split_of(c) <= max_split) &&
        (!keep || keep(c)))
      out.push_back(c);
  return out;
}

/// true on sm_90a (the wgmma mainloops); otherwise marks the test case skipped (kt_test::skip): the caller returns.
bool has_sm90a(const char* what) {
  const ArchId a = Env::get().arch;
  if (a.sm == 90 && a.arch_specific) return true;
  kt_test::skip(std::string(what) + " needs sm_90a; this GPU is sm_" + std::to_string(a.sm));
  return false;
}

Problem qwen(quant::Format f, DType d, int m) {
  Problem p;
  p.format = f;
  p.dtype = d;
  p.m = m;
  return p;  // K 3584, Hq 28, Hkv 4, D 128, bias, RoPE
}

/// The second head layout of the spec: 32 query / 8 KV heads of 128, K = 4096, without bias or RoPE.
Problem heads_32_8(quant::Format f, DType d, int m) {
  Problem p = qwen(f, d, m);
  p.k = 4096;
  p.num_heads = 32;
  p.num_kv_heads = 8;
  p.has_bias = false;
  p.rope = false;
  return p;
}

/// Random inputs for an nf4 / mxfp4 problem in which block 2 of every 7th row is all zeros under a scale fp16 cannot
/// hold (E8M0 2^20, nf4 absmax 1e6): a decode that rounds the scale to fp16 first gets 0 * inf = NaN there, the fp32
/// decode gets 0. The reference dequantizes the same bytes.
HostInputs zero_blocks_under_huge_scales(const Problem& p, uint64_t seed) {
  HostInputs in = make_inputs(p, seed);
  const quant::Format f = p.format;
  const int group = f == quant::Format::mxfp4 ? 32 : 64, groups = p.k / group;
  for (int row = 0; row < p.n(); row += 7) {
    const int blk = 2;
    for (int e = 0; e < group / 2; ++e)
      in.w.data[size_t(row) * p.k / 2 + size_t(blk) * group / 2 + e] =
          f == quant::Format::nf4 ? 0x77 : 0x00;  // nf4 code 7 and E2M1 0b0000 are both 0.0
    if (f == quant::Format::mxfp4) {
      in.w.scales[size_t(row) * groups + blk] = 127 + 20;
    } else {
      const float big = 1e6f;
      std::memcpy(in.w.scales.data() + (size_t(row) * groups + blk) * 4, &big, 4);
    }
  }
  quant::dequantize(in.w, in.wd.data());
  return in;
}

/// A paged KV cache on the device for the slot-mapping write: K as [num_pages][page_size][Hkv][D] with padded pages
/// (the vLLM layout), V as [num_pages][Hkv][page_size][D] (FlashInfer's HND layout), both poisoned with 0xFFFF (NaN)
/// before every launch; a slot mapping [m] over shuffled pages that starts mid-page (tiles cross page boundaries) and
/// skips about one token in six (-1).
struct PagedCache {
  static constexpr int kPageSize = 16;
  static constexpr uint16_t kPoison = 0xFFFF;
  int num_pages = 0, hkv = 0, d = 0;
  long long ks[3] = {}, vs[3] = {};  // page, slot, head strides (elements)
  std::vector<int> slots;
  cuda::DeviceBuffer k, v, slot_buf;

  PagedCache(const Problem& p, uint64_t seed) : hkv(p.num_kv_heads), d(p.head_dim) {
    std::mt19937_64 rng(seed);
    num_pages = 2 * (p.m / kPageSize + 1) + 3;  // room for unused pages between the used ones
    std::vector<int> pages(static_cast<size_t>(num_pages));
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    int next = 5;  // the sequence starts at offset 5 of its first page
    for (int i = 0; i < p.m; ++i) {
      if (rng() % 6 == 0) {
        slots.push_back(-1);
        continue;
      }
      slots.push_back(pages[size_t(next / kPageSize)] * kPageSize + next % kPageSize);
      ++next;
    }
    ks[2] = d, ks[1] = (long long)hkv * d, ks[0] = kPageSize * ks[1] + 64;
    vs[1] = d, vs[2] = (long long)kPageSize * d, vs[0] = hkv * vs[2];
    k = cuda::DeviceBuffer(size_t(num_pages) * ks[0] * 2);
    v = cuda::DeviceBuffer(size_t(num_pages) * vs[0] * 2);
    slot_buf = cuda::DeviceBuffer(slots.size() * 4);
    slot_buf.upload(slots.data(), slots.size() * 4);
  }
  void poison() {
    k.fill_u16(kPoison);
    v.fill_u16(kPoison);
  }
  void set(QkvParams& a) const {
    a.slot_mapping = reinterpret_cast<const int*>(slot_buf.ptr());
    a.k_cache = reinterpret_cast<void*>(k.ptr());
    a.v_cache = reinterpret_cast<void*>(v.ptr());
    a.k_cache_page_stride = ks[0], a.k_cache_slot_stride = ks[1], a.k_cache_head_stride = ks[2];
    a.v_cache_page_stride = vs[0], a.v_cache_slot_stride = vs[1], a.v_cache_head_stride = vs[2];
    a.num_pages = num_pages;
    a.page_size = kPageSize;
  }
  static std::vector<uint16_t> download(const cuda::DeviceBuffer& b) {
    std::vector<uint16_t> h(b.bytes() / 2);
    b.download(h.data(), b.bytes());
    return h;
  }
  /// Checks downloaded caches against ref_k / ref_v (contiguous [num_pages, page_size, Hkv, D], kt::ref::
  /// kv_cache_write's): the mapped slots within the tolerance (relative L2), every other element -- unmapped slots,
  /// page padding -- still the poison, bit for bit. Returns "" or what is wrong.
  std::string check(DType dt, const std::vector<uint16_t>& kh, const std::vector<uint16_t>& vh,
                    const std::vector<double>& ref_k, const std::vector<double>& ref_v) const {
    std::vector<char> mapped(size_t(num_pages) * kPageSize, 0);
    for (int s : slots)
      if (s >= 0) mapped[size_t(s)] = 1;
    std::ostringstream err;
    double num = 0, den = 0;
    for (int c = 0; c < 2; ++c) {
      const auto& h = c ? vh : kh;
      const long long* st = c ? vs : ks;
      const auto& ref = c ? ref_v : ref_k;
      std::vector<char> written(h.size(), 0);
      for (int slot = 0; slot < num_pages * kPageSize; ++slot) {
        if (!mapped[size_t(slot)]) continue;
        for (int hd = 0; hd < hkv; ++hd)
          for (int e = 0; e < d; ++e) {
            const size_t at = size_t(slot / kPageSize * st[0] + slot % kPageSize * st[1] + hd * st[2] + e);
            written[at] = 1;
            const double g = dtype_to_float(dt, h[at]), w = ref[(size_t(slot) * hkv + hd) * d + e];
            num += std::isfinite(g) ? (g - w) * (g - w) : 1e30;
            den += w * w;
          }
      }
      long long touched = 0;
      for (size_t i = 0; i < h.size(); ++i) touched += !written[i] && h[i] != kPoison;
      if (touched) err << (c ? "v_cache: " : "k_cache: ") << touched << " elements outside the mapped slots written; ";
    }
    const double rel = std::sqrt(num / den);
    if (!(rel <= tolerance(dt))) err << "cache rel_l2 " << rel << " > " << tolerance(dt) << "; ";
    return err.str();
  }
};

/// Runs every config with the KV-cache write on in's problem (all rows referenced): with k and v given (both they
/// and Q checked against the float64 reference, the caches against kt::ref::kv_cache_write's), then with k and v
/// null (the caches and Q must be bit-identical to the first launch's).
void run_kv_cache(const HostInputs& in, const std::vector<Config>& configs) {
  auto& env = Env::get();
  const Problem& p = in.problem;
  const auto kernels = load(p, configs);
  const RefRows ref = reference_rows(in, size_t(p.m), 7);
  REQUIRE(ref.rows.size() == size_t(p.m));
  PagedCache cache(p, 17);
  const size_t slot_elems = size_t(p.num_kv_heads) * p.head_dim;
  std::vector<double> ref_k(size_t(cache.num_pages) * PagedCache::kPageSize * slot_elems, 0.0), ref_v = ref_k;
  const ref::QkvShape shape{p.m, p.k, p.num_heads, p.num_kv_heads, p.head_dim, p.has_bias, p.rope, in.rope_theta};
  ref::kv_cache_write(shape, ref.k.data(), ref.v.data(), cache.slots, cache.num_pages, PagedCache::kPageSize,
                      ref_k.data(), ref_v.data());
  DeviceInputs dev(in, 1);
  for (const auto& c : configs) {
    INFO(p.key() << " with " << variant_name(p, c, env.arch));
    const auto& kernel = *kernels.at(name_expression(p, c));
    dev.poison();
    cache.poison();
    QkvParams a = dev.params(0, c);
    cache.set(a);
    launch(kernel, p, c, a, env.stream.get());
    env.stream.synchronize();
    std::vector<uint16_t> q, kk, v;
    dev.download(q, kk, v);
    const Verdict vd = verify(in, ref, q, kk, v);
    INFO("q/k/v: " << vd.message << " rel " << vd.rel_l2);
    CHECK(vd.pass);
    const auto kh = PagedCache::download(cache.k), vh = PagedCache::download(cache.v);
    const std::string bad = cache.check(p.dtype, kh, vh, ref_k, ref_v);
    INFO("caches: " << bad);
    CHECK(bad.empty());
    // K and V into the cache only.
    dev.poison();
    cache.poison();
    a.k = a.v = nullptr;
    launch(kernel, p, c, a, env.stream.get());
    env.stream.synchronize();
    std::vector<uint16_t> q2, k2, v2;
    dev.download(q2, k2, v2);
    CHECK(q2 == q);
    CHECK(std::all_of(k2.begin(), k2.end(), [](uint16_t b) { return b == PagedCache::kPoison; }));
    CHECK(std::all_of(v2.begin(), v2.end(), [](uint16_t b) { return b == PagedCache::kPoison; }));
    CHECK(PagedCache::download(cache.k) == kh);
    CHECK(PagedCache::download(cache.v) == vh);
  }
}

/// Up to n configs of `all` spread evenly over the list (its order mixes tile shapes and depths).
std::vector<Config> spread(const std::vector<Config>& all, size_t n) {
  if (all.size() <= n) return all;
  std::vector<Config> out;
  for (size_t i = 0; i < n; ++i) out.push_back(all[i * all.size() / n]);
  return out;
}

}  // namespace

TEST_CASE("qkv_proj KV-cache write: every mainloop writes K (after RoPE) and V to the mapped slots, nothing else",
          "[gpu][qkv]") {
  // M = 37: partial token tiles in every mainloop; 6 of the slot mapping's tokens are skipped (seed 17), the
  // sequence crosses 3 page boundaries over shuffled pages. Configs are taken from the spaces of M = 37 and M = 300
  // (the large tiles), each split kind included: mma / wgmma split-K (the epilogue after the workspace reduction),
  // gemv's loads and reductions (its register epilogue), wgmma_ws split-K clusters, two K groups and stream-K,
  // wgmma_pairs' boxes of 4, 8 and 16 pairs (its own store loop).
  const bool sm90a = Env::get().arch.sm == 90 && Env::get().arch.arch_specific;
  for (auto [f, d] : {std::pair{quant::Format::int4, DType::bf16}, std::pair{quant::Format::fp16, DType::f16}}) {
    Problem pk = qwen(f, d, 37);
    pk.kv_cache = true;  // the kernel class with the cache write
    const HostInputs in = make_inputs(pk, 101);
    std::vector<Config> configs;
    std::set<std::string> seen;
    for (Mainloop ml : {Mainloop::mma, Mainloop::gemv, Mainloop::wgmma, Mainloop::wgmma_ws, Mainloop::wgmma_pairs}) {
      if (ml != Mainloop::mma && ml != Mainloop::gemv && !sm90a) continue;
      for (int m : {37, 300}) {
        for (int split : {1, 16, 0}) {  // unsplit, split (split_k / clusters), stream-K / balanced tail
          auto cs = split == 0 ? configs_of(qwen(f, d, m), ml, 0)
                               : configs_of(qwen(f, d, m), ml, split,
                                            [&](const Config& c) { return split == 1 || split_of(c) > 1; });
          for (const auto& c : spread(cs, 2))
            if (seen.insert(variant_name(in.problem, c, Env::get().arch)).second) configs.push_back(c);
        }
      }
    }
    INFO(quant::format_name(f));
    REQUIRE(configs.size() >= (sm90a ? 16u : 6u));
    run_kv_cache(in, configs);
  }
  if (!sm90a) kt_test::skip("the wgmma, wgmma_ws and wgmma_pairs mainloops need sm_90a (mma and gemv ran)");
}

TEST_CASE("qkv_proj: every valid variant of every format and dtype on Qwen2.5-7B shapes", "[gpu][qkv]") {
  auto& env = Env::get();
  for (const auto& [f, d] : format_dtypes()) {
    const HostInputs big = make_inputs(qwen(f, d, 1000), 11);
    const auto c37 = valid_configs(qwen(f, d, 37), env.arch);  // tile_m <= 64, split-K configs included
    std::vector<Config> c1000;
    for (const auto& c : valid_configs(qwen(f, d, 1000), env.arch))
      if (c.tile_m == 128) c1000.push_back(c);
    std::vector<Config> all = c37;
    all.insert(all.end(), c1000.begin(), c1000.end());
    REQUIRE(c37.size() >= 20);
    REQUIRE(!c1000.empty());
    const auto kernels = load(big.problem, all);
    run_and_check(truncate(big, 37), c37, kernels, 37);
    run_and_check(big, c1000, kernels, 48);
  }
}

TEST_CASE("qkv_proj: M sweep 1..4096 for every format, dtype", "[gpu][qkv]") {
  auto& env = Env::get();
  for (const auto& [f, d] : format_dtypes()) {
    const HostInputs big = make_inputs(qwen(f, d, 4096), 21);
    for (int m : {1, 3, 16, 37, 64, 256, 1000, 4096}) {
      const Problem p = qwen(f, d, m);
      const auto valid = valid_configs(p, env.arch);
      std::vector<Config> cs = {default_config(env.arch, p), valid.front(), valid.back()};
      const auto kernels = load(p, cs);
      run_and_check(m == 4096 ? big : truncate(big, m), cs, kernels, 40);
    }
  }
}

TEST_CASE("qkv_proj: 32/8 head layout, with and without bias and RoPE", "[gpu][qkv]") {
  auto& env = Env::get();
  for (bool bias : {false, true})
    for (bool rope : {false, true})
      for (auto [f, d] : {std::pair{quant::Format::nf4, DType::bf16},
                          {quant::Format::int4, DType::f16},
                          {quant::Format::nvfp4, DType::bf16},
                          {quant::Format::fp16, DType::f16},
                          {quant::Format::int8, DType::bf16},
                          {quant::Format::mxfp4, DType::f16}}) {
        Problem p;
        p.format = f;
        p.dtype = d;
        p.k = 4096;
        p.num_heads = 32;
        p.num_kv_heads = 8;
        p.has_bias = bias;
        p.rope = rope;
        p.m = 300;
        const HostInputs big = make_inputs(p, 31, 5e5);
        for (int m : {1, 37, 300}) {
          Problem pm = p;
          pm.m = m;
          const auto valid = valid_configs(pm, env.arch);
          std::vector<Config> cs = {default_config(env.arch, pm), valid[valid.size() / 2]};
          const auto kernels = load(pm, cs);
          run_and_check(truncate(big, m), cs, kernels, 64);
        }
      }
}

TEST_CASE("qkv_proj gemv: every valid variant at decode sizes, and K with a partial last warp step", "[gpu][qkv]") {
  for (const auto& [f, d] : format_dtypes()) {
    // 16-bit K-blocked weights: TMA kernels only (no gemv config: the CPU tests check it); packed K-blocked: stages 0
    // (the register ring, by address), 2 (TMA boxes) and, at tile_m 16, 3 (X by TMA too)
    if (quant::format_k_blocked(f) && quant::format_bits(f) == 16) continue;
    const HostInputs big = make_inputs(qwen(f, d, 16), 41);
    for (int m : {1, 3, 16}) {  // tile_m 8 (7 or 5 tokens masked) and 16
      const Problem p = qwen(f, d, m);
      const auto cs = configs_of(p, Mainloop::gemv);
      REQUIRE(cs.size() >= (quant::format_k_blocked(f) ? 4u : 20u));
      if (quant::format_k_blocked(f))
        for (const auto& c : cs) REQUIRE(c.gemv.load != GemvLoad::bulk_rows);
      const auto kernels = load(p, cs);
      run_and_check(truncate(big, m), cs, kernels, m);
    }
  }
  // K = 1088 = 8.5 x 128: the 4-bit formats' last warp step has only lanes q = 0, 1 in range (group sizes <= 64).
  for (auto [f, d] : {std::pair{quant::Format::nf4, DType::bf16},
                      {quant::Format::mxfp4, DType::f16},
                      {quant::Format::nvfp4, DType::bf16},
                      {quant::Format::int8, DType::f16},
                      {quant::Format::bf16, DType::bf16}}) {
    Problem p = qwen(f, d, 9);
    p.k = 1088;
    p.num_heads = 8;
    p.num_kv_heads = 2;
    const HostInputs in = make_inputs(p, 43);
    const auto cs = configs_of(p, Mainloop::gemv);
    REQUIRE(!cs.empty());
    const auto kernels = load(p, cs);
    run_and_check(in, cs, kernels, 9);
  }
}

TEST_CASE(
    "qkv_proj gemv balanced tail (split_k 0): every variant at decode sizes, pieces reduced in order, counters reset",
    "[gpu][qkv]") {
  // On 132 SMs: M = 1 / 3 (tile_m 8) and M = 16 (tile_m 16): 24 tail units of 5 pieces (tile_n 16) or 12 of 11 (tile_n
  // 32); M = 16 with tile_m 8: 48 of 2. Every config runs twice (run_and_check: the counters reset themselves).
  for (const auto& [f, d] : format_dtypes()) {
    if (quant::format_k_blocked(f) && quant::format_bits(f) == 16) continue;
    const HostInputs big = make_inputs(qwen(f, d, 16), 45);
    for (int m : {1, 3, 16}) {
      const Problem p = qwen(f, d, m);
      const auto cs = configs_of(p, Mainloop::gemv, 0);
      REQUIRE(cs.size() >= (quant::format_k_blocked(f) ? 2u : 10u));
      const auto kernels = load(p, cs);
      run_and_check(truncate(big, m), cs, kernels, m);
    }
  }
}

TEST_CASE(
    "qkv_proj K-blocked packed weights: gemv stages 0, 2 and 3 (whole units and balanced tail) and wgmma_ws, every format",
    "[gpu][qkv]") {
  // The row-major formats' binaries, with QkvParams::w_k_blocked picking the K-blocked maps' coordinates (runtime/qkv.cpp
  // encode_gemv_blocks / encode_ws_blocks). Both activation dtypes for each format.
  for (auto f : {quant::Format::int8_kb64, quant::Format::int4_kb128, quant::Format::nf4_kb128,
                 quant::Format::mxfp4_kb128, quant::Format::nvfp4_kb128})
    for (auto d : {DType::f16, DType::bf16}) {
      const HostInputs big = make_inputs(qwen(f, d, 300), 91);
      std::vector<MSet> sets;
      for (int m : {1, 3, 16}) {
        const auto whole = configs_of(qwen(f, d, m), Mainloop::gemv),
                   bal = configs_of(qwen(f, d, m), Mainloop::gemv, 0);
        REQUIRE(whole.size() >= 4);
        REQUIRE(bal.size() >= 2);
        for (const auto* cs : {&whole, &bal})  // both the register ring and the TMA ring
          for (GemvLoad ld : {GemvLoad::register_ring, GemvLoad::tma})
            REQUIRE(std::any_of(cs->begin(), cs->end(), [&](const Config& c) { return c.gemv.load == ld; }));
        sets.push_back({m, whole, size_t(m)});
        sets.push_back({m, bal, size_t(m)});
      }
      if (has_sm90a("wgmma_ws with K-blocked packed weights")) {
        // M = 37: tile_m 8..64 with every split_k; M = 300: every fourth tile shape (split_k 1, rings of 2-3 slots).
        const auto c37 = configs_of(qwen(f, d, 37), Mainloop::wgmma_ws, 16, [&](const Config& c) {
          return c.ws.stages == 3 || (split_of(c) > 1 && c.ws.stages == 4);
        });
        std::vector<Config> c300;
        const auto all300 =
            configs_of(big.problem, Mainloop::wgmma_ws, 1, [&](const Config& c) { return c.ws.stages <= 3; });
        for (size_t i = 0; i < all300.size(); i += 4) c300.push_back(all300[i]);
        REQUIRE(c37.size() >= 8);
        REQUIRE(c300.size() >= 4);
        sets.push_back({37, c37, 37});
        sets.push_back({300, c300, 40});
      }
      run_sets(big, sets);
    }
}

TEST_CASE("qkv_proj gemv: units whose scale fp16 cannot hold take the fp32 decode (no inf * 0)", "[gpu][qkv]") {
  // The gemv mainloop decodes in 16-bit pairs with the scale rounded to the operand dtype. A block of zeros under a
  // scale above fp16's range (E8M0 2^20, an nf4 absmax of 1e6) would give 0 * inf = NaN there; such units must go
  // through the fp32 decode, which gives 0. Every 7th row's 3rd block is patched so; the reference sees the same bytes.
  for (auto f : {quant::Format::mxfp4, quant::Format::nf4}) {
    Problem p = qwen(f, DType::f16, 3);
    const HostInputs in = zero_blocks_under_huge_scales(p, 47);
    const auto cs = configs_of(p, Mainloop::gemv);
    REQUIRE(cs.size() >= 20);
    const auto kernels = load(p, cs);
    run_and_check(in, cs, kernels, 3);
  }
}

TEST_CASE("qkv_proj wgmma: every valid variant of every format and dtype, split-K, partial token tiles", "[gpu][qkv]") {
  if (!has_sm90a("the wgmma mainloop")) return;
  for (const auto& [f, d] : format_dtypes()) {
    if (quant::format_k_blocked(f)) continue;  // read by the TMA kernels only (no wgmma config: the CPU tests check it)
    const HostInputs big = make_inputs(qwen(f, d, 300), 51);
    // M = 300: every binary (split_k 1; tile_m 128 leaves a 44-token tile); M = 37: tile_m 64 with every split_k.
    const auto c300 = configs_of(big.problem, Mainloop::wgmma, 1);
    const auto c37 = configs_of(qwen(f, d, 37), Mainloop::wgmma);
    REQUIRE(c300.size() >= 8);
    REQUIRE(c37.size() >= 8);
    run_sets(big, {{300, c300, 40}, {37, c37, 37}});
  }
  // 32/8 heads, K = 4096, no bias / no RoPE with tile_n 64 (head_dim 128 is a multiple of it).
  for (auto [f, d] : {std::pair{quant::Format::nf4, DType::bf16},
                      {quant::Format::int4, DType::f16},
                      {quant::Format::fp16, DType::f16}}) {
    const Problem p = heads_32_8(f, d, 130);
    const HostInputs in = make_inputs(p, 53);
    const auto cs = configs_of(p, Mainloop::wgmma, 2, [&](const Config& c) { return c.tile_n == 64; });
    REQUIRE(!cs.empty());
    const auto kernels = load(p, cs);
    run_and_check(in, cs, kernels, 40);
  }
}

TEST_CASE("qkv_proj wgmma: units whose scale fp16 cannot hold take the fp32 decode (no inf * 0)", "[gpu][qkv]") {
  // As for gemv: zero blocks under E8M0 2^20 or an nf4 absmax of 1e6 must decode to 0, not 0 * inf = NaN.
  if (!has_sm90a("the wgmma mainloops")) return;
  for (auto f : {quant::Format::mxfp4, quant::Format::nf4}) {
    Problem p = qwen(f, DType::f16, 70);
    const HostInputs in = zero_blocks_under_huge_scales(p, 57);
    const auto cs = configs_of(p, Mainloop::wgmma, 1);
    REQUIRE(!cs.empty());
    const auto kernels = load(p, cs);
    run_and_check(in, cs, kernels, 70);
  }
}

TEST_CASE("qkv_proj wgmma_ws: every tile shape of every format and dtype, ring depths 2 and 3, split-K, partial tiles",
          "[gpu][qkv]") {
  if (!has_sm90a("the wgmma_ws mainloop")) return;
  for (const auto& [f, d] : format_dtypes()) {
    const HostInputs big = make_inputs(qwen(f, d, 300), 61);
    // M = 300, split_k 1: every tile shape (tile_m 8..256: 4..44-token partial last tiles) with rings of 2 and 3
    // slots (the mbarrier phases flip every step or two) and the deepest ring. M = 37 and M = 5: every split_k.
    std::vector<Config> c300, c37, c5;
    int deepest = 0;
    for (const auto& c : configs_of(big.problem, Mainloop::wgmma_ws, 1)) deepest = std::max(deepest, c.ws.stages);
    c300 = configs_of(big.problem, Mainloop::wgmma_ws, 1,
                      [&](const Config& c) { return c.ws.stages <= 3 || c.ws.stages == deepest; });
    // (split_k 2 / 3 / 4, the cluster kernel, comes with rings of 4+ slots only.) M = 37 / 5: ranks that own no
    // live token group; M = 300, split_k 3: every rank owns live groups, partial slots beside or over the ring.
    const auto c300k3 = configs_of(big.problem, Mainloop::wgmma_ws, 3,
                                   [&](const Config& c) { return split_of(c) == 3 && c.ws.stages == 4; });
    c37 = configs_of(qwen(f, d, 37), Mainloop::wgmma_ws, 16,
                     [&](const Config& c) { return c.ws.stages == 3 || (split_of(c) > 1 && c.ws.stages == 4); });
    c5 = configs_of(qwen(f, d, 5), Mainloop::wgmma_ws, 16,
                    [&](const Config& c) { return c.ws.stages == 2 || (split_of(c) > 1 && c.ws.stages == 4); });
    REQUIRE(c300.size() >= 16);
    REQUIRE(c37.size() >= 8);
    REQUIRE(c5.size() >= 4);
    REQUIRE(c300k3.size() >= 4);
    run_sets(big, {{300, c300, 40}, {300, c300k3, 40}, {37, c37, 37}, {5, c5, 5}});
  }
  // 32/8 heads, K = 4096, no bias / no RoPE with tile_n 64 (head_dim 128 is a multiple of it).
  for (auto [f, d] : {std::pair{quant::Format::nvfp4, DType::f16},
                      {quant::Format::int8, DType::bf16},
                      {quant::Format::bf16, DType::bf16}}) {
    const Problem p = heads_32_8(f, d, 130);
    const HostInputs in = make_inputs(p, 63);
    const auto cs =
        configs_of(p, Mainloop::wgmma_ws, 2, [&](const Config& c) { return c.tile_n == 64 && c.ws.stages == 4; });
    REQUIRE(!cs.empty());
    const auto kernels = load(p, cs);
    run_and_check(in, cs, kernels, 40);
  }
}

TEST_CASE("qkv_proj wgmma_ws: two K groups, every format and dtype, split_k 1..4, a K group with no step",
          "[gpu][qkv]") {
  if (!has_sm90a("the wgmma_ws mainloop")) return;
  auto kg2 = [](const Config& c) { return c.ws.k_groups == 2; };
  for (const auto& [f, d] : format_dtypes()) {
    // M = 37: tile_m 16 (3 token tiles) and 32 (2), partial last tiles; M = 16: one token tile. Qwen2.5-7B, K = 3584:
    // 56 steps, so each rank's two K groups take 28 / 14-15 / 9-10 / 7 steps each at split_k 1 / 2 / 3 / 4.
    const HostInputs big = make_inputs(qwen(f, d, 37), 81);
    const auto c37 = configs_of(big.problem, Mainloop::wgmma_ws, 4, kg2);
    const auto c16 = configs_of(qwen(f, d, 16), Mainloop::wgmma_ws, 4, kg2);
    REQUIRE(c37.size() >= 8);
    REQUIRE(c16.size() >= 8);
    run_sets(big, {{37, c37, 37}, {16, c16, 16}});
  }
  // K = 128: 2 steps, so with split_k 2 each rank's second K group has none (it only hands over zeros); K = 384: 6
  // steps over 1..4 ranks (1-2 per rank at split_k 4).
  for (auto [f, d] : {std::pair{quant::Format::int4, DType::bf16},
                      {quant::Format::nvfp4, DType::f16},
                      {quant::Format::nf4, DType::bf16},
                      {quant::Format::fp16, DType::f16}}) {
    for (int k : {128, 384}) {
      Problem p = qwen(f, d, 16);
      p.k = k;
      const HostInputs in = make_inputs(p, 83);
      const auto cs = configs_of(p, Mainloop::wgmma_ws, 4, kg2);
      REQUIRE(cs.size() >= 4);
      const auto kernels = load(p, cs);
      run_and_check(in, cs, kernels, 16);
    }
  }
}

TEST_CASE("qkv_proj wgmma_ws split_k_tail: whole tiles in the full waves, split tiles in the last, every format",
          "[gpu][qkv]") {
  if (!has_sm90a("the wgmma_ws mainloop")) return;
  // M = 1000 (tile_m 64..256: 144..576 tiles of 128 features, so 132..528 whole tiles then 12..48 split over 2..4
  // blocks; partial last token tiles) and M = 300 (tile_m 64: 180 tiles, 132 whole, 48 split over 2), K = 512 (8 steps:
  // a slice of 2..4). Rings of 4 slots; every split_k the space offers. The whole tiles come first in the tile order,
  // so the split ones hold the last token rows, which the reference rows include (the first and last row always).
  for (const auto& [f, d] : format_dtypes()) {
    Problem p = qwen(f, d, 1000);
    p.k = 512;
    const HostInputs big = make_inputs(p, 83);
    auto tail4 = [](const Config& c) { return ws_split_tail(c) && c.ws.stages == 4; };
    const auto c1000 = configs_of(p, Mainloop::wgmma_ws, 16, tail4);
    p.m = 300;
    const auto c300 = configs_of(p, Mainloop::wgmma_ws, 16, tail4);
    INFO("format " << int(f));
    REQUIRE(c1000.size() >= 3);
    REQUIRE(!c300.empty());
    std::set<int> splits;
    for (const auto& c : c1000) splits.insert(c.ws.split_k);
    CHECK(splits.size() >= 2);
    run_sets(big, {{1000, c1000, 60}, {300, c300, 40}});
  }
}

TEST_CASE("qkv_proj wgmma_ws stream-K: every format and dtype, blocks crossing 1..3 tile boundaries, deterministic",
          "[gpu][qkv]") {
  if (!has_sm90a("the wgmma_ws mainloop")) return;
  for (const auto& [f, d] : format_dtypes()) {
    // Qwen2.5-7B, M = 37 (token tiles 8..64, partial last tiles), 16 and 1: 56 K steps per tile, ~15 units per block
    // on 132 SMs, so most tiles are shared by 4-5 blocks and most blocks start or end inside a tile.
    const HostInputs big = make_inputs(qwen(f, d, 37), 71);
    std::vector<Config> c37, c16, c1;
    c37 = configs_of(big.problem, Mainloop::wgmma_ws, 0, [&](const Config& c) { return c.ws.stages == 4; });
    c16 = configs_of(qwen(f, d, 16), Mainloop::wgmma_ws, 0, [&](const Config& c) { return c.ws.stages == 4; });
    c1 = configs_of(qwen(f, d, 1), Mainloop::wgmma_ws, 0,
                    [&](const Config& c) { return c.ws.stages == 8 || c.ws.stages == 2; });
    REQUIRE(c37.size() >= 4);
    REQUIRE(!c16.empty());
    REQUIRE(c1.size() >= 2);
    run_sets(big, {{37, c37, 37}, {16, c16, 16}, {1, c1, 1}});
  }
  // K = 256 (4 steps per tile). M = 300: 5.5 units per block, so a block can cover the end of one tile, a whole tile
  // and the start of a third; full tiles mixed with shared ones. M = 1000: 2 G tiles or more for tile_m <= 128, so
  // whole-tile rounds come first (tile_m 64: 3 rounds of 132, then 180 tiles split).
  for (auto [f, d] : {std::pair{quant::Format::int4, DType::bf16},
                      {quant::Format::nvfp4, DType::f16},
                      {quant::Format::fp16, DType::f16}}) {
    Problem p = qwen(f, d, 1000);
    p.k = 256;
    const HostInputs big = make_inputs(p, 73);
    std::vector<Config> c1000, c300;
    c1000 = configs_of(p, Mainloop::wgmma_ws, 0, [&](const Config& c) { return c.ws.stages == 2 || c.ws.stages == 4; });
    p.m = 300;
    c300 = configs_of(p, Mainloop::wgmma_ws, 0, [&](const Config& c) { return c.ws.stages == 2 || c.ws.stages == 4; });
    REQUIRE(!c1000.empty());
    REQUIRE(!c300.empty());
    bool has_rounds = false;  // some config has 2 G tiles or more
    for (const auto& c : c1000)
      has_rounds |= ((4608 + c.tile_n - 1) / c.tile_n) * ((1000 + c.tile_m - 1) / c.tile_m) >= 2 * 132;
    CHECK(has_rounds);
    run_sets(big, {{1000, c1000, 60}, {300, c300, 60}});
  }
  // The tile's owner adds the partials in block order whenever they arrive: two runs agree bit for bit.
  {
    auto& env = Env::get();
    const Problem p = qwen(quant::Format::nf4, DType::bf16, 16);
    const HostInputs in = make_inputs(p, 79);
    const auto cs = configs_of(p, Mainloop::wgmma_ws, 0);
    REQUIRE(!cs.empty());
    const Config c = cs.front();
    const auto kernels = load(p, {c});
    DeviceInputs dev(in, 1);
    std::vector<uint16_t> q[2], k[2], v[2];
    for (int run = 0; run < 2; ++run) {
      dev.poison();
      launch(*kernels.at(name_expression(p, c)), p, c, dev.params(0, c), env.stream.get());
      env.stream.synchronize();
      dev.download(q[run], k[run], v[run]);
    }
    INFO(variant_name(p, c, env.arch));
    CHECK(q[0] == q[1]);
    CHECK(k[0] == k[1]);
    CHECK(v[0] == v[1]);
    const RefRows ref = reference_rows(in, 16, 7);
    CHECK(verify(in, ref, q[0], k[0], v[0]).pass);
  }
}

TEST_CASE("qkv_proj wgmma_ws: steps whose scale fp16 cannot hold take the fp32 decode (no inf * 0)", "[gpu][qkv]") {
  if (!has_sm90a("the wgmma mainloops")) return;
  for (auto f : {quant::Format::mxfp4, quant::Format::nf4}) {
    Problem p = qwen(f, DType::f16, 70);
    const HostInputs in = zero_blocks_under_huge_scales(p, 67);
    const auto cs = configs_of(p, Mainloop::wgmma_ws, 1, [&](const Config& c) { return c.ws.stages == 4; });
    REQUIRE(!cs.empty());
    const auto kernels = load(p, cs);
    run_and_check(in, cs, kernels, 70);
  }
}

TEST_CASE(
    "qkv_proj wgmma_pairs: every variant for fp16 and bf16 (row-major and K-blocked), partial token tiles, tiles "
    "across heads, other head layouts",
    "[gpu][qkv]") {
  if (!has_sm90a("the wgmma_pairs mainloop")) return;
  const std::pair<quant::Format, DType> wide[] = {{quant::Format::fp16, DType::f16},
                                                  {quant::Format::bf16, DType::bf16},
                                                  {quant::Format::fp16_kb64, DType::f16},
                                                  {quant::Format::bf16_kb64, DType::bf16}};
  for (auto [f, d] : wide) {
    // Qwen2.5-7B (36 heads of 64 RoPE pairs): M = 300 runs every binary (tile_m 64 / 128: 44-token partial last
    // tiles; boxes of 4 / 8 / 16 pairs of 2..8 heads, head groups across the Q / K / V boundaries, the last group
    // partly past the weight for 5, 6 and 8 heads); M = 37 every tile_m 64 variant with a 4-slot ring (mbarrier phases
    // flip every 4 steps), M = 17 (the smallest M the space is offered for) with 8.
    const HostInputs big = make_inputs(qwen(f, d, 300), 91);
    const auto c300 = configs_of(big.problem, Mainloop::wgmma_pairs, 1);
    const auto c37 =
        configs_of(qwen(f, d, 37), Mainloop::wgmma_pairs, 1, [&](const Config& c) { return c.pairs.stages == 4; });
    const auto c17 =
        configs_of(qwen(f, d, 17), Mainloop::wgmma_pairs, 1, [&](const Config& c) { return c.pairs.stages == 8; });
    REQUIRE(c300.size() >= 45);
    REQUIRE(c37.size() >= 8);
    REQUIRE(c17.size() >= 8);
    run_sets(big, {{300, c300, 48}, {37, c37, 37}, {17, c17, 17}});
  }
  // 32/8 heads (48), K = 4096, without bias and RoPE; head_dim 64 (32 pairs per head, so chunks of 4 / 8 / 16 pairs
  // are a half to an eighth of a head) with bias and RoPE, K = 1024.
  for (auto [f, d] : wide) {
    const Problem p = heads_32_8(f, d, 130);
    const HostInputs in = make_inputs(p, 93);
    const auto cs = configs_of(p, Mainloop::wgmma_pairs, 1, [&](const Config& c) { return c.pairs.stages == 4; });
    REQUIRE(cs.size() >= 14);
    const auto kernels = load(p, cs);
    run_and_check(in, cs, kernels, 40);
    Problem p64 = qwen(f, d, 70);
    p64.head_dim = 64;
    p64.k = 1024;
    const HostInputs in64 = make_inputs(p64, 95);
    const auto cs64 = configs_of(p64, Mainloop::wgmma_pairs, 1, [&](const Config& c) { return c.pairs.stages == 6; });
    REQUIRE(cs64.size() >= 14);
    const auto kernels64 = load(p64, cs64);
    run_and_check(in64, cs64, kernels64, 70);
  }
}

// Hidden (run by name or "[.stress]"): repeats the gemv configs of some problems many times, each launch poisoned and
// checked, and prints every failure with its worst elements; for intermittent faults a single pass can miss.
// Comma lists: KT_STRESS_FORMAT (default int8), KT_STRESS_DTYPE (fp16 / bf16, default fp16), KT_STRESS_M (default 16);
// KT_STRESS_ONLY (ECMAScript regex on the variant name, default all), KT_STRESS_REPS (default 100), KT_STRESS_SPLIT
// (configs_of's max_split: 0 = the balanced tail only (default), 16 = every split_k >= 1).
TEST_CASE("qkv_proj gemv stress: variants launched many times", "[gpu][qkv][.stress]") {
  auto env_or = [](const char* n, const char* d) {
    const char* v = std::getenv(n);
    return std::string(v ? v : d);
  };
  auto list = [&](const char* n, const char* d) {
    std::vector<std::string> out;
    std::stringstream ss(env_or(n, d));
    for (std::string x; std::getline(ss, x, ',');)
      if (!x.empty()) out.push_back(x);
    return out;
  };
  const int reps = std::stoi(env_or("KT_STRESS_REPS", "100")), max_split = std::stoi(env_or("KT_STRESS_SPLIT", "0"));
  const std::regex only(env_or("KT_STRESS_ONLY", ""));
  auto& env = Env::get();
  int total_fail = 0;
  for (const auto& fs : list("KT_STRESS_FORMAT", "int8"))
    for (const auto& ds : list("KT_STRESS_DTYPE", "fp16"))
      for (const auto& ms : list("KT_STRESS_M", "16")) {
        const DType d = ds == "bf16"   ? DType::bf16
                        : ds == "fp16" ? DType::f16
                                       : throw std::invalid_argument("KT_STRESS_DTYPE: " + ds);
        const Problem p = qwen(quant::parse_format(fs), d, std::stoi(ms));
        std::vector<Config> cs;
        for (const auto& c : configs_of(p, Mainloop::gemv, max_split))
          if (std::regex_search(variant_name(p, c, env.arch), only)) cs.push_back(c);
        if (cs.empty()) {
          std::printf("stress: %s: no variant matches\n", p.key().c_str());
          continue;
        }
        const HostInputs in = make_inputs(p, 45);
        const RefRows ref = reference_rows(in, size_t(p.m), 7);
        const auto kernels = load(p, cs);
        DeviceInputs dev(in, 1);
        int fail = 0;
        for (int rep = 0; rep < reps; ++rep)
          for (const auto& c : cs) {  // interleaved, as the tests run them: each launch follows another config's
            dev.poison();
            launch(*kernels.at(name_expression(p, c)), p, c, dev.params(0, c), env.stream.get());
            env.stream.synchronize();
            std::vector<uint16_t> q, kk, v;
            dev.download(q, kk, v);
            const Verdict vd = verify(in, ref, q, kk, v);
            if (vd.pass) continue;
            ++fail;
            std::printf("stress: rep %d %s: %s\n", rep, variant_name(p, c, env.arch).c_str(), vd.message.c_str());
            // the elements off by more than 5 % of the output's RMS: tensor, token, feature (head * D + d), got, want
            int shown = 0;
            for (int t = 0; t < 3; ++t) {
              const auto& got = t == 0 ? q : t == 1 ? kk : v;
              const auto& want = t == 0 ? ref.q : t == 1 ? ref.k : ref.v;
              const size_t row = size_t(t == 0 ? p.num_heads : p.num_kv_heads) * p.head_dim;
              double ss = 0;
              for (double w : want) ss += w * w;
              const double rms = std::sqrt(ss / double(want.size()));
              for (size_t j = 0; j < ref.rows.size(); ++j)
                for (size_t e = 0; e < row; ++e) {
                  const double g = dtype_to_float(p.dtype, got[size_t(ref.rows[j]) * row + e]), w = want[j * row + e];
                  if (!(std::fabs(g - w) <= 0.05 * rms) && shown++ < 24)
                    std::printf("  %c token %d feature %zu: got %g want %g\n", "QKV"[t], ref.rows[j], e, g, w);
                }
            }
            std::printf("  (%d elements off by > 5 %% of RMS)\n", shown);
          }
        std::printf("stress: %s, %zu variants x %d launches, %d failed\n", p.key().c_str(), cs.size(), reps, fail);
        total_fail += fail;
      }
  CHECK(total_fail == 0);
}
