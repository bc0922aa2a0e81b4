// attention_decode family (CPU): space enumeration and pruning, invalid_reason rules, names, JSON round trips,
// problem and argument errors naming the field, launch dims and workspace, the Family adapter.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <regex>
#include <set>
#include <tuple>

#include "generator/arch.h"
#include "generator/decode_family.h"
#include "generator/registry.h"

using namespace kt;
using namespace kt::decode;

namespace {
Problem qwen(int batch = 16, int kv_len = 4096, KvLayout layout = KvLayout::paged, int q_len = 1) {
  Problem p;
  p.dtype = DType::bf16;
  p.batch = batch;
  p.q_len = q_len;
  p.num_heads = 28;
  p.num_kv_heads = 4;
  p.head_dim = 128;
  p.kv_len = kv_len;
  p.kv_layout = layout;
  p.page_size = layout == KvLayout::paged ? 64 : 0;
  return p;
}

long long blocks(const Problem& p, const Config& c) {
  const LaunchDims d = launch_dims(p, c);
  return (long long)d.grid_x * d.grid_y * d.grid_z;
}

/// Kernel arguments for p with 16-byte aligned fake device pointers (never dereferenced on the host).
DecodeParams fake_params(const Problem& p) {
  auto ptr = [](uintptr_t a) { return reinterpret_cast<void*>(a); };
  const int* lens = static_cast<const int*>(ptr(0x20000));
  if (p.kv_layout == KvLayout::paged)
    return paged_params(p, ptr(0x10000), ptr(0x30000), ptr(0x40000), ptr(0x50000), nullptr, lens,
                        static_cast<const int*>(ptr(0x60000)), 1000, (p.kv_len + p.page_size - 1) / p.page_size);
  return contiguous_params(p, ptr(0x10000), ptr(0x30000), ptr(0x40000), ptr(0x50000), nullptr, lens, p.kv_len);
}
}  // namespace

TEST_CASE("attention_decode: config space is the Cartesian product of the declared axes", "[generator]") {
  const auto space = config_space();
  // tile_m x tile_n x warps x stages x wgmma 0 / 1 x (9 kv_chunks with cluster 1, the 8 nonzero ones again with the
  // cooperative merge, and kv_chunk 0 with clusters 2, 4, 8, 16; clusters of kv_chunk splits are valid configs the
  // space leaves out)
  CHECK(space.size() == 3 * 4 * 3 * 4 * 2 * (9 + 8 + 4));
  std::set<std::tuple<int, int, int, int, int, int, int, int>> seen;
  for (const auto& c : space) {
    seen.insert({c.tile_m, c.tile_n, c.warps, c.stages, c.kv_chunk, c.cluster, c.wgmma, c.cooperative});
    CHECK((c.cluster == 1 || c.kv_chunk == 0));
    CHECK((c.cooperative == 0 || (c.cluster == 1 && c.kv_chunk > 0)));
    CHECK((c.wgmma == 0 || c.wgmma == 1));
  }
  CHECK(seen.size() == space.size());
}

TEST_CASE("attention_decode: invalid_reason names each broken rule", "[generator]") {
  const ArchId a90 = parse_arch("sm_90a");
  auto why = [&](const Config& c, int d = 128, ArchId arch = parse_arch("sm_90a")) {
    const char* r = invalid_reason(DType::bf16, d, KvLayout::paged, c, arch);
    return std::string(r ? r : "");
  };
  CHECK(why({16, 64, 4, 3, 0}).empty());
  CHECK(why({16, 64, 4, 3, 512}).empty());
  CHECK_THAT(why({48, 64, 4, 3, 0}), Catch::Contains("tile_m"));
  CHECK_THAT(why({16, 64, 3, 3, 0}), Catch::Contains("warps"));
  CHECK_THAT(why({64, 64, 2, 3, 0}), Catch::Contains("multiple of tile_m / 16"));  // 4 row groups, 2 warps
  CHECK_THAT(why({16, 96, 2, 3, 0}), Catch::Contains("tile_n must be 32, 64, 128 or 256"));
  CHECK_THAT(why({16, 32, 4, 3, 0}), Catch::Contains("multiple of 16 * warps"));  // 4 key groups x 16 > 32
  CHECK_THAT(why({16, 64, 4, 1, 0}), Catch::Contains("stages"));
  CHECK_THAT(why({16, 64, 4, 7, 0}), Catch::Contains("stages"));
  CHECK_THAT(why({16, 64, 4, 3, 100}), Catch::Contains("kv_chunk"));
  CHECK_THAT(why({16, 64, 4, 3, -64}), Catch::Contains("kv_chunk"));
  CHECK_THAT(why({16, 256, 4, 6, 0}), Catch::Contains("shared memory"));  // 6 x 128 KB ring
  CHECK_THAT(why({16, 64, 4, 3, 0}, 96), Catch::Contains("head_dim"));
  CHECK_THAT(why({16, 64, 4, 3, 0}, 128, ArchId{75, false}), Catch::Contains("sm_80"));
  CHECK(std::string(invalid_reason(DType(7), 128, KvLayout::paged, {16, 64, 4, 3, 0}, a90)).find("dtype") !=
        std::string::npos);
  CHECK(std::string(invalid_reason(DType::bf16, 128, KvLayout(5), {16, 64, 4, 3, 0}, a90)).find("kv_layout") !=
        std::string::npos);
  // cluster: 1 / 2 / 4 / 8 / 16, sm_90 only; with kv_chunk 0 (the launch sizes the splits) or a chunk of whole tiles.
  for (int cl : {2, 4, 8, 16}) CHECK(why({16, 64, 4, 3, 0, cl}).empty());
  CHECK(why({16, 64, 4, 3, 512, 8}).empty());
  CHECK_THAT(why({16, 64, 4, 3, 96, 8}), Catch::Contains("multiple of tile_n"));
  CHECK_THAT(why({16, 64, 4, 3, 0, 3}), Catch::Contains("cluster must be 1, 2, 4, 8 or 16"));
  CHECK_THAT(why({16, 64, 4, 3, 0, 32}), Catch::Contains("cluster must be"));
  CHECK_THAT(why({16, 64, 4, 3, 0, 2}, 128, parse_arch("sm_89")), Catch::Contains("needs sm_90"));
  // wgmma: 0 / 1; sm_90a only (not sm_90 without the arch-specific features); one warpgroup per key group over 64 rows;
  // its keys and 64 rows' accumulators in registers.
  CHECK(why({64, 128, 8, 3, 0, 1, 1}).empty());
  CHECK(why({64, 128, 8, 3, 0, 2, 1}).empty());
  CHECK(why({64, 64, 4, 6, 0, 1, 1}).empty());
  CHECK_THAT(why({64, 128, 8, 3, 0, 1, 2}), Catch::Contains("wgmma must be 0 or 1"));
  CHECK_THAT(why({64, 128, 8, 3, 0, 1, 1}, 128, ArchId{90, false}), Catch::Contains("wgmma needs sm_90a"));
  CHECK_THAT(why({64, 128, 8, 3, 0, 1, 1}, 128, parse_arch("sm_89")), Catch::Contains("wgmma needs sm_90a"));
  CHECK_THAT(why({32, 64, 8, 3, 0, 1, 1}), Catch::Contains("wgmma needs tile_m 64"));
  CHECK_THAT(why({64, 256, 4, 2, 0, 1, 1}, 64), Catch::Contains("registers"));  // 256 keys' scores and P fragments
  // The same ring fits sm_90 but not sm_86's 99 KB.
  CHECK(why({16, 128, 4, 3, 0}).empty());
  CHECK_THAT(why({16, 128, 4, 3, 0}, 128, parse_arch("sm_86")), Catch::Contains("shared memory"));
}

