#include "generator/decode_family.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <type_traits>

#include "generator/arch.h"

namespace kt {
namespace decode {
namespace {

const char* dtype_tag(DType d) { return d == DType::f16 ? "fp16" : "bf16"; }

[[noreturn]] void fail(const std::string& msg) { throw ProblemError(std::string(kFamily) + ": " + msg); }

/// "paged<page_size>" for a paged cache (the spelling of the page size in problem keys and variant names), else
/// `contiguous`.
std::string cache_tag(const Problem& p, const char* contiguous) {
  return p.kv_layout == KvLayout::paged ? "paged" + std::to_string(p.page_size) : std::string(contiguous);
}

int packed_rows(const Problem& p) { return p.num_heads / p.num_kv_heads * p.q_len; }

/// The largest tile_m of {16, 32, 64} no larger than the packed rows rounded up to 16 (fewest row blocks, so the
/// fewest re-reads of K/V) that `valid` accepts, or 16.
template <class Valid>
int pick_tile_m(const Problem& p, Valid valid) {
  const int need = (packed_rows(p) + 15) / 16 * 16;
  int best = 16;
  for (int m : {16, 32, 64})
    if (m <= need && valid(m)) best = m;
  return best;
}

/// Blocks of the launch grid: batch x num_kv_heads x row blocks x splits.
long long grid_blocks(const Problem& p, const Config& c) {
  return static_cast<long long>(p.batch) * p.num_kv_heads * row_blocks(c, p.num_heads, p.num_kv_heads, p.q_len) *
         num_splits(c, p.kv_len);
}

/// How far a grid of `blocks` is from one block per SM, |ln(blocks / sms)|. A decode block streams its KV slice
/// with the ring's tiles in flight, which is enough to keep an SM's share of the HBM bandwidth busy, so one block
/// per SM already fills the GPU; every further split adds a partial write and lengthens the last block's combine
/// (H200, Qwen2.5-7B heads: B 1 kv 4096 takes 13 us at 128 blocks and 18 us at 256; B 1 kv 32768 32 us at 256
/// and 51 us at 512).
double split_fill_distance(long long blocks, long long sms) { return std::fabs(std::log(double(blocks) / sms)); }

/// Blocks of config c one SM holds at once, from the shared memory (the ring, plus the 1 KB the driver reserves per
/// block) and the threads (2048 per SM); at least 1.
long long blocks_per_sm(const Config& c, int head_dim, const DeviceModel& device) {
  const long long by_smem = device.smem_per_sm / (smem_bytes(c, head_dim) + 1024LL);
  const long long by_threads = 2048 / (32LL * c.warps);
  return std::max(1LL, std::min(by_smem, by_threads));
}

/// Whether the kv_chunk split c (cluster 1) merges cooperatively in the candidate list and the default: 8 or more
/// splits per row block, and a grid the device holds at once (valid_configs gives the measurements).
bool cooperative_merge(const Problem& p, const Config& c, const DeviceModel& device) {
  return num_splits(c, p.kv_len) >= 8 &&
         grid_blocks(p, c) <= std::max(1, device.sm_count) * blocks_per_sm(c, p.head_dim, device);
}

bool same_shape(const Config& a, const Config& b) {
  return a.tile_n == b.tile_n && a.warps == b.warps && a.stages == b.stages && a.wgmma == b.wgmma;
}

/// Rank of a tile shape (lower first), from what decides a decode block's speed: four warps per 16-row group or 8 (tile_m
/// 16: 4 or 8 warps, which won 33 and 36 of the 80 q_len 1 problems below; tile_m 32 and 64: 8; fewer leave too few
/// loads in flight), up to tile_m keys per warp per
/// tile (16 at q_len 1; the taller tiles of multi-token decode, with fewer warps per row group, want wider KV tiles:
/// tile_m 64 ran tile_n 128, 64 keys per warp, 10-15% faster than tile_n 64 on every q_len 8 problem of
/// shapes/qwen7b.json), and a ring of 3 tiles (2 or 4 next, 6 last: a deep ring costs occupancy and a long prologue
/// for the short KV slices of a split). Checked against the H200's exhaustive measurements of shapes/qwen7b.json's
/// 120 decode problems (bench/results/nvidia_h200x2_quality_qwen7b_plain.txt): with this rank and the split order
/// below, the best of the first 16 candidates and the best one's depth siblings (autotune's fast strategy) is within
/// 3% of the exhaustive best on 119.
int shape_penalty(const Config& c) {
  const int warps = c.warps == std::min(8, 4 * row_groups(c)) || c.warps == 8 ? 0 : c.warps >= 4 ? 1 : 2;
  const int wk = warp_keys(c), short_keys = c.tile_m;
  const int keys = wk <= short_keys ? 0 : wk <= 32 ? 1 : wk == 64 ? 2 : 3;
  const int stages = c.stages == 3 ? 0 : c.stages == 2 || c.stages == 4 ? 1 : 2;
  // tile_m 64 on sm_90a: the wgmma mainloop first (default_config says why); elsewhere every tile_m 64 config is
  // mma.sync, so the rank moves all of them alike.
  const int mainloop = c.tile_m == 64 && !c.wgmma ? 1 : 0;
  return warps + keys + stages + mainloop;
}
}  // namespace

const char* layout_name(KvLayout l) { return l == KvLayout::paged ? "paged" : "contiguous"; }

KvLayout parse_layout(const std::string& s) {
  if (s == "contiguous") return KvLayout::contiguous;
  if (s == "paged") return KvLayout::paged;
  fail("unknown kv_layout '" + s + "' (expected contiguous or paged)");
}

std::string Problem::key() const {
  std::ostringstream s;
  s << kFamily << '/' << dtype_tag(dtype) << "/b" << batch << "/q" << q_len << "/h" << num_heads << "/kv"
    << num_kv_heads << "/d" << head_dim << "/sk" << kv_len << '/';
  s << cache_tag(*this, "contig") << '/' << (causal ? "causal" : "full");
  return s.str();
}

double Problem::flops() const {
  double pairs = static_cast<double>(q_len) * kv_len;
  if (causal) {
    pairs = 0;
    for (int i = 0; i < q_len; ++i) pairs += std::max(0, std::min(kv_len, kv_len - q_len + i + 1));
  }
  return 4.0 * batch * num_heads * pairs * head_dim;
}

double Problem::min_bytes() const {
  const double kv = 2.0 * batch * kv_len * num_kv_heads * head_dim;
  const double qo = 2.0 * batch * q_len * num_heads * head_dim;
  return (kv + qo) * dtype_bytes(dtype);
}

void check_problem(const Problem& p) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) fail("unknown dtype (expected fp16 or bf16)");
  if (p.batch < 1) fail("batch must be >= 1, got " + std::to_string(p.batch));
  if (p.q_len < 1 || p.q_len > kMaxQLen)
    fail("q_len must be 1.." + std::to_string(kMaxQLen) + ", got " + std::to_string(p.q_len));
  if (p.num_heads < 1) fail("num_heads must be >= 1, got " + std::to_string(p.num_heads));
  if (p.num_kv_heads < 1) fail("num_kv_heads must be >= 1, got " + std::to_string(p.num_kv_heads));
  if (p.num_heads % p.num_kv_heads != 0)
    fail("num_heads (" + std::to_string(p.num_heads) + ") must be a multiple of num_kv_heads (" +
         std::to_string(p.num_kv_heads) + ") for GQA/MQA");
  if (p.head_dim != 64 && p.head_dim != 128)
    fail("head_dim " + std::to_string(p.head_dim) + " is not supported: head_dim must be 64 or 128");
  if (p.kv_len < 1) fail("kv_len must be >= 1, got " + std::to_string(p.kv_len));
  if (p.kv_layout != KvLayout::contiguous && p.kv_layout != KvLayout::paged)
    fail("kv_layout must be contiguous or paged");
  if (const char* why = invalid_page_size(p.kv_layout, p.page_size))
    fail("page_size " + std::to_string(p.page_size) + " is not supported: " + why);
  if (p.batch > 65535) fail("batch must be <= 65535 (grid z), got " + std::to_string(p.batch));
  if (p.num_kv_heads > 65535) fail("num_kv_heads must be <= 65535 (grid y), got " + std::to_string(p.num_kv_heads));
}

std::vector<Config> config_space() {
  std::vector<Config> out;
  for (int tile_m : {16, 32, 64})
    for (int tile_n : {32, 64, 128, 256})
      for (int warps : {2, 4, 8})
        for (int stages : {2, 3, 4, 6})
          for (int chunk : {0, 64, 128, 256, 512, 1024, 2048, 4096, 8192}) {
            // Each config with mma.sync, then (tile_m 64, sm_90a; invalid_reason prunes the rest) with wgmma.
            for (int wgmma : {0, 1}) {
              out.push_back(Config{tile_m, tile_n, warps, stages, chunk, 1, wgmma});
              // The same split with the cooperative merge (every split block merges its share).
              if (chunk != 0) out.push_back(Config{tile_m, tile_n, warps, stages, chunk, 1, wgmma, 1});
              // Clusters over the whole length only: clusters of kv_chunk splits (valid, merged through the
              // workspace) measured no faster than the plain split on the H200 (B 1, kv 4096 and 32768), so the space
              // leaves them out.
              if (chunk == 0)
                for (int cluster : {2, 4, 8, 16})
                  out.push_back(Config{tile_m, tile_n, warps, stages, 0, cluster, wgmma});
            }
          }
  return out;
}

std::vector<Config> valid_configs(const Problem& p, ArchId arch, const DeviceModel& device) {
  const int tile_m = pick_tile_m(p, [&](int m) {
    for (const auto& c : config_space())
      if (c.tile_m == m && invalid_reason(p.dtype, p.head_dim, p.kv_layout, c, arch) == nullptr) return true;
    return false;
  });
  const long long sms = std::max(1, device.sm_count);
  std::vector<Config> kept;
  for (const auto& c : config_space()) {
    if (c.tile_m != tile_m) continue;
    if (invalid_reason(p.dtype, p.head_dim, p.kv_layout, c, arch) != nullptr) continue;
    if (c.kv_chunk != 0 && c.kv_chunk < c.tile_n) continue;
    const int splits = num_splits(c, p.kv_len);
    if (c.kv_chunk != 0 && (splits == 1 || splits > 256)) continue;  // no split: the kv_chunk 0 config is the same
    if (c.cluster > 1 && split_keys(c, p.kv_len) * (c.cluster - 1) >= p.kv_len)
      continue;  // a cluster whose last block would get no key: a smaller cluster is the same split
    if (splits > 1 && grid_blocks(p, c) > 16 * sms)
      continue;  // more splits than 16 blocks per SM only add combine work
    // Each split has one merge in the list: the cooperative one from 8 splits per row block where the grid fits the
    // device at once, the last block's otherwise. On the H200 (Qwen2.5-7B heads, bf16, exhaustive, each cooperative
    // config against its last-block twin in one run) the cooperative merge took 0.99-1.02x its twin's time at 2-4
    // splits and 0.17-1.01x at 8-256 (B 1 q_len 4 kv 32768, 128 splits: 39.6 against 238.9 us), and won B 1 kv
    // 131072 (70.7 against 72.9 us) and B 1 q_len 4 kv 32768 and 131072 (29.9 against 30.8, 75.9 against 81.2).
    if (c.kv_chunk != 0 && c.cluster == 1 && cooperative_merge(p, c, device) != (c.cooperative == 1)) continue;
    kept.push_back(c);
  }
  // Candidate order (what --max-candidates keeps): a rank for the split and one for the tile shape, then the configs
  // in growing rectangles of (split rank, shape rank / 2), so the first candidates try the few best-filling splits
  // with the few best shapes each; the split moves speed more than the shape does.
  std::vector<long long> split_blocks;  // the distinct grids, best-filling first
  for (const auto& c : kept) split_blocks.push_back(grid_blocks(p, c));
  std::sort(split_blocks.begin(), split_blocks.end());
  split_blocks.erase(std::unique(split_blocks.begin(), split_blocks.end()), split_blocks.end());
  std::stable_sort(split_blocks.begin(), split_blocks.end(), [&](long long a, long long b) {
    const double fa = split_fill_distance(a, sms), fb = split_fill_distance(b, sms);
    return fa != fb ? fa < fb : a < b;  // equally far: the fewer splits (less partial traffic) first
  });
  std::vector<Config> shapes;  // distinct (tile_n, warps, stages), best first
  for (const auto& c : kept)
    if (std::none_of(shapes.begin(), shapes.end(), [&](const Config& s) { return same_shape(s, c); }))
      shapes.push_back(c);
  std::stable_sort(shapes.begin(), shapes.end(),
                   [](const Config& a, const Config& b) { return shape_penalty(a) < shape_penalty(b); });
  auto split_rank = [&](const Config& c) {
    return int(std::find(split_blocks.begin(), split_blocks.end(), grid_blocks(p, c)) - split_blocks.begin());
  };
  auto shape_rank = [&](const Config& c) {
    return int(std::find_if(shapes.begin(), shapes.end(), [&](const Config& s) { return same_shape(s, c); }) -
               shapes.begin());
  };
  // A shape whose ring leaves room for fewer blocks per SM than the grid needs runs in more waves than the best
  // shape for that grid (H200, B 16 kv 4096, 256 blocks: m16_n64_w4 3 stages, 2 blocks per SM, 42 us; 4 stages, 1
  // block per SM, 49 us): such a config counts its shape 8 ranks worse, so it comes 4 rectangles later.
  auto waves = [&](const Config& c) {
    const long long slots = sms * blocks_per_sm(c, p.head_dim, device);
    return (grid_blocks(p, c) + slots - 1) / slots;
  };
  std::vector<std::pair<long long, long long>> fewest;  // (grid blocks, fewest waves of a shape for it)
  for (const auto& c : kept) {
    const long long g = grid_blocks(p, c), n = waves(c);
    auto it = std::find_if(fewest.begin(), fewest.end(), [&](const auto& f) { return f.first == g; });
    if (it == fewest.end()) fewest.push_back({g, n});
    else it->second = std::min(it->second, n);
  }
  auto extra_waves = [&](const Config& c) {
    const long long g = grid_blocks(p, c);
    return waves(c) > std::find_if(fewest.begin(), fewest.end(), [&](const auto& f) { return f.first == g; })->second;
  };
  // The ring keeps Stages - 1 tiles in flight. A cluster split whose block's KV slice is 3 or more tiles, in one wave:
  // a ring deeper than 3 that holds the whole slice in flight issues every load at once, which the same config with 3
  // stages cannot, so the two swap places in the order (the shallowest such ring takes the 3-stage config's shape
  // rank, and that one the deep ring's) unless the 3-stage config is the default (first anyway). H200, shapes/
  // llama8b.json's B 1, 2048 keys over a cluster of 8 (4 tiles of 64 keys per block): 6 stages ran 2-3% faster than
  // 3 or 4, in one process on every run, and the stage rank alone left it at rank 51; with the swap it is in the first
  // 16 of both dtypes, and no other decode problem of shapes/qwen7b.json or shapes/llama8b.json loses its best.
  auto whole_slice = [&](const Config& c) {
    const long long tiles = (split_keys(c, p.kv_len) + c.tile_n - 1) / c.tile_n;
    return c.cluster > 1 && c.kv_chunk == 0 && c.stages > 3 && tiles >= 3 && tiles <= c.stages - 1 &&
           grid_blocks(p, c) <= sms;
  };
  auto with_stages = [](Config c, int stages) {
    c.stages = stages;
    return c;
  };
  const Config def = default_config(arch, p);
  std::vector<int> rank_of(kept.size());
  for (size_t i = 0; i < kept.size(); ++i) rank_of[i] = shape_rank(kept[i]);
  for (size_t i = 0; i < kept.size(); ++i) {
    const Config& deep = kept[i];
    const Config shallow = with_stages(deep, 3);
    if (!whole_slice(deep) || same_config(shallow, def)) continue;
    const bool shallowest = std::none_of(kept.begin(), kept.end(), [&](const Config& k) {
      return whole_slice(k) && k.stages < deep.stages && same_config(with_stages(k, 3), shallow);
    });
    const auto twin = std::find_if(kept.begin(), kept.end(), [&](const Config& k) { return same_config(k, shallow); });
    if (shallowest && twin != kept.end()) std::swap(rank_of[i], rank_of[twin - kept.begin()]);
  }
  for (size_t i = 0; i < kept.size(); ++i) rank_of[i] += extra_waves(kept[i]) ? 8 : 0;
  // Ranks by position: the sort below moves configs, so it looks each one up by its original index.
  std::vector<size_t> order(kept.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t ia, size_t ib) {
    const Config &a = kept[ia], &b = kept[ib];
    const int sa = split_rank(a), sb = split_rank(b);
    const int ha = rank_of[ia], hb = rank_of[ib];
    // A cluster config shares its grid with a kv_chunk split; it counts its shape 2 ranks worse (one rectangle,
    // where the shape decides the rectangle), so it joins its twin's rectangle where the split decides it and the
    // first candidates still span several grids. Its merge through distributed shared memory skips the workspace's
    // combine pass, which costs most at short KV and at q_len 4 and 8: on the H200 a cluster split was the fastest
    // config of 63 of shapes/qwen7b.json's 120 decode problems, and a cluster always a rectangle after its twin left
    // the best of the first 16 candidates over 3% behind the exhaustive best on 19 of them (with this order and the
    // shape rank above, 1).
    const int ca = a.cluster > 1 ? 2 : 0, cb = b.cluster > 1 ? 2 : 0;
    const int la = std::max(sa, (ha + ca) / 2), lb = std::max(sb, (hb + cb) / 2);
    if (la != lb) return la < lb;
    if (sa != sb) return sa < sb;
    return ha < hb;
  });
  {
    std::vector<Config> sorted;
    for (size_t i : order) sorted.push_back(kept[i]);
    kept = std::move(sorted);
  }
  // The default's chunk is any whole number of tiles (the split nearest one block per SM), not only the space's
  // powers of two: it is a candidate too, first (the tuner's baseline), once.
  kept.erase(std::remove_if(kept.begin(), kept.end(), [&](const Config& c) { return same_config(c, def); }),
             kept.end());
  kept.insert(kept.begin(), def);
  return kept;
}