TEST_CASE("attention_decode: a cluster's receive area lies past the ring and combine area and holds every item",
          "[generator]") {
  const ArchId a90 = parse_arch("sm_90a");
  int checked = 0;
  for (const auto& c : config_space())
    for (int d : {64, 128}) {
      if (invalid_reason(DType::bf16, d, KvLayout::contiguous, c, a90) != nullptr) continue;
      INFO("tile_m " << c.tile_m << " tile_n " << c.tile_n << " warps " << c.warps << " stages " << c.stages
                     << " cluster " << c.cluster << " head_dim " << d);
      if (c.cluster == 1) {
        CHECK(cluster_recv_bytes(c, d) == 0);
        continue;
      }
      // Every (row, 4-column) item of the row block has an owner's slot; the area starts past everything the
      // mainloop and the block merge write, so a block can receive while its mainloop runs.
      CHECK(cluster_items(c, d) * c.cluster >= c.tile_m * d / 4);
      CHECK(cluster_recv_offset(c, d) >= ring_bytes(c, d));
      CHECK(cluster_recv_offset(c, d) >= combine_bytes(c, d));
      CHECK(cluster_recv_offset(c, d) % 16 == 0);  // float4 slots
      CHECK(cluster_recv_bytes(c, d) == (c.cluster - 1) * (c.tile_m * 4 + cluster_items(c, d) * 16));
      CHECK(smem_bytes(c, d) == cluster_recv_offset(c, d) + cluster_recv_bytes(c, d));
      ++checked;
    }
  CHECK(checked > 100);
  // The receive area holds the other blocks' shares only: m64 n128 w8 3 stages at head_dim 128 is 208 KB, plus 16.3 KB
  // to receive from the other block of a cluster of 2 (it fits the 227 KB), or 24.8 KB from the 3 others of a cluster
  // of 4 (it does not).
  Config c{64, 128, 8, 3, 0, 1};
  CHECK(invalid_reason(DType::bf16, 128, KvLayout::contiguous, c, a90) == nullptr);
  c.cluster = 2;
  CHECK(smem_bytes(c, 128) == 212992 + 16640);
  CHECK(invalid_reason(DType::bf16, 128, KvLayout::contiguous, c, a90) == nullptr);
  c.cluster = 4;
  CHECK_THAT(std::string(invalid_reason(DType::bf16, 128, KvLayout::contiguous, c, a90)),
             Catch::Contains("shared memory"));
}

TEST_CASE("attention_decode: pruning keeps valid configs that fit the problem and the GPU", "[generator]") {
  for (const char* arch_name : {"sm_80", "sm_86", "sm_90a"}) {
    const ArchId arch = parse_arch(arch_name);
    const DeviceModel dev = device_model(arch);
    for (int d : {64, 128})
      for (auto [b, kv, q_len, hq, hkv] : {std::tuple{1, 4096, 1, 28, 4},
                                           {16, 4096, 1, 28, 4},
                                           {64, 2048, 1, 28, 4},
                                           {1, 32768, 1, 28, 4},
                                           {16, 4096, 4, 28, 4},
                                           {2, 100, 16, 32, 1}}) {
        Problem p = qwen(b, kv);
        p.head_dim = d;
        p.q_len = q_len;
        p.num_heads = hq;
        p.num_kv_heads = hkv;
        const auto valid = valid_configs(p, arch, dev);
        INFO(arch_name << " " << p.key());
        REQUIRE(!valid.empty());
        const int rows = hq / hkv * q_len;
        std::set<int> tile_ms;
        for (const auto& c : valid) {
          CHECK(invalid_reason(p.dtype, d, p.kv_layout, c, arch) == nullptr);
          CHECK(smem_bytes(c, d) <= max_smem_per_block(arch.sm));
          CHECK(c.tile_m <= (rows + 15) / 16 * 16);
          tile_ms.insert(c.tile_m);
          const int splits = num_splits(c, kv);
          CHECK(splits <= 256);
          if (c.kv_chunk != 0) {
            CHECK(splits > 1);  // a chunk as long as the sequence is the kv_chunk 0 config
            CHECK(blocks(p, c) <= 16LL * dev.sm_count);
          }
        }
        CHECK(tile_ms.size() == 1);  // one tile_m: the fewest row blocks
        // The first candidate (the default) has the grid nearest one block per SM; a cluster default is within a
        // factor of 2 of it (default_config).
        auto fill = [&](const Config& c) { return std::fabs(std::log(double(blocks(p, c)) / dev.sm_count)); };
        const double slack = valid.front().cluster > 1 ? std::log(2.0) + 1e-9 : 0;
        for (const auto& c : valid) CHECK(fill(c) + slack >= fill(valid.front()));
        // The first 24 candidates (a short tune) try grids on both sides of one block per SM where both exist, and
        // at least three splits where three exist.
        const size_t head = std::min<size_t>(24, valid.size());
        std::set<long long> all_grids, head_grids;
        for (const auto& c : valid) all_grids.insert(blocks(p, c));
        bool below = false, above = false, head_below = false, head_above = false;
        for (size_t i = 0; i < valid.size(); ++i) {
          const long long n = blocks(p, valid[i]);
          below |= n <= dev.sm_count;
          above |= n >= dev.sm_count;
          if (i < head) {
            head_grids.insert(n);
            head_below |= n <= dev.sm_count;
            head_above |= n >= dev.sm_count;
          }
        }
        CHECK(head_below == below);
        CHECK(head_above == above);
        CHECK(head_grids.size() >= std::min<size_t>(3, all_grids.size()));
      }
  }
}