Config default_config(ArchId arch, const Problem& p) {
  const DeviceModel device = device_model(arch);
  const long long sms = std::max(1, device.sm_count);
  auto valid = [&](const Config& c) { return invalid_reason(p.dtype, p.head_dim, p.kv_layout, c, arch) == nullptr; };
  // tile_m as valid_configs picks it (the fewest row blocks any config of the space reaches).
  const int tile_m = pick_tile_m(p, [&](int m) {
    for (const auto& t : config_space())
      if (t.tile_m == m && valid(t)) return true;
    return false;
  });
  // A shape with the deepest ring up to 3 stages that fits, split by the chunk whose grid comes nearest one block per
  // SM (split_fill_distance; equally near: fewer splits), over chunks of whole tiles, at most 256 splits; no split
  // when the unsplit grid is as near. Returns the fill distance reached.
  auto split = [&](Config& c) {
    while (c.stages > 2 && !valid(c)) --c.stages;
    if (!valid(c)) return 1e30;
    double best = split_fill_distance(grid_blocks(p, c), sms);
    for (int want = 2; want <= 256; ++want) {
      Config t = c;
      const long long chunk = ((p.kv_len + want - 1) / want + c.tile_n - 1) / c.tile_n * c.tile_n;
      if (chunk >= p.kv_len || chunk > 65536) continue;
      t.kv_chunk = static_cast<int>(chunk);
      const double d = split_fill_distance(grid_blocks(p, t), sms);
      if (d < best) best = d, c = t;
    }
    return best;
  };
  // The shape the candidate order leads with (shape_penalty: 4 warps per 16-row group up to 8, tile_m keys per warp
  // at most: tile_m 16 4 warps x 64 keys, 32 8 x 64, 64 8 x 128), unless the narrow shape (4 warps, 16 keys per key
  // group, at least 32) splits a short KV nearer one block per SM.
  Config c{tile_m, tile_m == 64 ? 128 : 64, std::min(8, 4 * (tile_m / 16)), 3, 0};
  Config narrow{tile_m, 32, 4, 3, 0};
  narrow.tile_n = std::max(32, 16 * key_groups(narrow));
  double best = split(c);
  if (const double d = split(narrow); d < best - 1e-9) best = d, c = narrow;
  // sm_90: a cluster of up to 16 splits (kv_chunk 0) where its grid is as near one block per SM, or within a factor of
  // 2 with KV slices of at most 1024 keys: its merge in distributed shared memory skips the workspace's combine pass,
  // which costs most at short slices and q_len 4-8; long slices read faster over the chunk split's more blocks. On
  // the H200 (shapes/qwen7b.json's 120 decode problems, exhaustive) the chunk-split default was 1.18x behind the best
  // in geometric mean, up to 2.3x (B 1 q_len 4); with these rules 1.04x, up to 1.2x.
  if (c.kv_chunk != 0 && arch.sm >= 90) {
    Config pick = c;
    double near = 1e30;
    for (int cl : {2, 4, 8, 16}) {
      Config t = c;
      t.kv_chunk = 0;
      t.cluster = cl;
      if (!valid(t) || split_keys(t, p.kv_len) * (cl - 1) >= p.kv_len) continue;  // (its last block: no key)
      const double d = split_fill_distance(grid_blocks(p, t), sms);
      const bool short_slices = split_keys(t, p.kv_len) <= 1024;
      if ((d <= best + 1e-9 || (short_slices && d <= best + std::log(2.0))) && d < near) near = d, pick = t;
    }
    c = pick;
  }
  // The split's merge as valid_configs keeps it (cooperative_merge; the runtime falls back to the last block's merge
  // where the grid does not fit the device at once).
  if (c.kv_chunk != 0 && c.cluster == 1 && cooperative_merge(p, c, device)) {
    Config t = c;
    t.cooperative = 1;
    if (valid(t)) c = t;
  }
  // tile_m 64 (multi-token decode of a large group) on sm_90a: the wgmma mainloop, the scores and P V of a 64-row tile
  // in one warpgroup instruction each. On the H200 (B 16, kv 4096, q_len 8, Qwen2.5-7B heads, exhaustive) its best
  // config ran 5-8% faster than the best mma.sync one, fp16 and bf16, contiguous and paged (page 64).
  if (c.tile_m == 64) {
    Config w = c;
    w.wgmma = 1;
    if (valid(w)) c = w;
  }
  if (const char* why = invalid_reason(p.dtype, p.head_dim, p.kv_layout, c, arch))
    fail(std::string("no default config for ") + arch_name(arch) + ": " + why);
  return c;
}

bool same_config(const Config& a, const Config& b) {
  return a.tile_m == b.tile_m && a.tile_n == b.tile_n && a.warps == b.warps && a.stages == b.stages &&
         a.kv_chunk == b.kv_chunk && a.cluster == b.cluster && a.wgmma == b.wgmma && a.cooperative == b.cooperative;
}

std::string variant_name(const Problem& p, const Config& c, ArchId arch) {
  std::ostringstream s;
  s << kFamily << "__" << dtype_tag(p.dtype) << "_d" << p.head_dim << '_' << cache_tag(p, "contiguous") << "__m"
    << c.tile_m << "_n" << c.tile_n << "_w" << c.warps << "_s" << c.stages << "_c" << c.kv_chunk
    << (c.cluster > 1 ? "_cl" + std::to_string(c.cluster) : std::string()) << (c.wgmma ? "_wgmma" : "")
    << (c.cooperative ? "_coop" : "") << "__" << arch_name(arch);
  return s.str();
}

std::string name_expression(const Problem& p, const Config& c) {
  std::ostringstream s;
  s << (c.cluster > 1 ? "kt::decode::attention_decode_cluster<kt::DType::" : "kt::decode::attention_decode<kt::DType::")
    << (p.dtype == DType::f16 ? "f16" : "bf16") << ", " << p.head_dim
    << ", kt::decode::KvLayout::" << layout_name(p.kv_layout) << ", "
    << (p.kv_layout == KvLayout::paged ? p.page_size : 0) << ", " << c.tile_m << ", " << c.tile_n << ", " << c.warps
    << ", " << c.stages;
  if (c.cluster > 1) s << ", " << c.cluster;
  s << ", " << (c.wgmma ? "true" : "false") << ">";
  return s.str();
}