TEST_CASE("attention_decode: a short tune tries the coarse splits and the best shapes", "[generator]") {
  const ArchId arch = parse_arch("sm_90a");
  const DeviceModel dev = device_model(arch);
  auto first = [&](const Problem& p, size_t n) {
    auto v = valid_configs(p, arch, dev);
    v.resize(std::min(n, v.size()));
    return v;
  };
  auto has_chunk = [](const std::vector<Config>& v, int chunk) {
    return std::any_of(v.begin(), v.end(), [&](const Config& c) { return c.kv_chunk == chunk; });
  };
  // The splits one block per SM wants are among the first 24, with the no-split config where its grid is as near.
  const auto b1_long = first(qwen(1, 32768, KvLayout::contiguous), 24);
  CHECK(has_chunk(b1_long, 1024));  // 128 blocks
  CHECK(has_chunk(b1_long, 2048));  // 64 blocks
  CHECK(has_chunk(b1_long, 512));   // 256 blocks
  const auto b16 = first(qwen(16, 4096, KvLayout::contiguous), 24);
  CHECK(has_chunk(b16, 2048));  // 128 blocks
  CHECK(has_chunk(b16, 1024));  // 256 blocks
  CHECK(has_chunk(b16, 0));     // 64 blocks
  const auto b1 = first(qwen(1, 4096, KvLayout::contiguous), 24);
  CHECK(has_chunk(b1, 128));
  CHECK(has_chunk(b1, 256));
  CHECK(has_chunk(b1, 64));
  CHECK(first(qwen(64, 2048, KvLayout::contiguous), 1).front().kv_chunk == 0);  // 256 blocks unsplit
  // A split grid that one wave of its best shape holds is not tried in two waves of a deeper ring: B 16 kv 4096 at
  // kv_chunk 1024 (256 blocks) with m16_n64_w4 3 stages (2 blocks per SM), not 4 stages (1 block per SM).
  for (const auto& c : b16) {
    const long long per_sm = std::min<long long>(dev.smem_per_sm / (smem_bytes(c, 128) + 1024), 2048 / (32 * c.warps));
    INFO("m" << c.tile_m << "_n" << c.tile_n << "_w" << c.warps << "_s" << c.stages << "_c" << c.kv_chunk);
    if (c.kv_chunk != 0) CHECK(blocks(qwen(16, 4096, KvLayout::contiguous), c) <= dev.sm_count * per_sm);
  }
  auto has = [](const std::vector<Config>& v, Config x) {
    return std::any_of(v.begin(), v.end(), [&](const Config& c) { return same_config(c, x); });
  };
  CHECK(has(b16, Config{16, 64, 4, 3, 1024}));
  CHECK_FALSE(has(b16, Config{16, 64, 4, 4, 1024}));
  // A cluster split shares its kv_chunk twin's rectangle where the split decides it: the first 16 of B 1 q_len 4
  // kv 4096 (H200 exhaustive winner m32_n64_w8_s6 cluster 16, 1.16x ahead of the best kv_chunk split) and of B 4
  // kv 512 (m16_n64_w4_s6 cluster 4) hold cluster configs of the winners' grids.
  auto has_cluster = [](const std::vector<Config>& v, int cluster) {
    return std::any_of(v.begin(), v.end(), [&](const Config& c) { return c.cluster == cluster; });
  };
  CHECK(has_cluster(first(qwen(1, 4096, KvLayout::contiguous, 4), 16), 16));
  CHECK(has_cluster(first(qwen(4, 512, KvLayout::contiguous), 16), 4));
  // tile_m 64 (q_len 8) ranks 64 keys per warp with the shortest: m64_n128_w8 (tile_n 128 won every q_len 8 problem
  // of shapes/qwen7b.json on the H200, 10-15% ahead of tile_n 64) is among the first 16 of B 16 kv 4096.
  const auto q8 = first(qwen(16, 4096, KvLayout::contiguous, 8), 16);
  CHECK(std::any_of(q8.begin(), q8.end(), [](const Config& c) { return c.tile_m == 64 && c.tile_n == 128; }));
  // On sm_90a its wgmma configs come before their mma.sync twins (default_config says why).
  const auto q8_all = valid_configs(qwen(16, 4096, KvLayout::contiguous, 8), arch, dev);
  auto position = [&](Config c) {
    return std::find_if(q8_all.begin(), q8_all.end(), [&](const Config& x) { return same_config(x, c); }) -
           q8_all.begin();
  };
  CHECK(q8.front().wgmma == 1);
  CHECK(position(Config{64, 128, 8, 3, 0, 2, 1}) < position(Config{64, 128, 8, 3, 0, 2, 0}));
  // A cluster split whose block's slice fits a deeper ring whole swaps places with its 3-stage config: Llama-3.1-8B
  // heads (32 / 8), B 1, 2048 keys, a cluster of 8 (4 tiles of 64 keys per block; H200: 6 stages 2-3% faster than
  // 3 or 4, rank 51 without the swap) comes in the first 16, ahead of its 3-stage config; with the 3-stage config
  // the default (Qwen2.5-7B B 1 kv 4096, cluster 16), nothing swaps and the default stays first.
  Problem llama = qwen(1, 2048, KvLayout::contiguous);
  llama.num_heads = 32;
  llama.num_kv_heads = 8;
  const auto ll = valid_configs(llama, arch, dev);
  auto rank = [](const std::vector<Config>& v, Config x) {
    return size_t(std::find_if(v.begin(), v.end(), [&](const Config& c) { return same_config(c, x); }) - v.begin());
  };
  Config s6_cl8{16, 64, 4, 6, 0}, s3_cl8{16, 64, 4, 3, 0};
  s6_cl8.cluster = s3_cl8.cluster = 8;
  CHECK(rank(ll, s6_cl8) < 16);
  CHECK(rank(ll, s6_cl8) < rank(ll, s3_cl8));
  CHECK(rank(ll, s3_cl8) < ll.size());  // still a candidate, later
  const auto q4096 = valid_configs(qwen(1, 4096, KvLayout::contiguous), arch, dev);
  REQUIRE(!q4096.empty());
  CHECK(same_config(q4096.front(), default_config(arch, qwen(1, 4096, KvLayout::contiguous))));
  Config s6_cl16 = q4096.front();
  s6_cl16.stages = 6;
  REQUIRE(q4096.front().cluster == 16);
  REQUIRE(q4096.front().stages == 3);
  CHECK(rank(q4096, s6_cl16) > 16);
  // 4 warps per 16-row group (at most 8) with 16 keys per warp and 3 stages lead (m16_n64_w4_s3 for 7 rows,
  // m32_n64_w8_s3 for 28).
  for (const auto& c : {first(qwen(16, 4096), 1).front(), first(qwen(1, 4096), 1).front(),
                        first(qwen(16, 4096, KvLayout::contiguous, 4), 1).front()}) {
    CHECK(c.warps == std::min(8, 4 * c.tile_m / 16));
    CHECK(warp_keys(c) == 16);
    CHECK(c.stages == 3);
  }
}