KernelSource kernel_source(const Problem& p, const Config& c, ArchId arch) {
  KernelSource k;
  k.family = kFamily;
  k.variant_name = variant_name(p, c, arch);
  k.name_expression = name_expression(p, c);
  k.source = "#include \"attention_decode/attention_decode.cuh\"\n";
  k.arch = arch;
  k.dynamic_smem_bytes = static_cast<unsigned>(smem_bytes(c, p.head_dim));
  return k;
}

LaunchDims launch_dims(const Problem& p, const Config& c) {
  LaunchDims d;
  d.grid_x = static_cast<unsigned>(num_splits(c, p.kv_len) * row_blocks(c, p.num_heads, p.num_kv_heads, p.q_len));
  d.grid_y = static_cast<unsigned>(p.num_kv_heads);
  d.grid_z = static_cast<unsigned>(p.batch);
  d.block_x = static_cast<unsigned>(c.warps * 32);
  d.smem_bytes = static_cast<unsigned>(smem_bytes(c, p.head_dim));
  return d;
}

bool uses_workspace(const Problem& p, const Config& c) { return workspace_splits(c, p.kv_len); }

size_t workspace_bytes(const Problem& p, const Config& c) {
  const long long o = partial_o_floats(c, p.batch, p.num_heads, p.num_kv_heads, p.q_len, p.head_dim, p.kv_len);
  const long long l = partial_lse_floats(c, p.batch, p.num_heads, p.num_kv_heads, p.q_len, p.kv_len);
  return static_cast<size_t>(o + l) * 4;
}

size_t counter_bytes(const Problem& p, const Config& c) {
  return static_cast<size_t>(counter_count(c, p.batch, p.num_heads, p.num_kv_heads, p.q_len, p.kv_len)) * 4;
}

void bind_config(DecodeParams& a, const Problem& p, const Config& c, float* workspace, unsigned* counters) {
  a.kv_chunk = split_keys(c, p.kv_len);
  a.cooperative = uses_workspace(p, c) ? c.cooperative : 0;
  if (!uses_workspace(p, c)) {
    a.partial_o = nullptr;
    a.partial_lse = nullptr;
    a.counters = nullptr;
    return;
  }
  a.partial_o = workspace;
  a.partial_lse =
      workspace ? workspace + partial_o_floats(c, p.batch, p.num_heads, p.num_kv_heads, p.q_len, p.head_dim, p.kv_len)
                : nullptr;
  a.counters = counters;
}

namespace {
DecodeParams common_params(const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse,
                           const int* seqlens_k, float softmax_scale) {
  DecodeParams a{};
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = o;
  a.lse = lse;
  a.seqlens_k = seqlens_k;
  const long long d = p.head_dim;
  a.q_head_stride = d;
  a.q_row_stride = d * p.num_heads;
  a.q_batch_stride = a.q_row_stride * p.q_len;
  a.o_head_stride = a.q_head_stride;
  a.o_row_stride = a.q_row_stride;
  a.o_batch_stride = a.q_batch_stride;
  a.k_head_stride = d;
  a.k_row_stride = d * p.num_kv_heads;
  a.v_head_stride = d;
  a.v_row_stride = a.k_row_stride;
  a.batch = p.batch;
  a.q_len = p.q_len;
  a.num_heads = p.num_heads;
  a.num_kv_heads = p.num_kv_heads;
  a.kv_len = p.kv_len;
  a.page_size = p.page_size;
  a.causal = p.causal ? 1 : 0;
  a.softmax_scale = softmax_scale > 0.f ? softmax_scale : static_cast<float>(1.0 / std::sqrt(double(p.head_dim)));
  a.scale_log2 = static_cast<float>(a.softmax_scale * 1.4426950408889634);
  return a;
}
}  // namespace