TEST_CASE("attention_decode: the default config is valid and splits to fill the GPU", "[generator]") {
  const ArchId arch = parse_arch("sm_90a");
  const int sms = device_model(arch).sm_count;
  for (auto [b, kv] : {std::pair{1, 4096}, {1, 32768}, {16, 4096}, {64, 2048}, {1, 1}, {3, 17}}) {
    const Problem p = qwen(b, kv);
    const Config c = default_config(arch, p);
    INFO(p.key());
    CHECK(invalid_reason(p.dtype, p.head_dim, p.kv_layout, c, arch) == nullptr);
    CHECK(c.tile_m == 16);  // 7 packed rows
    if (b * p.num_kv_heads >= sms) CHECK(c.kv_chunk == 0);
    // No whole-tile chunk of the same shape gives a grid nearer one block per SM; a cluster default (kv_chunk 0) is
    // within a factor of 2 of the nearest, as near when its slices are longer than 1024 keys.
    auto fill = [&](const Config& x) { return std::fabs(std::log(double(blocks(p, x)) / sms)); };
    Config as_chunks = c;
    as_chunks.cluster = 1;
    for (int chunk = 0; chunk <= std::min(kv, 65536); chunk += c.tile_n) {
      Config x = as_chunks;
      x.kv_chunk = chunk;
      if (num_splits(x, kv) > 256) continue;
      if (c.cluster == 1) CHECK(fill(c) <= fill(x));
      else CHECK(fill(c) <= fill(x) + (split_keys(c, kv) <= 1024 ? std::log(2.0) : 0) + 1e-9);
    }
  }
  // B 1 kv 32768 (4 KV heads): 32 splits of 1024 keys, 128 blocks on 132 SMs (a cluster of 16 would halve the grid
  // with slices of 2048 keys); B 1 kv 4096: a cluster of 16 (64 blocks, slices of 256 keys; 32 chunk splits would
  // give 128); B 16 kv 4096: a cluster of 2 (128 blocks, as near as 2 chunk splits).
  CHECK(default_config(arch, qwen(1, 32768)).kv_chunk == 1024);
  CHECK(default_config(arch, qwen(1, 4096)).cluster == 16);
  CHECK(default_config(arch, qwen(16, 4096)).cluster == 2);
  CHECK(default_config(parse_arch("sm_80"), qwen(16, 4096)).kv_chunk == 2048);  // no clusters before sm_90
  CHECK(default_config(arch, qwen(64, 2048)).kv_chunk == 0);  // 256 blocks without split: every SM has one
  CHECK(default_config(arch, qwen(1, 1)).kv_chunk == 0);      // one key: nothing to split
  Problem p = qwen(4, 4096, KvLayout::contiguous, 16);        // 112 rows: tile_m 64
  CHECK(default_config(arch, p).tile_m == 64);
  CHECK(default_config(arch, p).wgmma == 1);  // tile_m 64 on sm_90a: the wgmma mainloop
  CHECK(default_config(ArchId{90, false}, p).wgmma == 0);
  CHECK(default_config(arch, qwen(16, 4096)).wgmma == 0);  // tile_m 16: mma.sync
  // Every arch, head dim, row count and layout has a valid default.
  for (const char* name : {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"})
    for (int d : {64, 128})
      for (int q_len : {1, 4, 16})
        for (auto [hq, hkv] : {std::pair{32, 32}, {28, 4}, {32, 1}})
          for (KvLayout l : {KvLayout::contiguous, KvLayout::paged}) {
            Problem x = qwen(2, 3000, l, q_len);
            x.head_dim = d;
            x.num_heads = hq;
            x.num_kv_heads = hkv;
            INFO(name << " " << x.key());
            const ArchId a = parse_arch(name);
            Config c{};
            REQUIRE_NOTHROW(c = default_config(a, x));
            CHECK(invalid_reason(x.dtype, d, l, c, a) == nullptr);
          }
}

TEST_CASE("attention_decode: names spell every axis and kv_chunk shares the binary", "[generator]") {
  const ArchId arch = parse_arch("sm_90a");
  const Problem p = qwen();
  const Config c{16, 64, 4, 3, 512};
  CHECK(variant_name(p, c, arch) == "attention_decode__bf16_d128_paged64__m16_n64_w4_s3_c512__sm_90a");
  CHECK(name_expression(p, c) ==
        "kt::decode::attention_decode<kt::DType::bf16, 128, kt::decode::KvLayout::paged, 64, 16, 64, 4, 3, false>");
  Config c0 = c;
  c0.kv_chunk = 0;
  CHECK(name_expression(p, c0) == name_expression(p, c));
  CHECK(variant_name(p, c0, arch) != variant_name(p, c, arch));
  // Batch, q_len, heads, kv_len and causal are run-time arguments of one binary.
  Problem other = qwen(3, 100, KvLayout::paged, 5);
  other.causal = false;
  other.num_heads = 8;
  other.num_kv_heads = 8;
  CHECK(variant_name(other, c, arch) == variant_name(p, c, arch));
  CHECK(name_expression(other, c) == name_expression(p, c));
  // The page size is compiled in: another page size is another kernel.
  other.page_size = 16;
  CHECK(variant_name(other, c, arch) == "attention_decode__bf16_d128_paged16__m16_n64_w4_s3_c512__sm_90a");
  CHECK(name_expression(other, c) ==
        "kt::decode::attention_decode<kt::DType::bf16, 128, kt::decode::KvLayout::paged, 16, 16, 64, 4, 3, false>");
  Problem contig = qwen(16, 4096, KvLayout::contiguous);
  CHECK(name_expression(contig, c) ==
        "kt::decode::attention_decode<kt::DType::bf16, 128, kt::decode::KvLayout::contiguous, 0, 16, 64, 4, 3, false>");
  CHECK(variant_name(contig, c, arch) == "attention_decode__bf16_d128_contiguous__m16_n64_w4_s3_c512__sm_90a");
  // Every config of the space has its own name.
  std::set<std::string> names;
  for (const auto& x : config_space()) names.insert(variant_name(p, x, arch));
  CHECK(names.size() == config_space().size());
  const std::regex re(
      "attention_decode__(bf16|fp16)_d(64|128)_(paged(16|32|64|128|256)|contiguous)__m\\d+_n\\d+_w\\d_s\\d_c\\d+__sm_"
      "\\d+a?");
  CHECK(std::regex_match(variant_name(p, c, arch), re));
  CHECK(std::regex_match(variant_name(contig, c, arch), re));
  // A cluster config: its own kernel (the cluster dims are compiled in), "_cl<n>" in the name.
  const Config cl{16, 64, 4, 3, 0, 4};
  CHECK(variant_name(p, cl, arch) == "attention_decode__bf16_d128_paged64__m16_n64_w4_s3_c0_cl4__sm_90a");
  CHECK(name_expression(p, cl) ==
        "kt::decode::attention_decode_cluster<kt::DType::bf16, 128, kt::decode::KvLayout::paged, 64, 16, 64, 4, 3, 4, "
        "false>");
  // A wgmma config: its own kernel, "_wgmma" in the name, "wgmma": 1 in its JSON (absent for mma.sync).
  const Config wg{64, 128, 8, 3, 0, 2, 1};
  CHECK(variant_name(p, wg, arch) == "attention_decode__bf16_d128_paged64__m64_n128_w8_s3_c0_cl2_wgmma__sm_90a");
  CHECK(name_expression(p, wg) ==
        "kt::decode::attention_decode_cluster<kt::DType::bf16, 128, kt::decode::KvLayout::paged, 64, 64, 128, 8, 3, 2, "
        "true>");
  CHECK(config_to_json(wg).value("wgmma", 0) == 1);
  CHECK(!config_to_json(cl).contains("wgmma"));
  CHECK(same_config(config_from_json(config_to_json(wg)), wg));
  CHECK(!same_config(config_from_json(config_to_json(wg)), cl));
  const KernelSource k = kernel_source(p, c, arch);
  CHECK(k.source.find("attention_decode/attention_decode.cuh") != std::string::npos);
  CHECK(k.dynamic_smem_bytes == unsigned(smem_bytes(c, 128)));
}

TEST_CASE("attention_decode: invalid_page_size accepts exactly the layouts' page sizes", "[generator]") {
  CHECK(invalid_page_size(KvLayout::contiguous, 0) == nullptr);
  CHECK(invalid_page_size(KvLayout::contiguous, 64) != nullptr);
  for (int ps : {16, 32, 64, 128, 256}) CHECK(invalid_page_size(KvLayout::paged, ps) == nullptr);
  for (int ps : {0, 8, 48, 96, 512}) CHECK(invalid_page_size(KvLayout::paged, ps) != nullptr);
  CHECK(log2_pow2(16) == 4);
  CHECK(log2_pow2(256) == 8);
  CHECK(log2_pow2(1) == 0);
}

TEST_CASE("attention_decode: problem and config JSON round trip; bad JSON names the field", "[generator]") {
  Problem p = qwen(5, 777, KvLayout::paged, 3);
  p.dtype = DType::f16;
  p.page_size = 32;
  p.causal = false;
  const Problem back = problem_from_json(problem_to_json(p));
  CHECK(back.key() == p.key());
  CHECK(problem_to_json(back) == problem_to_json(p));
  CHECK(p.key() == "attention_decode/fp16/b5/q3/h28/kv4/d128/sk777/paged32/full");
  CHECK(qwen(1, 64, KvLayout::contiguous).key() == "attention_decode/bf16/b1/q1/h28/kv4/d128/sk64/contig/causal");
  const Config c{32, 128, 8, 6, 2048};
  CHECK(same_config(config_from_json(config_to_json(c)), c));
  CHECK_FALSE(same_config(c, Config{32, 128, 8, 6, 1024}));
  CHECK_FALSE(config_to_json(c).contains("cluster"));  // configs without a cluster keep their JSON
  const Config cl{32, 128, 8, 6, 0, 8};
  CHECK(config_to_json(cl)["cluster"] == 8);
  CHECK(same_config(config_from_json(config_to_json(cl)), cl));
  CHECK_FALSE(same_config(cl, Config{32, 128, 8, 6, 0}));

  auto j = problem_to_json(p);
  j.erase("kv_len");
  CHECK_THROWS_WITH(problem_from_json(j), Catch::Contains("'kv_len'"));
  j = problem_to_json(p);
  j["kv_layout"] = "blocked";
  CHECK_THROWS_AS(problem_from_json(j), ProblemError);
  CHECK_THROWS_WITH(problem_from_json(j), Catch::Contains("kv_layout"));
  j = problem_to_json(p);
  j["causal"] = 1;
  CHECK_THROWS_WITH(problem_from_json(j), Catch::Contains("'causal' has the wrong type"));
  j = problem_to_json(p);
  j["q_len"] = "1";
  CHECK_THROWS_WITH(problem_from_json(j), Catch::Contains("'q_len'"));
  auto cj = config_to_json(c);
  cj.erase("kv_chunk");
  CHECK_THROWS_WITH(config_from_json(cj), Catch::Contains("'kv_chunk'"));
}

TEST_CASE("attention_decode: unsupported problems are rejected naming the field", "[generator]") {
  CHECK_NOTHROW(check_problem(qwen()));
  auto fails_with = [](Problem p, const char* what) {
    INFO(what);
    CHECK_THROWS_AS(check_problem(p), ProblemError);
    CHECK_THROWS_WITH(check_problem(p), Catch::Contains(what));
  };
  Problem p = qwen();
  p.q_len = 17;
  fails_with(p, "q_len must be 1..16");
  p = qwen();
  p.q_len = 0;
  fails_with(p, "q_len");
  p = qwen();
  p.page_size = 48;
  fails_with(p, "page_size 48");
  p.page_size = 512;
  fails_with(p, "page_size 512");
  p.page_size = 0;
  fails_with(p, "page_size 0");
  p = qwen(16, 4096, KvLayout::contiguous);
  p.page_size = 16;
  fails_with(p, "page_size must be 0 for a contiguous cache");
  p = qwen();
  p.num_heads = 30;
  fails_with(p, "num_heads (30) must be a multiple of num_kv_heads (4)");
  p = qwen();
  p.head_dim = 96;
  fails_with(p, "head_dim 96");
  p = qwen();
  p.batch = 0;
  fails_with(p, "batch must be >= 1");
  p = qwen();
  p.kv_len = 0;
  fails_with(p, "kv_len must be >= 1");
  p = qwen();
  p.batch = 70000;
  fails_with(p, "batch must be <= 65535");
  p = qwen();
  p.dtype = DType(9);
  fails_with(p, "dtype");
}

TEST_CASE("attention_decode: launch dims, workspace sizes and bind_config", "[generator]") {
  const Problem p = qwen(2, 1000, KvLayout::paged, 5);  // 35 rows: 3 row blocks of 16
  const Config c{16, 64, 4, 3, 256};                    // 4 splits
  const LaunchDims d = launch_dims(p, c);
  CHECK(d.grid_x == 3u * 4u);
  CHECK(d.grid_y == 4u);
  CHECK(d.grid_z == 2u);
  CHECK(d.block_x == 128u);
  CHECK(d.smem_bytes == unsigned(smem_bytes(c, 128)));
  CHECK(uses_workspace(p, c));
  const size_t slots = size_t(2) * 4 * 3 * 4;  // batch x kv heads x row blocks x splits
  CHECK(workspace_bytes(p, c) == slots * 16 * (128 + 1) * 4);
  CHECK(counter_bytes(p, c) == size_t(2) * 4 * 3 * 4);
  DecodeParams a = fake_params(p);
  float* ws = reinterpret_cast<float*>(uintptr_t(0x100000));
  unsigned* cnt = reinterpret_cast<unsigned*>(uintptr_t(0x200000));
  bind_config(a, p, c, ws, cnt);
  CHECK(a.kv_chunk == 256);
  CHECK(a.partial_o == ws);
  CHECK(a.partial_lse == ws + slots * 16 * 128);
  CHECK(a.counters == cnt);
  CHECK_NOTHROW(check_params(p, c, a));
  // A chunk as long as kv_len: one split, no workspace, the pointers cleared.
  const Config whole{16, 64, 4, 3, 1024};
  CHECK(launch_dims(p, whole).grid_x == 3u);
  CHECK_FALSE(uses_workspace(p, whole));
  CHECK(workspace_bytes(p, whole) == 0);
  CHECK(counter_bytes(p, whole) == 0);
  bind_config(a, p, whole, ws, cnt);
  CHECK(a.partial_o == nullptr);
  CHECK(a.partial_lse == nullptr);
  CHECK(a.counters == nullptr);
  CHECK_NOTHROW(check_params(p, whole, a));
  // A cluster of 4: 4 splits of ceil(1000 / 4) = 250 keys rounded up to whole tiles (256), split-major blocks of
  // one row block consecutive (one cluster); no workspace, the pointers cleared.
  const Config cl{16, 64, 4, 3, 0, 4};
  CHECK(num_splits(cl, p.kv_len) == 4);
  CHECK(split_keys(cl, p.kv_len) == 256);
  CHECK(launch_dims(p, cl).grid_x == 3u * 4u);
  CHECK_FALSE(uses_workspace(p, cl));
  CHECK(workspace_bytes(p, cl) == 0);
  CHECK(counter_bytes(p, cl) == 0);
  bind_config(a, p, cl, ws, cnt);
  CHECK(a.kv_chunk == 256);
  CHECK(a.partial_o == nullptr);
  CHECK(a.counters == nullptr);
  CHECK_NOTHROW(check_params(p, cl, a));
  a.kv_chunk = 0;
  CHECK_THROWS_WITH(check_params(p, cl, a), Catch::Contains("kv_chunk"));
  // Clusters of 2 chunks of 128: ceil(1000 / 128) = 8 splits, 4 clusters per row block, one workspace partial each.
  const Config cc{16, 64, 4, 3, 128, 2};
  CHECK(num_splits(cc, p.kv_len) == 8);
  CHECK(split_keys(cc, p.kv_len) == 128);
  CHECK(partial_slots(cc, p.kv_len) == 4);
  CHECK(launch_dims(p, cc).grid_x == 3u * 8u);
  CHECK(uses_workspace(p, cc));
  const size_t cslots = size_t(2) * 4 * 3 * 4;  // batch x kv heads x row blocks x clusters
  CHECK(workspace_bytes(p, cc) == cslots * 16 * (128 + 1) * 4);
  CHECK(counter_bytes(p, cc) == size_t(2) * 4 * 3 * 4);
  bind_config(a, p, cc, ws, cnt);
  CHECK(a.kv_chunk == 128);
  CHECK(a.partial_lse == ws + cslots * 16 * 128);
  CHECK_NOTHROW(check_params(p, cc, a));
  // 7 chunks in clusters of 4 round up to 8 splits: 2 clusters, the last block without keys.
  const Config c7{16, 64, 4, 3, 192, 4};
  CHECK(num_splits(c7, 1300) == 8);
  CHECK(partial_slots(c7, 1300) == 2);
  // One cluster of chunks: no workspace.
  CHECK_FALSE(workspace_splits(Config{16, 64, 4, 3, 256, 4}, 1000));
  // FLOPs: causal pairs of 5 new tokens at kv_len 1000 are 996 + ... + 1000.
  CHECK(p.flops() == Approx(4.0 * 2 * 28 * (996 + 997 + 998 + 999 + 1000) * 128));
  CHECK(p.min_bytes() == Approx((2.0 * 2 * 1000 * 4 * 128 + 2.0 * 2 * 5 * 28 * 128) * 2));
}

TEST_CASE("attention_decode: check_params rejects bad arguments naming them", "[generator]") {
  const Problem p = qwen(2, 1000, KvLayout::paged, 1);
  const Config c{16, 64, 4, 3, 256};
  float* ws = reinterpret_cast<float*>(uintptr_t(0x100000));
  unsigned* cnt = reinterpret_cast<unsigned*>(uintptr_t(0x200000));
  auto bound = [&]() {
    DecodeParams a = fake_params(p);
    bind_config(a, p, c, ws, cnt);
    return a;
  };
  auto fails_with = [&](const DecodeParams& a, const char* what) {
    INFO(what);
    CHECK_THROWS_AS(check_params(p, c, a), ProblemError);
    CHECK_THROWS_WITH(check_params(p, c, a), Catch::Contains(what));
  };
  CHECK_NOTHROW(check_params(p, c, bound()));
  DecodeParams a = bound();
  a.num_kv_heads = 8;
  fails_with(a, "num_kv_heads = 8");
  a = bound();
  a.kv_len = 999;
  fails_with(a, "kv_len = 999");
  a = bound();
  a.page_size = 32;
  fails_with(a, "page_size = 32");
  a = bound();
  a.seqlens_k = nullptr;
  fails_with(a, "seqlens_k must be a non-null");
  a = bound();
  a.block_table = nullptr;
  fails_with(a, "block_table must be a non-null");
  a = bound();
  a.q = reinterpret_cast<const void*>(uintptr_t(0x10008));
  fails_with(a, "q must be 16-byte aligned");
  a = bound();
  a.k_row_stride = 4 * 128 + 4;
  fails_with(a, "k_row_stride must be a multiple of 8");
  a = bound();
  a.v_page_stride = 12;
  fails_with(a, "v_page_stride");
  a = bound();
  a.num_pages = 0;
  fails_with(a, "num_pages must be >= 1");
  a = bound();
  a.kv_capacity = a.block_table_stride * p.page_size + 1;
  fails_with(a, "exceeds the block table's");
  a = bound();
  a.kv_capacity = a.block_table_stride * p.page_size - 1;
  fails_with(a, "must be a whole number of pages");
  a = bound();
  a.softmax_scale = -1.f;
  fails_with(a, "softmax_scale");
  a = fake_params(p);  // bind_config not applied: the arguments are fine, the config's part is missing
  CHECK_NOTHROW(check_args(p, a));
  fails_with(a, "kv_chunk = 0 does not match the config's 256");
  a = bound();
  a.counters = nullptr;
  fails_with(a, "needs the workspace and counters");
  // Contiguous: the batch stride is checked, a block table is not needed.
  const Problem pc = qwen(2, 1000, KvLayout::contiguous, 1);
  DecodeParams b = fake_params(pc);
  bind_config(b, pc, c, ws, cnt);
  CHECK_NOTHROW(check_params(pc, c, b));
  b.k_batch_stride = 1001;
  CHECK_THROWS_WITH(check_params(pc, c, b), Catch::Contains("k_batch_stride"));
}

TEST_CASE("attention_decode: the Family adapter and the registry", "[generator]") {
  const Family& f = find_family(kFamily);
  CHECK(&f == &family_type());
  const Problem p = qwen(16, 4096);
  const auto j = problem_to_json(p);
  CHECK(f.canonical_problem(j) == j);
  CHECK(f.problem_key(j) == p.key());
  // The class key is the key less batch and kv_len.
  CHECK(f.class_key(j) == "attention_decode/bf16/q1/h28/kv4/d128/paged64/causal");
  CHECK(f.class_key(problem_to_json(qwen(1, 100))) == f.class_key(j));
  CHECK(f.class_key(problem_to_json(qwen(16, 4096, KvLayout::contiguous))) != f.class_key(j));
  CHECK(f.class_key(problem_to_json(qwen(16, 4096, KvLayout::paged, 4))) != f.class_key(j));
  // Nearness: log distance over batch and kv_len.
  const auto n = f.nearness(problem_to_json(qwen(8, 2048)), j);
  CHECK(n.distance == Approx(std::log(2.0) + std::log(2.0)));
  CHECK(f.nearness(j, j).distance == 0.0);
  CHECK(f.flops(j) == Approx(p.flops()));
  CHECK(f.min_bytes(j) == Approx(p.min_bytes()));
  const ArchId arch = parse_arch("sm_90a");
  const auto configs = f.enumerate(j, arch, device_model(arch));
  REQUIRE(!configs.empty());
  for (const auto& c : configs) CHECK(f.unusable(j, c, arch) == nullptr);
  const auto def = f.default_config(j, arch);
  CHECK(f.unusable(j, def, arch) == nullptr);
  CHECK(f.workspace_bytes(j, def, device_model(arch)) ==
        workspace_bytes(p, config_from_json(def)) + counter_bytes(p, config_from_json(def)));
  auto bad = j;
  bad["q_len"] = 40;
  CHECK_THROWS_AS(f.canonical_problem(bad), ProblemError);
}

TEST_CASE("attention_decode: the cooperative merge's rules, names, counters and place in the candidate order",
          "[generator]") {
  const ArchId arch = parse_arch("sm_90a");
  const DeviceModel dev = device_model(arch);
  auto coop = [](Config c) {
    c.cooperative = 1;
    return c;
  };
  // Valid only for a kv_chunk split without a cluster.
  auto why = [&](const Config& c) {
    const char* r = invalid_reason(DType::bf16, 128, KvLayout::contiguous, c, arch);
    return std::string(r ? r : "");
  };
  CHECK(why(coop({16, 64, 4, 3, 512})).empty());
  CHECK_THAT(why(coop({16, 64, 4, 3, 0})), Catch::Contains("cooperative"));
  CHECK_THAT(why(coop({16, 64, 4, 3, 0, 2})), Catch::Contains("cooperative"));
  Config two = coop({16, 64, 4, 3, 512});
  two.cooperative = 2;
  CHECK_THAT(why(two), Catch::Contains("cooperative"));
  // Name, JSON, and the binary it shares with its last-block twin.
  const Problem p = qwen(1, 32768, KvLayout::contiguous);
  const Config twin{16, 128, 8, 3, 1024}, c = coop(twin);
  CHECK(variant_name(p, c, arch) == "attention_decode__bf16_d128_contiguous__m16_n128_w8_s3_c1024_coop__sm_90a");
  CHECK(variant_name(p, twin, arch) == "attention_decode__bf16_d128_contiguous__m16_n128_w8_s3_c1024__sm_90a");
  CHECK(name_expression(p, c) == name_expression(p, twin));
  CHECK(config_to_json(c)["cooperative"] == 1);
  CHECK_FALSE(config_to_json(twin).contains("cooperative"));
  CHECK(same_config(config_from_json(config_to_json(c)), c));
  CHECK_FALSE(same_config(c, twin));
  // Counters: a generation word per row block after the counters; bind_config passes the flag only for a split.
  CHECK(counter_bytes(p, c) == 2 * counter_bytes(p, twin));
  CHECK(workspace_bytes(p, c) == workspace_bytes(p, twin));
  DecodeParams a = fake_params(p);
  bind_config(a, p, c, reinterpret_cast<float*>(uintptr_t(0x100000)), reinterpret_cast<unsigned*>(uintptr_t(0x200000)));
  CHECK(a.cooperative == 1);
  bind_config(a, p, twin, reinterpret_cast<float*>(uintptr_t(0x100000)),
              reinterpret_cast<unsigned*>(uintptr_t(0x200000)));
  CHECK(a.cooperative == 0);
  const Problem short_p = qwen(1, 1000, KvLayout::contiguous);  // one split of 1024 keys: no workspace, no flag
  bind_config(a, short_p, c, nullptr, nullptr);
  CHECK(a.cooperative == 0);
  // Candidates: each split with one merge, the cooperative one at 8 or more splits per row block where its grid fits
  // the device at once (then in its last-block twin's place), the last block's otherwise; the default of B 1 kv
  // 32768 (32 splits, 128 blocks) is cooperative.
  auto pos = [](const std::vector<Config>& v, const Config& x) {
    return size_t(std::find_if(v.begin(), v.end(), [&](const Config& y) { return same_config(x, y); }) - v.begin());
  };
  const auto b1 = valid_configs(p, arch, dev);
  for (const auto& x : b1) {  // blocks per SM by shared memory (1 KB reserved per block) and threads
    const long long per_sm = std::min<long long>(dev.smem_per_sm / (smem_bytes(x, p.head_dim) + 1024), 64 / x.warps);
    if (x.cooperative) CHECK(blocks(p, x) <= dev.sm_count * per_sm);
    if (x.cooperative) CHECK(num_splits(x, p.kv_len) >= 8);
  }
  CHECK(pos(b1, c) < b1.size());  // 32 splits
  CHECK(pos(b1, twin) == b1.size());
  CHECK(pos(b1, coop({16, 64, 4, 3, 8192})) == b1.size());  // 4 splits
  CHECK(pos(b1, Config{16, 64, 4, 3, 8192}) < b1.size());
  CHECK(default_config(arch, p).cooperative == 1);
  // B 16 kv 4096 with 256-key chunks (16 splits): 1024 blocks of 100 KB never fit at once, so the last-block merge.
  const auto b16 = valid_configs(qwen(16, 4096, KvLayout::contiguous), arch, dev);
  CHECK(pos(b16, coop({16, 64, 4, 3, 256})) == b16.size());
  CHECK(pos(b16, Config{16, 64, 4, 3, 256}) < b16.size());
}