DecodeParams contiguous_params(const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse,
                               const int* seqlens_k, int s_max, float softmax_scale) {
  DecodeParams a = common_params(p, q, k, v, o, lse, seqlens_k, softmax_scale);
  a.k_batch_stride = a.k_row_stride * s_max;
  a.v_batch_stride = a.v_row_stride * s_max;
  a.kv_capacity = s_max;
  return a;
}

DecodeParams paged_params(const Problem& p, const void* q, const void* k_pages, const void* v_pages, void* o,
                          float* lse, const int* seqlens_k, const int* block_table, int num_pages,
                          int max_pages_per_seq, float softmax_scale) {
  DecodeParams a = common_params(p, q, k_pages, v_pages, o, lse, seqlens_k, softmax_scale);
  a.k_page_stride = a.k_row_stride * p.page_size;
  a.v_page_stride = a.v_row_stride * p.page_size;
  a.block_table = block_table;
  a.block_table_stride = max_pages_per_seq;
  a.num_pages = num_pages;
  a.kv_capacity = max_pages_per_seq * p.page_size;
  return a;
}

void check_args(const Problem& p, const DecodeParams& a) {
  check_problem(p);
  auto mismatch = [](const char* field, long long got, long long want) {
    fail(std::string("kernel argument ") + field + " = " + std::to_string(got) + " does not match the problem's " +
         std::to_string(want));
  };
  if (a.batch != p.batch) mismatch("batch", a.batch, p.batch);
  if (a.q_len != p.q_len) mismatch("q_len", a.q_len, p.q_len);
  if (a.num_heads != p.num_heads) mismatch("num_heads", a.num_heads, p.num_heads);
  if (a.num_kv_heads != p.num_kv_heads) mismatch("num_kv_heads", a.num_kv_heads, p.num_kv_heads);
  if (a.kv_len != p.kv_len) mismatch("kv_len", a.kv_len, p.kv_len);
  if (a.page_size != p.page_size) mismatch("page_size", a.page_size, p.page_size);
  if (a.causal != (p.causal ? 1 : 0)) mismatch("causal", a.causal, p.causal ? 1 : 0);
  if (!a.q || !a.k || !a.v || !a.o) fail("q, k, v and o must be non-null device pointers");
  if (!a.seqlens_k) fail("seqlens_k must be a non-null device pointer (int32 [batch])");
  auto aligned = [](const void* ptr, unsigned n) { return reinterpret_cast<std::uintptr_t>(ptr) % n == 0; };
  if (!aligned(a.q, 16)) fail("q must be 16-byte aligned");
  if (!aligned(a.k, 16)) fail("k must be 16-byte aligned");
  if (!aligned(a.v, 16)) fail("v must be 16-byte aligned");
  if (!aligned(a.o, 16)) fail("o must be 16-byte aligned");
  if (a.lse && !aligned(a.lse, 4)) fail("lse must be 4-byte aligned");
  if (!aligned(a.seqlens_k, 4)) fail("seqlens_k must be 4-byte aligned");
  const bool paged = p.kv_layout == KvLayout::paged;
  const struct {
    const char* name;
    long long v;
  } strides[] = {{"q_batch_stride", a.q_batch_stride},
                 {"q_row_stride", a.q_row_stride},
                 {"q_head_stride", a.q_head_stride},
                 {paged ? "k_page_stride" : "k_batch_stride", paged ? a.k_page_stride : a.k_batch_stride},
                 {"k_row_stride", a.k_row_stride},
                 {"k_head_stride", a.k_head_stride},
                 {paged ? "v_page_stride" : "v_batch_stride", paged ? a.v_page_stride : a.v_batch_stride},
                 {"v_row_stride", a.v_row_stride},
                 {"v_head_stride", a.v_head_stride},
                 {"o_batch_stride", a.o_batch_stride},
                 {"o_row_stride", a.o_row_stride},
                 {"o_head_stride", a.o_head_stride}};
  for (const auto& s : strides)
    if (s.v % 8 != 0)
      fail(std::string(s.name) + " must be a multiple of 8 elements (16-byte loads), got " + std::to_string(s.v));
  if (a.kv_capacity < 1) fail("kv_capacity must be >= 1, got " + std::to_string(a.kv_capacity));
  if (paged) {
    if (!a.block_table) fail("block_table must be a non-null device pointer for a paged cache");
    if (!aligned(a.block_table, 4)) fail("block_table must be 4-byte aligned");
    if (a.num_pages < 1) fail("num_pages must be >= 1, got " + std::to_string(a.num_pages));
    if (a.block_table_stride < 1) fail("block_table_stride must be >= 1");
    if (a.kv_capacity > a.block_table_stride * p.page_size)
      fail("kv_capacity " + std::to_string(a.kv_capacity) + " exceeds the block table's " +
           std::to_string(a.block_table_stride) + " pages of " + std::to_string(p.page_size) + " tokens");
    // The kernel reads a sequence's block-table row up to kv_capacity / page_size entries (its table window).
    if (a.kv_capacity % p.page_size != 0)
      fail("kv_capacity " + std::to_string(a.kv_capacity) + " must be a whole number of pages (max_pages_per_seq x " +
           "page_size " + std::to_string(p.page_size) + ")");
  }
  if (!(a.softmax_scale > 0.f) || !std::isfinite(a.softmax_scale)) fail("softmax_scale must be positive and finite");
}

void check_params(const Problem& p, const Config& c, const DecodeParams& a) {
  check_args(p, a);
  if (a.kv_chunk != split_keys(c, p.kv_len))
    fail("kernel argument kv_chunk = " + std::to_string(a.kv_chunk) + " does not match the config's " +
         std::to_string(split_keys(c, p.kv_len)) + " (bind_config sets it)");
  if (uses_workspace(p, c)) {
    if (!a.partial_o || !a.partial_lse || !a.counters)
      fail("a split launch (kv_chunk " + std::to_string(c.kv_chunk) + " < kv_len " + std::to_string(p.kv_len) +
           ") needs the workspace and counters (bind_config)");
    if (reinterpret_cast<std::uintptr_t>(a.partial_o) % 16 != 0) fail("the workspace must be 16-byte aligned");
  }
}

nlohmann::json problem_to_json(const Problem& p) {
  return {{"dtype", dtype_tag(p.dtype)},
          {"batch", p.batch},
          {"q_len", p.q_len},
          {"num_heads", p.num_heads},
          {"num_kv_heads", p.num_kv_heads},
          {"head_dim", p.head_dim},
          {"kv_len", p.kv_len},
          {"kv_layout", layout_name(p.kv_layout)},
          {"page_size", p.page_size},
          {"causal", p.causal}};
}

namespace {
template <class T>
T field(const nlohmann::json& j, const char* name, const char* what) {
  if (!j.is_object() || !j.contains(name)) fail(std::string(what) + " JSON lacks field '" + name + "'");
  const auto& v = j.at(name);
  bool ok;
  if constexpr (std::is_same_v<T, bool>) ok = v.is_boolean();
  else if constexpr (std::is_same_v<T, int>) ok = v.is_number_integer();
  else ok = v.is_string();
  if (!ok) fail(std::string(what) + " JSON field '" + name + "' has the wrong type");
  return v.get<T>();
}
}  // namespace

Problem problem_from_json(const nlohmann::json& j) {
  Problem p;
  const auto dt = field<std::string>(j, "dtype", "problem");
  if (dt == "fp16") p.dtype = DType::f16;
  else if (dt == "bf16") p.dtype = DType::bf16;
  else fail("problem JSON field 'dtype': unknown dtype '" + dt + "'");
  p.batch = field<int>(j, "batch", "problem");
  p.q_len = field<int>(j, "q_len", "problem");
  p.num_heads = field<int>(j, "num_heads", "problem");
  p.num_kv_heads = field<int>(j, "num_kv_heads", "problem");
  p.head_dim = field<int>(j, "head_dim", "problem");
  p.kv_len = field<int>(j, "kv_len", "problem");
  p.kv_layout = parse_layout(field<std::string>(j, "kv_layout", "problem"));
  p.page_size = field<int>(j, "page_size", "problem");
  p.causal = field<bool>(j, "causal", "problem");
  return p;
}

nlohmann::json config_to_json(const Config& c) {
  nlohmann::json j = {
      {"tile_m", c.tile_m}, {"tile_n", c.tile_n}, {"warps", c.warps}, {"stages", c.stages}, {"kv_chunk", c.kv_chunk}};
  if (c.cluster > 1) j["cluster"] = c.cluster;          // configs without a cluster keep the JSON they always had
  if (c.wgmma) j["wgmma"] = c.wgmma;                    // likewise the mma.sync configs
  if (c.cooperative) j["cooperative"] = c.cooperative;  // and the last-block merge
  return j;
}

Config config_from_json(const nlohmann::json& j) {
  Config c{};
  c.tile_m = field<int>(j, "tile_m", "config");
  c.tile_n = field<int>(j, "tile_n", "config");
  c.warps = field<int>(j, "warps", "config");
  c.stages = field<int>(j, "stages", "config");
  c.kv_chunk = field<int>(j, "kv_chunk", "config");
  c.cluster = j.contains("cluster") ? field<int>(j, "cluster", "config") : 1;
  c.wgmma = j.contains("wgmma") ? field<int>(j, "wgmma", "config") : 0;
  c.cooperative = j.contains("cooperative") ? field<int>(j, "cooperative", "config") : 0;
  return c;
}

}  // namespace decode
}  // namespace kt
