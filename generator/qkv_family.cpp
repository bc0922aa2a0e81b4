#include "generator/qkv_family.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <tuple>
#include <utility>

#include "generator/arch.h"
#include "quant/quant.h"  // k_block_error (header-only)

namespace kt {
namespace qkv {
const char* format_tag(quant::Format f) {
  switch (f) {
    case quant::Format::fp16: return "fp16";
    case quant::Format::bf16: return "bf16";
    case quant::Format::int8: return "int8";
    case quant::Format::int4: return "int4";
    case quant::Format::nf4: return "nf4";
    case quant::Format::mxfp4: return "mxfp4";
    case quant::Format::nvfp4: return "nvfp4";
    case quant::Format::fp16_kb64: return "fp16_kb64";
    case quant::Format::bf16_kb64: return "bf16_kb64";
    case quant::Format::int8_kb64: return "int8_kb64";
    case quant::Format::int4_kb128: return "int4_kb128";
    case quant::Format::nf4_kb128: return "nf4_kb128";
    case quant::Format::mxfp4_kb128: return "mxfp4_kb128";
    case quant::Format::nvfp4_kb128: return "nvfp4_kb128";
  }
  return "?";
}

namespace {

const char* fmt_tag(quant::Format f) { return format_tag(f); }
const char* dt_tag(DType d) { return d == DType::f16 ? "fp16" : "bf16"; }
[[noreturn]] void fail(const std::string& m) { throw ProblemError(std::string(kFamily) + ": " + m); }

quant::Format parse_fmt(const std::string& s) {
  for (int i = 0; i < quant::kFormatCount; ++i)
    if (s == fmt_tag(quant::Format(i))) return quant::Format(i);
  fail("unknown weight format '" + s + "'");
}

}  // namespace

std::string Problem::key() const {
  std::ostringstream s;
  s << kFamily << '/' << dt_tag(dtype) << '/' << fmt_tag(format) << "/m" << m << "/k" << k << "/h" << num_heads << "/kv"
    << num_kv_heads << "/d" << head_dim << '/' << (has_bias ? "bias" : "nobias") << '/' << (rope ? "rope" : "norope");
  if (kv_cache) s << "/kvcache";
  return s.str();
}

double Problem::min_bytes() const {
  const double elems = double(n()) * k;
  double w = elems * quant::format_bits(format) / 8;
  const int g = quant::format_group(format);
  if (g > 0)
    w += elems / g * (quant::scale_bytes(format) + (quant::format_element(format) == quant::Format::int4 ? 1 : 0));
  if (g < 0) w += double(n()) * 4;
  return w + 2.0 * m * k + 2.0 * m * n() + (has_bias ? 2.0 * n() : 0);
}

void check_problem(const Problem& p) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) fail("unknown activation dtype (expected fp16 or bf16)");
  if (int(p.format) < 0 || int(p.format) >= quant::kFormatCount) fail("unknown weight format");
  if (p.m < 1) fail("m (tokens) must be >= 1, got " + std::to_string(p.m));
  if (p.k < 1) fail("k must be >= 1, got " + std::to_string(p.k));
  if (p.num_heads < 1 || p.num_kv_heads < 1) fail("num_heads and num_kv_heads must be >= 1");
  if (p.num_heads % p.num_kv_heads != 0)
    fail("num_heads (" + std::to_string(p.num_heads) + ") must be a multiple of num_kv_heads (" +
         std::to_string(p.num_kv_heads) + ")");
  if (p.head_dim != 64 && p.head_dim != 128)
    fail("head_dim " + std::to_string(p.head_dim) + " is not supported: head_dim must be 64 or 128");
  if (p.k % 64 != 0) fail("k = " + std::to_string(p.k) + " must be a multiple of 64 (the kernels' K step)");
  const int g = quant::format_group(p.format);
  if (g > 0 && p.k % g != 0)
    fail("k = " + std::to_string(p.k) + " is not a multiple of the " + fmt_tag(p.format) + " block of " +
         std::to_string(g));
  const quant::Format el = quant::format_element(p.format);
  if (const std::string e = quant::k_block_error(p.format, p.k); !e.empty())
    fail(std::string(fmt_tag(p.format)) + ": " + e);
  if ((el == quant::Format::fp16 && p.dtype != DType::f16) || (el == quant::Format::bf16 && p.dtype != DType::bf16))
    fail(std::string(fmt_tag(p.format)) + " weights need " + fmt_tag(el) + " activations");
  if (p.m > 65535 * 16) fail("m too large for the grid");
}

std::vector<Config> config_space() {
  std::vector<Config> out;
  const int warps[][2] = {{1, 4}, {1, 8}, {2, 2}, {2, 4}, {4, 2}};
  for (int tm : {16, 32, 64, 128})
    for (int tn : {64, 128, 256})
      for (int tk : {64, 128})
        for (const auto& w : warps)
          for (int st : {2, 3})
            for (int sk : {1, 2, 4, 8, 16})
              for (int pf : {1, 2, 4}) out.push_back(make_config(tm, tn, MmaConfig{tk, w[0], w[1], st, sk, pf}));
  return out;
}

std::vector<Config> gemv_config_space(quant::Format f) {
  std::vector<Config> out;
  // warps along K x warps along N
  const int warps[][2] = {{2, 1}, {4, 1}, {7, 1}, {8, 1}, {14, 1}, {16, 1}, {4, 2}, {7, 2}, {8, 2}, {2, 4}, {4, 4}};
  for (int tm : {8, 16, 32, 64})
    for (int rt : {1, 2})  // m16 tiles per warp
      for (const auto& w : warps)
        for (GemvLoad ld : {GemvLoad::register_ring, GemvLoad::bulk_rows, GemvLoad::tma, GemvLoad::tma_x})
          for (int pf : {1, 2, 4}) {
            // tma / tma_x: TMA window prefetch + 1 = 2 or 3 steps; 5 only for 16-bit weights, whose 64-byte steps are
            // a quarter of a 4-bit step's K (for the packed formats it never won a probe)
            if ((ld == GemvLoad::tma || ld == GemvLoad::tma_x) && pf == 4 && quant::format_bits(f) != 16) continue;
            out.push_back(make_config(tm, w[1] * 16 * rt, GemvConfig{w[0], w[1], ld, pf, GemvReduce::none, 1}));
            // its balanced tail (right after it in the order): every load but bulk_rows, tile_m 8 and 16 only. The
            // decode sizes run one wave of units, where whole units leave some SMs one more than others (faster
            // in graphs for the register ring and tma, slower for bulk_rows, whose blocks hold
            // whole rows).
            if (ld != GemvLoad::bulk_rows && tm <= 16)
              out.push_back(
                  make_config(tm, w[1] * 16 * rt, GemvConfig{w[0], w[1], ld, pf, GemvReduce::balanced_tail, 1}));
          }
  // K split over a thread-block cluster (bulk_rows): cluster size x warps along K (warps_n 1).
  for (int tm : {8, 16, 32, 64})
    for (int rt : {1, 2})
      for (int cs : {2, 4, 8})
        for (int wk : {1, 2, 4, 8})
          for (int pf : {1, 2})
            out.push_back(
                make_config(tm, 16 * rt, GemvConfig{wk, 1, GemvLoad::bulk_rows, pf, GemvReduce::cluster, cs}));
  return out;
}

std::vector<Config> wgmma_config_space(quant::Format f) {
  std::vector<Config> out;
  for (int tm : {64, 128, 256})
    for (int tn : {64, 128, 256})
      for (int tk : {64, 128})
        for (int st : {2, 3, 4})
          for (int sk : {1, 2, 4, 8, 16})
            for (int pf : {1, 2}) {
              if (quant::format_bits(f) == 16 && pf != 1) continue;
              out.push_back(make_config(tm, tn, WgmmaConfig{tk, st, sk, pf}));
            }
  return out;
}

std::vector<Config> ws_config_space() {
  std::vector<Config> out;
  for (int tm : {8, 16, 32, 64, 96, 128, 192, 256})
    for (int wm : {4, 8})
      for (int atoms : {1, 2})
        for (int st : {2, 3, 4, 6, 8})
          for (int sk : {0, 1, 2, 3, 4}) {  // 0: stream-K
            // split_k 2 / 3 / 4 form clusters, one binary per split (not a launch dimension): offered with rings of 4
            // or more slots only (what won on the H100), which keeps the CI compile sweep's binary count in bounds;
            // 3 (108 blocks for 36 tiles of 128 features: M = 64 with tile_m 64, M = 256 with tile_m 256) from tile_m
            // 16 up (packed weights at M = 16: the decode, not the stream, is the limit there, and 108 blocks of 128
            // features split it over more SMs than 72 of 256 or 128), not for tile_m 8 (M <= 8:
            // the gemv kernel wins there)
            if (sk > 1 && st < 4) continue;
            if (sk == 3 && tm < 16) continue;
            const WsSplit split = sk == 0 ? WsSplit::stream_k : WsSplit::split_k;
            out.push_back(make_config(tm, 16 * wm * atoms, WsConfig{wm / 4, 1, st, split, std::max(sk, 1)}));
            // The same clusters for the last wave only (split_k_tail, the binary of split_k sk): prefill token tiles.
            if (sk > 1 && tm >= 64)
              out.push_back(make_config(tm, 16 * wm * atoms, WsConfig{wm / 4, 1, st, WsSplit::split_k_tail, sk}));
            // Two K groups (k_groups 2: a twin of each consumer warpgroup takes every other K step):
            // for the decode-bound token tiles of 16 and 32 with one atom per warpgroup, rings of 6 or 8 slots (each
            // group waits on every other slot, so 4 slots left each group 2 in flight and measured slower), split_k >= 1
            if (tm == 16 || tm == 32)
              if (atoms == 1 && (st == 6 || st == 8) && sk >= 1)
                out.push_back(make_config(tm, 16 * wm * atoms, WsConfig{wm / 4, 2, st, split, sk}));
          }
  return out;
}

std::vector<Config> pairs_config_space() {
  std::vector<Config> out;
  for (int tm : {64, 128})
    for (int tn : {40, 48, 56, 64, 72, 80, 96, 128})
      for (int st : {4, 6, 8, 12, 16})
        for (int cm : {1, 2, 4}) out.push_back(make_config(tm, tn, PairsConfig{st, cm}));
  return out;
}

namespace {

/// Feature tiles of a config: wgmma_pairs (D/2 / box pairs) pair chunks x groups of box_heads heads; the others
/// ceil(n / tile_n).
long long pairs_feature_tiles_or_n(const Problem& p, const Config& c) {
  if (c.mainloop != Mainloop::wgmma_pairs) return (p.n() + c.tile_n - 1) / c.tile_n;
  const int heads = p.num_heads + 2 * p.num_kv_heads;
  return (long long)(p.head_dim / 2 / wp_box_pairs(c)) * ((heads + wp_box_heads(c) - 1) / wp_box_heads(c));
}

/// Output tiles of a tiled config: token tiles x feature tiles (wgmma_pairs: pair chunks x head groups).
long long output_tiles(const Problem& p, const Config& c) {
  return (long long)((p.m + c.tile_m - 1) / c.tile_m) * pairs_feature_tiles_or_n(p, c);
}

/// `list` split into groups of configs that `same` puts together, the groups in order of first appearance and each in
/// list order.
template <class Same>
std::vector<std::vector<Config>> group_in_order(const std::vector<Config>& list, Same same) {
  std::vector<std::vector<Config>> groups;
  for (const auto& c : list) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const std::vector<Config>& g) { return same(g[0], c); });
    if (it == groups.end()) groups.push_back({c});
    else it->push_back(c);
  }
  return groups;
}

/// The groups' configs taken in turn: every group's first, then every group's second, ..
std::vector<Config> take_in_turn(const std::vector<std::vector<Config>>& groups) {
  size_t longest = 0;
  for (const auto& g : groups) longest = std::max(longest, g.size());
  std::vector<Config> out;
  for (size_t i = 0; i < longest; ++i)
    for (const auto& g : groups)
      if (i < g.size()) out.push_back(g[i]);
  return out;
}

int next_pow2_at_least(int m, int lo, int hi) {
  int c = lo;
  while (c < m && c < hi) c *= 2;
  return c;
}

/// mma candidates for the problem, heuristic order: grids closest to two blocks per SM, then larger tiles (more reuse
/// of each loaded weight and X element).
std::vector<Config> mma_candidates(const Problem& p, ArchId arch, const DeviceModel& dev) {
  std::vector<Config> out;
  const int m_cap = next_pow2_at_least(p.m, 16, 128);
  const double two_per_sm = 2.0 * dev.sm_count;
  for (const auto& c : config_space()) {
    if (invalid_reason(p.dtype, p.format, p.head_dim, p.rope, c, arch)) continue;
    if (c.tile_m > m_cap) continue;
    if (c.mma.stages == 3 && c.tile_m < 64)
      continue;  // X tiles of 16/32 rows are too small for a deeper ring to matter
    if (c.mma.prefetch > 1 && c.tile_m > 32)
      continue;  // deep weight prefetch pays where the MMA work per tile is small
    const long long blocks = output_tiles(p, c);
    if (c.mma.split_k > 1 && (blocks >= two_per_sm || c.mma.split_k > p.k / c.mma.tile_k)) continue;
    out.push_back(c);
  }
  auto score = [&](const Config& c) {
    const double blocks = double(output_tiles(p, c)) * c.mma.split_k;
    return std::make_pair(std::round(std::fabs(std::log2(blocks / two_per_sm)) * 2) / 2, -double(c.tile_m) * c.tile_n);
  };
  std::stable_sort(out.begin(), out.end(), [&](const Config& a, const Config& b) { return score(a) < score(b); });
  return out;
}

namespace {
/// The gemv default at decode sizes (M <= 16; default_config's first choice), or none when no such config is valid:
/// the shapes that won on the H100 for Qwen2.5-7B (4 K warps per m16 tile for 4-bit, 8 for wider weights; the bulk
/// copy where the rows fit in shared memory).
bool gemv_default(const Problem& p, ArchId arch, Config& out) {
  if (p.m > 16) return false;
  const int tm = p.m <= 8 ? 8 : 16, kw0 = quant::format_bits(p.format) == 4 ? 4 : 8;
  for (int kw : {kw0, kw0 / 2})  // fewer K warps (more registers each) where the register budget needs it
    for (GemvLoad ld : {GemvLoad::bulk_rows, GemvLoad::register_ring, GemvLoad::tma}) {  // (K-blocked: not bulk_rows)
      const Config g = make_config(tm, 16, GemvConfig{kw, 1, ld, 1, GemvReduce::none, 1});
      if (!invalid_reason(p.dtype, p.format, p.head_dim, p.rope, g, arch) &&
          gemv_smem_bytes(g, p.format, p.k) <= gemv_smem_cap(arch.sm) &&
          kw <= (p.k + gemv_step_k(p.format) - 1) / gemv_step_k(p.format)) {
        out = g;
        return true;
      }
    }
  return false;
}
}  // namespace

/// gemv candidates (M <= 64): tile_m = the power of two >= M (8..64) or half of it (two token tiles share each weight
/// row, the second read mostly from L2: more, lighter blocks); every warp gets at least one K step.
/// Heuristic order: most of the weight requested at once (warps x steps in flight, capped by the K steps each warp
/// has) while every block still fits on the GPU at once (a register estimate), then fewer registers.
std::vector<Config> gemv_candidates(const Problem& p, ArchId arch, const DeviceModel& dev) {
  std::vector<Config> out;
  if (p.m > 64) return out;
  const int tm = next_pow2_at_least(p.m, 8, 64);
  const int steps = (p.k + gemv_step_k(p.format) - 1) / gemv_step_k(p.format);
  std::vector<Config> bal;  // the balanced tails, placed after their twins at the end
  std::vector<Config> xt;   // tma_x (X by TMA), each placed right before its tma twin
  for (const auto& c : gemv_config_space(p.format)) {
    if ((c.tile_m != tm && c.tile_m != tm / 2) || invalid_reason(p.dtype, p.format, p.head_dim, p.rope, c, arch))
      continue;
    if (c.gemv.warps_k * gemv_cluster(c) > steps) continue;                    // every warp gets a K step
    if (gemv_smem_bytes(c, p.format, p.k) > gemv_smem_cap(arch.sm)) continue;  // the rows' scales (bulk_rows: and data)
    if (c.gemv.load == GemvLoad::tma_x && p.k % 64 != 0) continue;             // X's tensor map is {64, K / 64, M}
    (c.gemv.load == GemvLoad::tma_x ? xt : gemv_balanced(c) ? bal : out).push_back(c);
  }
  const int tiles = p.n() / 16;
  auto fit = [&](const Config& c) {  // 1 when every block fits on the GPU at once (registers, shared memory)
    const double blocks = std::ceil(double(tiles) / (c.gemv.warps_n * gemv_row_tiles(c))) *
                          ((p.m + c.tile_m - 1) / c.tile_m) * gemv_cluster(c);
    return std::min({1.0,
                     double(dev.sm_count) * dev.regs_per_sm / (blocks * threads(c) * gemv_reg_estimate(c, p.format)),
                     double(dev.sm_count) * dev.smem_per_sm / (blocks * (gemv_smem_bytes(c, p.format, p.k) + 1024.0))});
  };
  auto score = [&](const Config& c) {
    const int steps_per_warp = (steps + c.gemv.warps_k - 1) / c.gemv.warps_k;
    const double in_flight =  // share of the weight requested at once
        !gemv_ring(c) ? 1.0 : double(std::min(c.gemv.prefetch, steps_per_warp)) / steps_per_warp;
    return std::make_pair(-std::round(in_flight * fit(c) * 8) / 8, gemv_reg_estimate(c, p.format));
  };
  std::stable_sort(out.begin(), out.end(), [&](const Config& a, const Config& b) { return score(a) < score(b); });
  // The register ring in an order of its own, every fourth candidate: blocks that fit, then the fewest steps in
  // flight, then K warps whose share of K is within 64 elements of 512 (more K warps first among those), then
  // registers. in_flight above ranks its
  // prefetch-1 variants last, but they are the ones that win: whole-space probe on the H100 (Qwen2.5-7B, M = 1): nf4
  // w7 x 1 register ring prefetch 1 10.41 us against 11.82 for the best bulk_rows config, ranked 184th before. Every
  // register-ring winner measured at M = 1 ran 448 or 512 K elements per warp (H100, K 3584: int8, int8_kb64 and
  // nf4_kb128 with 8 K warps, nf4 with 7; H200, K 4096: int8 and nf4_kb128 with 8, 4-5% ahead of the 4 / 7 K-warp
  // configs the order reached first). H200, K 3584 (shapes/qwen7b.json's 24 M = 1 problems, exhaustive): 8 K warps (448
  // elements each) won the int8 and 4-bit K-blocked problems, up to 3% ahead of the 7 K-warp configs nearest 512 that
  // the order took first; with 7 and 8 equal here and 8 first, the first 16 candidates come within 1.007x of the best
  // on all 24 (1.030x before).
  std::vector<Config> ring, rest;
  for (const auto& c : out) (gemv_ring(c) ? ring : rest).push_back(c);
  std::stable_sort(ring.begin(), ring.end(), [&](const Config& a, const Config& b) {
    auto key = [&](const Config& c) {
      const double per_warp = p.k / 64.0 / c.gemv.warps_k;  // 64-element K steps of one warp
      return std::make_tuple(-std::round(fit(c) * 8) / 8, c.gemv.prefetch, std::fabs(per_warp - 8.0) > 1 ? 1 : 0,
                             -c.gemv.warps_k, gemv_reg_estimate(c, p.format));
    };
    return key(a) < key(b);
  });
  // At 8 < M <= 16 gemv_default's twin that streams the weight by TMA leads (and with it, below, its twin that also
  // streams X by TMA, and both balanced tails): they were the exhaustive winners at M = 16 for int4, nf4 (tma_x) and
  // int8 (tma) with Llama-3.1-8B's shapes on the H200, 8-28% ahead of the first 16 candidates, where the score above
  // ranked them 51st-120th behind the tile_m 8 configs.
  if (Config d; p.m > 8 && gemv_default(p, arch, d)) {
    d.gemv.load = GemvLoad::tma;
    const auto at = std::find_if(rest.begin(), rest.end(), [&](const Config& c) { return same_config(c, d); });
    if (at != rest.end()) std::rotate(rest.begin(), at, at + 1);
  }
  std::vector<Config> mixed;
  for (size_t i = 0, r = 0; mixed.size() < out.size(); ++i) {
    if (i < rest.size()) mixed.push_back(rest[i]);
    if ((i % 3 == 2 || i >= rest.size()) && r < ring.size()) mixed.push_back(ring[r++]);
  }
  // Each balanced tail right after its whole-unit twin (the same filters keep both), so that a --max-candidates
  // prefix measures both. Each tma_x config (X by TMA) with its balanced tail right before its tma twins: at M = 16 it
  // is the int4 and int8 winner (by 2 us for int4).
  std::vector<Config> ordered;
  auto twins = [&](const std::vector<Config>& from, Config t, GemvReduce reduce) {
    t.gemv.reduce = reduce;
    for (const auto& x : from)
      if (same_config(x, t)) ordered.push_back(x);
  };
  for (const auto& c : mixed) {
    if (c.gemv.load == GemvLoad::tma) {
      Config t = c;
      t.gemv.load = GemvLoad::tma_x;
      twins(xt, t, GemvReduce::none);
      twins(xt, t, GemvReduce::balanced_tail);
    }
    ordered.push_back(c);
    twins(bal, c, GemvReduce::balanced_tail);
  }
  return ordered;
}

/// wgmma candidates (sm_90a): tile_m 64, or larger once M fills more than half of it; split_k > 1 only while the grid
/// has fewer blocks than SMs, and split_k <= K / tile_k. Heuristic order: wave efficiency (busy share of the last
/// wave; 1 from 4 waves on), then larger tiles, then the deeper X ring.
std::vector<Config> wgmma_candidates(const Problem& p, ArchId arch, const DeviceModel& dev) {
  std::vector<Config> out;
  for (const auto& c : wgmma_config_space(p.format)) {
    if (invalid_reason(p.dtype, p.format, p.head_dim, p.rope, c, arch)) continue;
    if (c.tile_m > 64 && p.m <= c.tile_m / 2) continue;  // a tile at least half full of tokens
    const long long blocks = output_tiles(p, c);
    if (c.wgmma.split_k > 1 && (blocks >= dev.sm_count || c.wgmma.split_k > p.k / c.wgmma.tile_k)) continue;
    out.push_back(c);
  }
  auto score = [&](const Config& c) {
    const double blocks = double(output_tiles(p, c)) * c.wgmma.split_k;
    const double waves = blocks / dev.sm_count;
    // wave efficiency: the share of the last wave that is busy (1 = whole waves), folded with the fill of one wave;
    // from 4 waves on the tail costs little and larger tiles (less L2 traffic per FLOP) come first
    const double eff = waves < 1 ? waves : waves >= 4 ? 1.0 : waves / std::ceil(waves);
    return std::make_tuple(-std::round(eff * 8) / 8, -double(c.tile_m) * c.tile_n, -c.wgmma.stages, c.wgmma.tile_k);
  };
  std::stable_sort(out.begin(), out.end(), [&](const Config& a, const Config& b) { return score(a) < score(b); });
  return out;
}

/// The wgmma_ws split of a config as one number for grouping: 0 for stream-K, split_k, or 16 + split_k for
/// split_k_tail.
int ws_split_key(const Config& c) { return ws_stream_k(c) ? 0 : ws_split_tail(c) ? 16 + c.ws.split_k : c.ws.split_k; }

/// The wgmma_ws candidates `model_order` (ws_candidates' cost-model order) regrouped for 64 < M <= 1024, where the cost
/// model ranks tile shapes poorly. Whole-space probes on the H100 (Qwen2.5-7B, M = 256): the
/// fastest variant sat at model rank 55 (fp16), 22 (int4) and 12 (int8) of the ws list, behind rings of the
/// model's favourite shapes. So: one shape class per (tile_m, tile_n, split, K groups), the classes in the order of
/// their best-ranked member, and the list takes one config of each class in turn. Within a class: two consumer
/// warpgroups first (they won every M >= 64 probe), then cluster partial slots that fit beside the ring (no cluster
/// barrier before the reduction: int4 m128 n256 c2 cl3 took 28.64 us with s4, slots beside, against 32.63 / 32.73
/// with s6 / s8, slots over the ring), then deeper rings.
std::vector<Config> ws_by_shape_class(const std::vector<Config>& model_order, quant::Format f) {
  auto classes = group_in_order(model_order, [](const Config& a, const Config& b) {
    return a.tile_m == b.tile_m && a.tile_n == b.tile_n && ws_split_key(a) == ws_split_key(b) &&
           ws_kgroups(a) == ws_kgroups(b);
  });
  for (auto& k : classes)
    std::stable_sort(k.begin(), k.end(), [&](const Config& a, const Config& b) {
      auto key = [&](const Config& c) {
        return std::make_tuple(-ws_consumers(c), ws_cluster(c) > 1 && !ws_cluster_slots_beside(c, f) ? 1 : 0,
                               -c.ws.stages);
      };
      return key(a) < key(b);
    });
  return take_in_turn(classes);
}

/// The default's prefill tile: wgmma_ws 256 x 128, two consumer warpgroups, 4 slots, with the given split.
Config ws_prefill_tile(WsSplit split, int split_k) { return make_config(256, 128, WsConfig{2, 1, 4, split, split_k}); }

/// wgmma_ws candidates (sm_90a): tile_m above 8 only once M fills more than half of it, and at least 64 for M > 128;
/// split_k > 1 only while there are fewer output tiles than SMs, and split_k <= the K steps; stream-K with more units
/// than SMs. Ordered by the cost model below, split modes taken in turn up to M = 1024 (beyond M = 64 each mode's list
/// by shape class, ws_by_shape_class).
std::vector<Config> ws_candidates(const Problem& p, ArchId arch, const DeviceModel& dev) {
  std::vector<Config> out;
  const double sms = dev.sm_count;
  for (const auto& c : ws_config_space()) {
    if (invalid_reason(p.dtype, p.format, p.head_dim, p.rope, c, arch)) continue;
    if (c.tile_m > 8 && p.m <= c.tile_m / 2) continue;
    if (c.tile_m < 64 && p.m > 128) continue;  // beyond decode-ish sizes, token tiles under 64 only add blocks
    const long long blocks = output_tiles(p, c);
    if (ws_split_tail(c)) {  // a full wave of whole tiles, then one partial wave of split tiles
      const long long whole = ws_tail_whole_tiles(blocks, ws_cluster(c), dev.sm_count);
      if (whole == 0 || whole == blocks) continue;  // no full wave, or no partial one
      if (ws_cluster(c) > p.k / 64) continue;
    } else if (ws_cluster(c) > 1 && (blocks >= dev.sm_count || ws_cluster(c) > p.k / 64)) {
      continue;
    }
    if (ws_stream_k(c) && ws_units(p, c) <= dev.sm_count) continue;  // stream-K needs more units than SMs
    out.push_back(c);
  }
  // Cost model: whole waves x K steps per block (+ 2 for a split-K partial's round trip) x tensor work per step
  // (tile_m below 64 costs as 64: decode-bound, not MMA-bound) x (1 + 64 / tile_m + 64 / tile_n) for the operand
  // traffic per FLOP of smaller tiles; stream-K: one wave of units / SMs steps, + 2 per block sharing a tile (each
  // partial is written and read back). Ties: deeper rings first.
  auto score = [&](const Config& c) {
    const double tiles = double(output_tiles(p, c));
    const int split = ws_cluster(c);
    const double blocks = ws_stream_k(c) ? sms : tiles * split;
    double steps = ws_stream_k(c) ? std::ceil(double(ws_units(p, c)) / sms) + 2 * (1 + sms / tiles)
                                  : std::ceil(double(p.k / 64) / split) + (split > 1 ? 2 : 0);
    double waves = std::ceil(blocks / sms);
    if (ws_split_tail(c)) {  // the full waves' whole tiles, then one wave of 1 / split tiles
      waves = 1;
      steps = double(ws_tail_whole_tiles(output_tiles(p, c), split, dev.sm_count)) / sms * (p.k / 64) +
              std::ceil(double(p.k / 64) / split) + 2;
    }
    const double cost = waves * steps * std::max(c.tile_m, 64) * c.tile_n * (1.0 + 64.0 / c.tile_m + 64.0 / c.tile_n);
    return std::make_pair(cost, -c.ws.stages);
  };
  std::stable_sort(out.begin(), out.end(), [&](const Config& a, const Config& b) { return score(a) < score(b); });
  // The model ranks stream-K far ahead of split_k 1 at decode-ish M, but measured (H100, Qwen2.5-7B)
  // split_k 1 wins for 16-bit weights at M = 16..256 (fewer blocks, no partials: the stream-K fix-up tail costs
  // 5-10 us) while stream-K wins for 4-bit. So up to M = 1024 a --max-candidates prefix must hold both: the list takes the best
  // remaining config of each split mode in turn (the mode of the model's best config, then split_k 1, then the others in
  // the order of their best config; the model's order within a mode). Up to M = 1024: the whole-space
  // probe at M = 1024 found m192 n128 c2 sk1 2-5% ahead of the tuned m256 stream-K for the packed
  // formats, at model rank 65-85; with modes in turn and shape classes it is 5th, and the stream-K winners stay in the
  // 24-candidate prefix (packed m256 first, fp16 m96 n256 9th). Beyond M = 1024 the model's order holds the winners (the
  // same change there pushed the M = 4096 / 16384 sk1 winners to 33rd-41st, checked on the CPU).
  if (p.m > 1024) {
    // The 256 x 128 tile with 4 slots and split_k 1 first: the default where split_k_tail does not fit, and within 1-7%
    // of it where it does (ws_tail_fits), so both lead the fast strategy's prefix. The same tile's stream-K beside it:
    // with the owner reduction it passed split_k_tail at M = 4096 (H200, Qwen2.5-7B int4, exhaustive over the
    // 128-256 x 128 tiles, same run: stream-K 212.9 us, split_k_tail 2 214.8, split_k 1 230.5), where the cost model
    // ranked it past the fast strategy's 16.
    const Config sk1 = ws_prefill_tile(WsSplit::split_k, 1), skk = ws_prefill_tile(WsSplit::stream_k, 1);
    std::stable_partition(out.begin(), out.end(),
                          [&](const Config& c) { return same_config(c, sk1) || same_config(c, skk); });
    return out;
  }
  // split_k_tail (one partial wave of split tiles after the full waves) after all the others: where it won up to
  // M = 1024 (256 x 128 with the packed formats at M = 1024, H200) it is the default, which the tuner measures first,
  // so the prefix keeps the modes in turn below that won the other sizes.
  std::vector<Config> tail;
  std::copy_if(out.begin(), out.end(), std::back_inserter(tail), [](const Config& c) { return ws_split_tail(c); });
  out.erase(std::remove_if(out.begin(), out.end(), [](const Config& c) { return ws_split_tail(c); }), out.end());
  auto modes = group_in_order(out, [](const Config& a, const Config& b) { return ws_split_key(a) == ws_split_key(b); });
  if (p.m > 64)
    for (auto& m : modes) m = ws_by_shape_class(m, p.format);
  auto sk1 =
      std::find_if(modes.begin(), modes.end(), [](const std::vector<Config>& m) { return ws_split_key(m[0]) == 1; });
  if (sk1 != modes.end() && sk1 - modes.begin() > 1) std::rotate(modes.begin() + 1, sk1, sk1 + 1);  // second in turn
  std::vector<Config> ordered = take_in_turn(modes);
  if (p.m > 64 && !tail.empty()) tail = ws_by_shape_class(tail, p.format);
  ordered.insert(ordered.end(), tail.begin(), tail.end());
  return ordered;
}

/// wgmma_pairs candidates (sm_90a, 16-bit weights, M > 16): tile_m above 64 only once M fills more than half of it.
/// Ordered by a cost model fitted to the H100 probe -- whole waves x tile work x
/// (1 + 64 / tile_n + 64 / tile_m) for the operand traffic per FLOP of smaller tiles, x 1.1 / 1.25 for 8- / 4-pair
/// boxes (their 16- / 8-byte output pieces cost L2 write throughput), x 1.25 for one consumer warpgroup (tile_m 64)
/// where two fit (M > 64) -- then regrouped by tile shape, one config of each shape in turn, so that a
/// --max-candidates prefix holds several shapes. Within a shape: clusters of 2 token tiles first, then 4, then none
/// (cluster_m at most the token tiles), each with the deepest ring of up to 12 slots first.
std::vector<Config> pairs_candidates(const Problem& p, ArchId arch, const DeviceModel& dev) {
  std::vector<Config> out;
  if (p.m <= 16) return out;  // 64-token tiles mostly idle: the weight-streaming kernels win
  for (const auto& c : pairs_config_space()) {
    if (invalid_reason(p.dtype, p.format, p.head_dim, p.rope, c, arch)) continue;
    if (c.tile_m > 64 && p.m <= c.tile_m / 2) continue;
    if (c.pairs.cluster_m > (p.m + c.tile_m - 1) / c.tile_m) continue;  // a cluster of token tiles past M
    out.push_back(c);
  }
  auto score = [&](const Config& c) {
    const double waves = std::ceil(double(output_tiles(p, c)) / dev.sm_count);
    const double pieces = wp_box_pairs(c) == 16 ? 1.0 : wp_box_pairs(c) == 8 ? 1.1 : 1.25;
    const double one_wg = c.tile_m == 64 && p.m > 64 ? 1.25 : 1.0;
    // Ties (one shape): clusters of 2 token tiles, then 4, then none (CUDA graphs, m128 n96 s8: M = 256 cm2 18.0 us
    // vs none 19.9; M = 512 cm4 32.2, cm2 34.8, none 40.0; M = 1024 cm2 57.4, cm4 64.3, none 66.1);
    // then deeper rings first up to 12 slots, 16 last (M = 64: m64 n48 s16 16.95 us vs s12 16.47 in autotune timing,
    // and 15.26 vs 14.31 in CUDA graphs; the m128 rings of 8 slots beat 6: M = 256 22.36
    // vs 24.01 in autotune timing, cm2 17.98 vs 19.86 in graphs).
    const int cm = c.pairs.cluster_m, st = c.pairs.stages;
    return std::make_tuple(waves * c.tile_m * c.tile_n * (1.0 + 64.0 / c.tile_n + 64.0 / c.tile_m) * pieces * one_wg,
                           cm == 2   ? 0
                           : cm == 4 ? 1
                                     : 2,
                           st > 12 ? 0 : -st);
  };
  std::stable_sort(out.begin(), out.end(), [&](const Config& a, const Config& b) { return score(a) < score(b); });
  return take_in_turn(group_in_order(
      out, [](const Config& a, const Config& b) { return a.tile_m == b.tile_m && a.tile_n == b.tile_n; }));
}
}  // namespace

std::vector<Config> valid_configs(const Problem& p, ArchId arch) { return valid_configs(p, arch, device_model(arch)); }

std::vector<Config> valid_configs(const Problem& p, ArchId arch, const DeviceModel& dev) {
  if (dev.sm_count < 1 || dev.smem_per_sm < 1 || dev.regs_per_sm < 1)
    fail("valid_configs: the device model needs sm_count, smem_per_sm and regs_per_sm >= 1");
  // Up to M = 64 the gemv kernel and the tiled list take turns in the order (what --max-candidates keeps; see below);
  // beyond, only the tiled list. On sm_90a the tiled list is the wgmma_ws and wgmma_pairs candidates in turn, then wgmma and
  // mma.sync alternating, for M <= 64; beyond, one wgmma_pairs, two wgmma_ws, one wgmma and one mma.sync candidate in
  // turn (the two warp-specialized kernels won every tuned M > 64 on the H100, so they get three fifths of a
  // --max-candidates prefix; the other two stay in it as a check).
  const auto g = gemv_candidates(p, arch, dev), ws = ws_candidates(p, arch, dev), w = wgmma_candidates(p, arch, dev),
             mm = mma_candidates(p, arch, dev), pr = pairs_candidates(p, arch, dev);
  std::vector<Config> m;
  if (p.m <= 64)  // decode sizes: the weight-streaming ws variants (stream-K first), with the pairs kernel's in turn
    for (size_t i = 0; i < std::max(ws.size(), pr.size()); ++i) {
      if (i < ws.size()) m.push_back(ws[i]);
      if (i < pr.size()) m.push_back(pr[i]);
    }
  // Packed weights have no wgmma_pairs list: its place in each round goes to a third wgmma_ws candidate, so that the
  // warp-specialized share of a prefix stays three fifths (Llama-3.1-8B int8, M = 256, H200: the exhaustive winner
  // m256 n128 split_k 2 was 16th of the list with two ws per round, outside the fast strategy's 16, and 1.16-1.20x
  // ahead of the fast winner).
  const size_t ws_per_round = pr.empty() ? 3 : 2;
  const size_t ws_rounds = p.m <= 64 ? 0 : std::max((ws.size() + ws_per_round - 1) / ws_per_round, pr.size());
  for (size_t i = 0; i < std::max({ws_rounds, w.size(), mm.size()}); ++i) {
    if (i < pr.size() && p.m > 64) m.push_back(pr[i]);
    for (size_t j = ws_per_round * i; j < ws_per_round * (i + 1) && j < ws.size() && p.m > 64; ++j) m.push_back(ws[j]);
    if (i < w.size()) m.push_back(w[i]);
    if (i < mm.size()) m.push_back(mm[i]);
  }
  // Up to M = 16 with 8- and 4-bit weights, three gemv candidates to one of the tiled list: there the gemv kernel's
  // best ran 1.13-2.49x ahead of every tiled kernel's on each of shapes/qwen7b.json's 40 such problems (H200,
  // exhaustive), and the int8 M 1 winners (register ring, 8 K warps) came 50th-62nd in the alternating order. With
  // 16-bit weights (the tiled wgmma_ws won M 1 and 16 there) and beyond M = 16, one in turn.
  std::vector<Config> out;
  const size_t per = p.m <= 16 && quant::format_bits(p.format) < 16 ? 3 : 1;
  for (size_t i = 0, j = 0; i < g.size() || j < m.size();) {
    for (size_t k = 0; k < per && i < g.size(); ++k) out.push_back(g[i++]);
    if (j < m.size()) out.push_back(m[j++]);
  }
  return out;
}

namespace {
/// Whether p takes ws_prefill_tile with split_k_tail 2 by default: its tiles fill one to 8 waves of the arch's SMs
/// (device_model) and the last wave's tiles, split in two, fill at most one more. On the H200 (Qwen2.5-7B, a tune of
/// the 128..256-token ws tiles, same run, autotune medians) it took M = 1024 from 79.8 to 77.3 us (int4; stream-K
/// before), M = 4096 from 236.6 to 221.3 (int4), 225.7 to 215.6 (nf4), 222.1 to 218.9 (fp16) and 232.2 to 231.3 (int8)
/// against split_k 1; at M = 16384 (17.5 waves) it ran about 1% slower.
bool ws_tail_fits(const Problem& p, ArchId arch) {
  const int sms = device_model(arch).sm_count;
  const long long tiles = output_tiles(p, ws_prefill_tile(WsSplit::split_k_tail, 2));
  const long long whole = ws_tail_whole_tiles(tiles, 2, sms);
  return tiles > sms && tiles < 8LL * sms && whole < tiles && (tiles - whole) * 2 <= sms;
}
}  // namespace

Config default_config(ArchId arch, const Problem& p) {
  // sm_90a up to M = 2048: the configs that won shapes/qwen7b.json's exhaustive sweep on the H200 (K 3584, N 4608,
  // every format; bench/results/nvidia_h200x2_order_qwen7b.txt), where the rules below were 1.15-3.2x behind them:
  // 16-bit weights, M <= 16: wgmma_ws 8 / 16 x 128, one consumer, 8 slots, split-K 2 (gemv 1.7-2.0x slower); 8- and
  // 4-bit weights at 8 < M <= 16: gemv with X by TMA and the balanced tail, 4 K warps (8 for int8; bulk_rows and the
  // register ring 1.3-1.5x slower);
  // M <= 64: wgmma_ws 64 x 128, 2 consumers, 4 slots, split-K 3 for 8- and 4-bit weights (from M = 33), wgmma_pairs
  // 64 x 48 with 16 slots for 16-bit (mma.sync 2.3-3.2x slower); 128 < M <= 1024 with 16-bit weights: wgmma_pairs
  // 128 x 96, 8 slots, clusters of 2; 8- and 4-bit weights at 128 < M <= 512: wgmma_ws 256 x 128 split-K 3, up to
  // M = 2048: stream-K, or split_k_tail 2 where it fits (ws_tail_fits), as for every format beyond. Each range is one
  // where valid_configs keeps the tile (the tuner measures the default first).
  if (arch.sm == 90 && arch.arch_specific) {
    const bool narrow = quant::format_bits(p.format) < 16;
    std::vector<Config> prefs;
    if (!narrow && p.m <= 16)
      prefs.push_back(make_config(p.m <= 8 ? 8 : 16, 128, WsConfig{1, 1, 8, WsSplit::split_k, 2}));
    else if (narrow && p.m > 8 && p.m <= 16 && p.k % 64 == 0) {  // X by TMA too: its tensor map is {64, K / 64, M}
      const Config g = make_config(
          16, 16,
          GemvConfig{quant::format_bits(p.format) == 4 ? 4 : 8, 1, GemvLoad::tma_x, 1, GemvReduce::balanced_tail, 1});
      if (gemv_smem_bytes(g, p.format, p.k) <= gemv_smem_cap(arch.sm) &&
          g.gemv.warps_k <= (p.k + gemv_step_k(p.format) - 1) / gemv_step_k(p.format))
        prefs.push_back(g);
    } else if (p.m > 16 && p.m <= 64 && !narrow) prefs.push_back(make_config(64, 48, PairsConfig{16, 1}));
    else if (p.m > 32 && p.m <= 64 && narrow)
      prefs.push_back(make_config(64, 128, WsConfig{2, 1, 4, WsSplit::split_k, 3}));
    else if (p.m > 128 && p.m <= 1024 && !narrow) prefs.push_back(make_config(128, 96, PairsConfig{8, 2}));
    else if (p.m > 128 && p.m <= 512 && narrow)
      prefs.push_back(make_config(256, 128, WsConfig{2, 1, 4, WsSplit::split_k, 3}));
    else if (p.m > 512 && p.m <= 2048 && narrow && !ws_tail_fits(p, arch))
      prefs.push_back(ws_prefill_tile(WsSplit::stream_k, 1));
    for (const auto& c : prefs)
      if (!invalid_reason(p.dtype, p.format, p.head_dim, p.rope, c, arch)) return c;
  }
  // Decode sizes: the weight-streaming kernel (gemv_default).
  if (Config g; gemv_default(p, arch, g)) return g;
  // sm_90a otherwise beyond decode sizes: the Hopper mainloops with the shapes that won on the H100 for Qwen2.5-7B
  // (prefill: warp-specialized 256 x 128 with a 4-slot ring, its last wave split over clusters of 2 where that fits,
  // ws_tail_fits; up to a few hundred tokens: warp-specialized stream-K 128 x 128 with 6 slots; else wgmma 128 x 128,
  // 3 stages).
  if (arch.sm == 90 && arch.arch_specific && p.m > 64) {
    std::vector<Config> prefs;
    if (p.m > 512 && ws_tail_fits(p, arch)) prefs.push_back(ws_prefill_tile(WsSplit::split_k_tail, 2));
    if (p.m > 512) prefs.push_back(ws_prefill_tile(WsSplit::split_k, 1));
    if (p.m <= 512) prefs.push_back(make_config(128, 128, WsConfig{2, 1, 6, WsSplit::stream_k, 1}));
    if (p.m > 512) prefs.push_back(make_config(256, 128, WgmmaConfig{64, 3, 1, 1}));
    prefs.push_back(make_config(128, 128, WgmmaConfig{64, 3, 1, 1}));
    for (const auto& c : prefs)
      if (!invalid_reason(p.dtype, p.format, p.head_dim, p.rope, c, arch)) return c;
  }
  // Otherwise preference by M (a split-K tile for small M, a 128x128 tile for prefill);
  // the first one valid for the format wins, else the first valid config of the space.
  auto mma = [](int tm, int tn, int wm, int wn, int st, int sk) {
    return make_config(tm, tn, MmaConfig{64, wm, wn, st, sk, 1});
  };
  const std::vector<Config> prefs =
      p.m <= 16   ? std::vector<Config>{mma(16, 128, 1, 4, 2, 4), mma(16, 128, 1, 8, 2, 4), mma(16, 256, 1, 8, 2, 4)}
      : p.m <= 64 ? std::vector<Config>{mma(32, 128, 1, 4, 2, 2), mma(32, 128, 2, 4, 2, 2), mma(64, 128, 2, 4, 2, 1)}
                  : std::vector<Config>{mma(128, 128, 2, 4, 3, 1), mma(128, 256, 2, 4, 3, 1), mma(64, 128, 2, 4, 3, 1)};
  for (const auto& c : prefs)
    if (!invalid_reason(p.dtype, p.format, p.head_dim, p.rope, c, arch)) return c;
  const auto v = valid_configs(p, arch);
  if (v.empty()) fail("no valid config for " + p.key() + " on " + arch_name(arch));
  return v.front();
}

bool same_config(const Config& a, const Config& b) {
  if (a.mainloop != b.mainloop || a.tile_m != b.tile_m || a.tile_n != b.tile_n) return false;
  switch (a.mainloop) {
    case Mainloop::mma:
      return a.mma.tile_k == b.mma.tile_k && a.mma.warps_m == b.mma.warps_m && a.mma.warps_n == b.mma.warps_n &&
             a.mma.stages == b.mma.stages && a.mma.split_k == b.mma.split_k && a.mma.prefetch == b.mma.prefetch;
    case Mainloop::gemv:
      return a.gemv.warps_k == b.gemv.warps_k && a.gemv.warps_n == b.gemv.warps_n && a.gemv.load == b.gemv.load &&
             a.gemv.prefetch == b.gemv.prefetch && a.gemv.reduce == b.gemv.reduce && a.gemv.cluster == b.gemv.cluster;
    case Mainloop::wgmma:
      return a.wgmma.tile_k == b.wgmma.tile_k && a.wgmma.stages == b.wgmma.stages &&
             a.wgmma.split_k == b.wgmma.split_k && a.wgmma.prefetch == b.wgmma.prefetch;
    case Mainloop::wgmma_ws:
      return a.ws.consumers == b.ws.consumers && a.ws.k_groups == b.ws.k_groups && a.ws.stages == b.ws.stages &&
             a.ws.split == b.ws.split && a.ws.split_k == b.ws.split_k;
    case Mainloop::wgmma_pairs: return a.pairs.stages == b.pairs.stages && a.pairs.cluster_m == b.pairs.cluster_m;
  }
  return false;
}

const char* mainloop_name(Mainloop m) {
  switch (m) {
    case Mainloop::mma: return "mma";
    case Mainloop::gemv: return "gemv";
    case Mainloop::wgmma: return "wgmma";
    case Mainloop::wgmma_ws: return "wgmma_ws";
    case Mainloop::wgmma_pairs: return "wgmma_pairs";
  }
  return "?";
}

const char* gemv_load_name(GemvLoad l) {
  switch (l) {
    case GemvLoad::register_ring: return "register_ring";
    case GemvLoad::bulk_rows: return "bulk_rows";
    case GemvLoad::tma: return "tma";
    case GemvLoad::tma_x: return "tma_x";
  }
  return "?";
}

const char* gemv_reduce_name(GemvReduce r) {
  switch (r) {
    case GemvReduce::none: return "none";
    case GemvReduce::cluster: return "cluster";
    case GemvReduce::balanced_tail: return "balanced_tail";
  }
  return "?";
}

std::string variant_name(const Problem& p, const Config& c, ArchId arch) {
  std::ostringstream s;
  s << kFamily << "__" << dt_tag(p.dtype) << '_' << fmt_tag(p.format) << "_d" << p.head_dim << '_'
    << (p.has_bias ? "bias" : "nobias") << '_' << (p.rope ? "rope" : "norope") << (p.kv_cache ? "_kvcache" : "") << "__"
    << mainloop_name(c.mainloop) << "_m" << c.tile_m << "_n" << c.tile_n;
  switch (c.mainloop) {
    case Mainloop::mma:
      s << "_k" << c.mma.tile_k << "_w" << c.mma.warps_m << 'x' << c.mma.warps_n << "_s" << c.mma.stages << "_sk"
        << c.mma.split_k << "_p" << c.mma.prefetch;
      break;
    case Mainloop::gemv:
      s << "_wk" << c.gemv.warps_k << "_wn" << c.gemv.warps_n << '_' << gemv_load_name(c.gemv.load) << "_p"
        << c.gemv.prefetch
        << (c.gemv.reduce == GemvReduce::cluster         ? "_cl" + std::to_string(c.gemv.cluster)
            : c.gemv.reduce == GemvReduce::balanced_tail ? std::string("_bal")
                                                         : std::string("_nored"));
      break;
    case Mainloop::wgmma:
      s << "_k" << c.wgmma.tile_k << "_s" << c.wgmma.stages << "_sk" << c.wgmma.split_k << "_p" << c.wgmma.prefetch;
      break;
    case Mainloop::wgmma_ws:
      s << "_c" << c.ws.consumers << "_kg" << c.ws.k_groups << "_s" << c.ws.stages
        << (ws_stream_k(c) ? std::string("_streamk") : "_sk" + std::to_string(c.ws.split_k))
        << (ws_split_tail(c) ? "tail" : "");
      break;
    case Mainloop::wgmma_pairs: s << "_s" << c.pairs.stages << "_cm" << c.pairs.cluster_m; break;
  }
  s << "__" << arch_name(arch);
  return s.str();
}

namespace {
/// The kernels' weight element template argument, by name: "kt::quant::Format::nf4" (a K-blocked format gives its
/// element; the layout lives in the host's tensor maps).
std::string element_expr(quant::Format f) {
  return std::string("kt::quant::Format::") + fmt_tag(quant::format_element(f));
}
}  // namespace

std::string name_expression(const Problem& p, const Config& c) {
  std::ostringstream s;
  if (c.mainloop == Mainloop::gemv) {  // qkv_gemv<.., load>, qkv_gemv_cluster<.., cluster>, qkv_gemv_tma<..> (tma),
                                       // qkv_gemv_tma_x<..> (tma_x); the template's Stages argument is int(load)
    const GemvConfig& g = c.gemv;
    const bool cl = g.reduce == GemvReduce::cluster;
    s << (cl                          ? "kt::qkv::qkv_gemv_cluster<kt::DType::"
          : g.load == GemvLoad::tma   ? "kt::qkv::qkv_gemv_tma<kt::DType::"
          : g.load == GemvLoad::tma_x ? "kt::qkv::qkv_gemv_tma_x<kt::DType::"
                                      : "kt::qkv::qkv_gemv<kt::DType::")
      << (p.dtype == DType::f16 ? "f16" : "bf16") << ", " << element_expr(p.format) << ", " << p.head_dim << ", "
      << (p.has_bias ? "true" : "false") << ", " << (p.rope ? "true" : "false") << ", "
      << (p.kv_cache ? "true" : "false") << ", " << c.tile_m << ", " << c.tile_n << ", " << g.warps_k << ", "
      << g.warps_n << ", " << g.prefetch;
    if (cl || !gemv_tma(c)) s << ", " << (cl ? g.cluster : int(g.load));
    if (g.reduce == GemvReduce::balanced_tail) s << ", true";  // Balance
    s << ">";
    return s.str();
  }
  if (c.mainloop ==
      Mainloop::wgmma_ws) {  // qkv_wgmma_ws<.., stream-K>, qkv_wgmma_ws_cluster<.., split_k> (split_k > 1)
    s << (ws_cluster(c) > 1 ? "kt::qkv::qkv_wgmma_ws_cluster<kt::DType::" : "kt::qkv::qkv_wgmma_ws<kt::DType::")
      << (p.dtype == DType::f16 ? "f16" : "bf16") << ", " << element_expr(p.format) << ", " << p.head_dim << ", "
      << (p.has_bias ? "true" : "false") << ", " << (p.rope ? "true" : "false") << ", "
      << (p.kv_cache ? "true" : "false") << ", " << c.tile_m << ", " << c.tile_n << ", " << ws_consumers(c) << ", "
      << c.ws.stages << ", "
      << (ws_cluster(c) > 1 ? std::to_string(ws_cluster(c))
          : ws_stream_k(c)  ? "true"
                            : "false")
      << (ws_kgroups(c) > 1 ? ", " + std::to_string(ws_kgroups(c)) : std::string()) << ">";
    return s.str();
  }
  if (c.mainloop == Mainloop::wgmma_pairs) {
    s << "kt::qkv::qkv_wgmma_pairs<kt::DType::" << (p.dtype == DType::f16 ? "f16" : "bf16") << ", "
      << element_expr(p.format) << ", " << p.head_dim << ", " << (p.has_bias ? "true" : "false") << ", "
      << (p.rope ? "true" : "false") << ", " << (p.kv_cache ? "true" : "false") << ", " << c.tile_m << ", " << c.tile_n
      << ", " << c.pairs.stages << ">";
    return s.str();
  }
  if (c.mainloop == Mainloop::wgmma) {
    s << "kt::qkv::qkv_wgmma<kt::DType::" << (p.dtype == DType::f16 ? "f16" : "bf16") << ", " << element_expr(p.format)
      << ", " << p.head_dim << ", " << (p.has_bias ? "true" : "false") << ", " << (p.rope ? "true" : "false") << ", "
      << (p.kv_cache ? "true" : "false") << ", " << c.tile_m << ", " << c.tile_n << ", " << c.wgmma.tile_k << ", "
      << c.wgmma.stages << ", " << c.wgmma.prefetch << ">";
    return s.str();
  }
  s << "kt::qkv::qkv_proj<kt::DType::" << (p.dtype == DType::f16 ? "f16" : "bf16") << ", " << element_expr(p.format)
    << ", " << p.head_dim << ", " << (p.has_bias ? "true" : "false") << ", " << (p.rope ? "true" : "false") << ", "
    << (p.kv_cache ? "true" : "false") << ", " << c.tile_m << ", " << c.tile_n << ", " << c.mma.tile_k << ", "
    << c.mma.warps_m << ", " << c.mma.warps_n << ", " << c.mma.stages << ", " << c.mma.prefetch << ">";
  return s.str();
}

KernelSource kernel_source(const Problem& p, const Config& c, ArchId arch) {
  KernelSource k;
  k.family = kFamily;
  k.variant_name = variant_name(p, c, arch);
  k.name_expression = name_expression(p, c);
  k.source = c.mainloop == Mainloop::gemv          ? "#include \"qkv_proj/qkv_gemv.cuh\"\n"
             : c.mainloop == Mainloop::wgmma       ? "#include \"qkv_proj/qkv_wgmma.cuh\"\n"
             : c.mainloop == Mainloop::wgmma_ws    ? "#include \"qkv_proj/qkv_wgmma_ws.cuh\"\n"
             : c.mainloop == Mainloop::wgmma_pairs ? "#include \"qkv_proj/qkv_wgmma_pairs.cuh\"\n"
                                                   : "#include \"qkv_proj/qkv_proj.cuh\"\n";
  k.arch = arch;
  // gemv: shared memory grows with K (the rows' scales; bulk_rows their data too; set at launch): allow the whole
  // per-block maximum.
  k.dynamic_smem_bytes = unsigned(c.mainloop == Mainloop::gemv          ? gemv_smem_cap(arch.sm)
                                  : c.mainloop == Mainloop::wgmma       ? wgmma_smem_bytes(c, p.format)
                                  : c.mainloop == Mainloop::wgmma_ws    ? ws_smem_bytes(c, p.format)
                                  : c.mainloop == Mainloop::wgmma_pairs ? wp_smem_bytes(c)
                                                                        : smem_bytes(c));
  return k;
}

int gemv_row_blocks(const Problem& p, const Config& c) {
  const int per_block = c.gemv.warps_n * gemv_row_tiles(c);
  return (p.n() / 16 + per_block - 1) / per_block;
}

GemvBalance gemv_balance_of(const Problem& p, const Config& c, int sm_count) {
  if (sm_count < 1) fail("gemv balanced_tail needs the GPU's SM count (got " + std::to_string(sm_count) + ")");
  const long long units = (long long)gemv_row_blocks(p, c) * ((p.m + c.tile_m - 1) / c.tile_m);
  return gemv_balance(units, (p.k + gemv_step_k(p.format) - 1) / gemv_step_k(p.format), sm_count);
}

long long ws_units(const Problem& p, const Config& c) { return output_tiles(p, c) * (p.k / 64); }

int stream_k_blocks(const Problem& p, const Config& c, int sm_count) {
  if (sm_count < 1) fail("stream-K needs the GPU's SM count (got " + std::to_string(sm_count) + ")");
  return int(std::min<long long>(sm_count, ws_units(p, c)));
}

bool needs_sm_count(const Config& c) {
  return (c.mainloop == Mainloop::gemv && gemv_balanced(c)) ||
         (c.mainloop == Mainloop::wgmma_ws && (ws_stream_k(c) || ws_split_tail(c)));
}

LaunchDims launch_dims(const Problem& p, const Config& c, int sm_count) {
  LaunchDims d;
  if (c.mainloop == Mainloop::gemv) {  // one block per warps_n x row-tiles m16 tiles, per tile_m tokens
    d.grid_x = unsigned(gemv_row_blocks(p, c) * gemv_cluster(c));  // a cluster reduction: its ranks
    d.grid_y = unsigned((p.m + c.tile_m - 1) / c.tile_m);
    if (gemv_balanced(c)) {  // the balanced tail: a 1-D grid (gemv_balance)
      d.grid_x = unsigned(gemv_balance_of(p, c, sm_count).blocks());
      d.grid_y = 1;
    }
    d.grid_z = 1;
    d.block_x = unsigned(threads(c));
    d.smem_bytes = unsigned(gemv_smem_bytes(c, p.format, p.k));
    return d;
  }
  if (c.mainloop == Mainloop::wgmma_ws) {  // a 1-D grid over the (tile, K step) units (qkv_proj_config.h)
    const long long tiles = output_tiles(p, c);
    d.grid_x = unsigned(ws_stream_k(c) ? stream_k_blocks(p, c, sm_count) : tiles * ws_cluster(c));
    if (ws_split_tail(c)) {  // the full waves' whole tiles, then the rest split (qkv_proj_config.h, WsSplit)
      if (sm_count < 1) fail("split_k_tail needs the GPU's SM count (got " + std::to_string(sm_count) + ")");
      const long long whole = ws_tail_whole_tiles(tiles, ws_cluster(c), sm_count);
      d.grid_x = unsigned(whole + (tiles - whole) * ws_cluster(c));
    }
    d.grid_y = d.grid_z = 1;
    d.block_x = unsigned(threads(c));
    d.smem_bytes = unsigned(ws_smem_bytes(c, p.format));
    return d;
  }
  const int cluster_m = c.mainloop == Mainloop::wgmma_pairs ? c.pairs.cluster_m : 1;
  d.grid_x = unsigned(pairs_feature_tiles_or_n(p, c));  // ceil(n / tile_n); wgmma_pairs: pair chunks x head groups
  // Token tiles; wgmma_pairs: rounded up to whole clusters of cluster_m (the blocks past M exit at once).
  d.grid_y = unsigned(((p.m + c.tile_m - 1) / c.tile_m + cluster_m - 1) / cluster_m * cluster_m);
  d.cluster_y = unsigned(cluster_m);
  d.grid_z = unsigned(c.mainloop == Mainloop::wgmma ? c.wgmma.split_k
                      : c.mainloop == Mainloop::mma ? c.mma.split_k
                                                    : 1);
  d.block_x = unsigned(threads(c));
  d.smem_bytes = unsigned(c.mainloop == Mainloop::wgmma         ? wgmma_smem_bytes(c, p.format)
                          : c.mainloop == Mainloop::wgmma_pairs ? wp_smem_bytes(c)
                                                                : smem_bytes(c));
  return d;
}

bool weight_evict_first(const Problem& p, const Config& c) {
  const bool one_token_tile = p.m <= c.tile_m;
  if (c.mainloop == Mainloop::wgmma_pairs) return true;
  if (c.mainloop == Mainloop::wgmma_ws) return quant::format_bits(p.format) == 16 && one_token_tile;
  if (c.mainloop == Mainloop::gemv) return one_token_tile;
  return false;  // mma / wgmma: cp.async loads without a policy
}

bool uses_workspace(const Config& c) {
  switch (c.mainloop) {
    case Mainloop::wgmma_ws: return ws_stream_k(c);  // split_k > 1 reduces through the cluster's shared memory
    case Mainloop::gemv: return gemv_balanced(c);    // a cluster reduction uses distributed shared memory
    case Mainloop::mma: return c.mma.split_k != 1;
    case Mainloop::wgmma: return c.wgmma.split_k != 1;
    case Mainloop::wgmma_pairs: return false;
  }
  return false;
}

size_t workspace_bytes(const Problem& p, const Config& c, int sm_count) {
  if (!uses_workspace(c)) return 0;
  const auto d = launch_dims(p, c, sm_count);
  if (c.mainloop == Mainloop::wgmma_ws) return size_t(ws_workspace_slots(c, d.grid_x)) * c.tile_m * c.tile_n * 4;
  if (c.mainloop ==
      Mainloop::gemv) {  // one partial per tail piece: [tail unit][piece][tile_n features x tile_m tokens]
    const GemvBalance b = gemv_balance_of(p, c, sm_count);
    return std::max<size_t>(16, size_t(b.tail) * b.split * c.tile_m * c.tile_n * 4);
  }
  return size_t(d.grid_x) * d.grid_y * d.grid_z * c.tile_m * c.tile_n * 4;  // mma / wgmma: grid_z = split_k
}

size_t counter_bytes(const Problem& p, const Config& c) {
  if (!uses_workspace(c)) return 0;
  if (c.mainloop == Mainloop::gemv)  // one per (unit, warp column): enough for any SM count's tail
    return size_t(gemv_row_blocks(p, c)) * ((p.m + c.tile_m - 1) / c.tile_m) * c.gemv.warps_n * 4;
  return size_t(output_tiles(p, c)) * 4;
}

nlohmann::json problem_to_json(const Problem& p) {
  nlohmann::json j = {{"dtype", dt_tag(p.dtype)},
                      {"format", fmt_tag(p.format)},
                      {"m", p.m},
                      {"k", p.k},
                      {"num_heads", p.num_heads},
                      {"num_kv_heads", p.num_kv_heads},
                      {"head_dim", p.head_dim},
                      {"has_bias", p.has_bias},
                      {"rope", p.rope}};
  if (p.kv_cache) j["kv_cache"] = true;  // plain problems keep the JSON they always had
  return j;
}

Problem problem_from_json(const nlohmann::json& j) {
  try {
    Problem p;
    const std::string dt = j.at("dtype");
    if (dt != "fp16" && dt != "bf16") fail("problem JSON field 'dtype': unknown dtype '" + dt + "'");
    p.dtype = dt == "fp16" ? DType::f16 : DType::bf16;
    p.format = parse_fmt(j.at("format"));
    p.m = j.at("m");
    p.k = j.at("k");
    p.num_heads = j.at("num_heads");
    p.num_kv_heads = j.at("num_kv_heads");
    p.head_dim = j.at("head_dim");
    p.has_bias = j.at("has_bias");
    p.rope = j.at("rope");
    p.kv_cache = j.value("kv_cache", false);  // absent in databases written before the KV-cache write
    return p;
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("problem JSON: ") + e.what());
  }
}

nlohmann::json config_to_json(const Config& c) {
  nlohmann::json j = {{"mainloop", mainloop_name(c.mainloop)}, {"tile_m", c.tile_m}, {"tile_n", c.tile_n}};
  switch (c.mainloop) {
    case Mainloop::mma:
      j["mma"] = {{"tile_k", c.mma.tile_k}, {"warps_m", c.mma.warps_m}, {"warps_n", c.mma.warps_n},
                  {"stages", c.mma.stages}, {"split_k", c.mma.split_k}, {"prefetch", c.mma.prefetch}};
      break;
    case Mainloop::gemv:
      j["gemv"] = {{"warps_k", c.gemv.warps_k},
                   {"warps_n", c.gemv.warps_n},
                   {"load", gemv_load_name(c.gemv.load)},
                   {"prefetch", c.gemv.prefetch},
                   {"reduce", gemv_reduce_name(c.gemv.reduce)},
                   {"cluster", c.gemv.cluster}};
      break;
    case Mainloop::wgmma:
      j["wgmma"] = {{"tile_k", c.wgmma.tile_k},
                    {"stages", c.wgmma.stages},
                    {"split_k", c.wgmma.split_k},
                    {"prefetch", c.wgmma.prefetch}};
      break;
    case Mainloop::wgmma_ws:
      j["wgmma_ws"] = {{"consumers", c.ws.consumers},
                       {"k_groups", c.ws.k_groups},
                       {"stages", c.ws.stages},
                       {"split", ws_stream_k(c)     ? "stream_k"
                                 : ws_split_tail(c) ? "split_k_tail"
                                                    : "split_k"},
                       {"split_k", c.ws.split_k}};
      break;
    case Mainloop::wgmma_pairs:
      j["wgmma_pairs"] = {{"stages", c.pairs.stages}, {"cluster_m", c.pairs.cluster_m}};
      break;
  }
  return j;
}

namespace {

/// The enumerator of `names` (indexed by value) that `s` spells; fails naming the field and the choices.
template <class E, size_t N>
E parse_enum(const std::string& field, const std::string& s, const char* const (&names)[N]) {
  std::string all;
  for (size_t i = 0; i < N; ++i) {
    if (s == names[i]) return E(int(i));
    all += (i ? ", " : "") + std::string(names[i]);
  }
  fail("config JSON field '" + field + "': unknown value '" + s + "' (expected " + all + ")");
}

}  // namespace

Config config_from_json(const nlohmann::json& j) {
  try {
    if (!j.is_object()) fail("config JSON must be an object, got " + j.dump());
    if (j.contains("stages") || j.contains("split_k") || j.contains("warps_m"))
      fail("config JSON " + j.dump() +
           " has the flat fields of tuning database schema 1 (stages / split_k / warps_m for every mainloop); open the "
           "database read-write with this kerntune once (autotune --db FILE, or kerntune's TuningDb) to migrate it");
    static const char* const kMainloops[] = {"mma", "gemv", "wgmma", "wgmma_ws", "wgmma_pairs"};
    const std::string ml = j.at("mainloop");
    Config c{};
    c.mainloop = parse_enum<Mainloop>("mainloop", ml, kMainloops);
    c.tile_m = j.at("tile_m");
    c.tile_n = j.at("tile_n");
    if (!j.contains(ml) || !j.at(ml).is_object())
      fail("config JSON " + j.dump() + ": mainloop '" + ml + "' needs its fields in an object '" + ml + "'");
    const nlohmann::json& f = j.at(ml);
    switch (c.mainloop) {
      case Mainloop::mma:
        c.mma = MmaConfig{f.at("tile_k"), f.at("warps_m"), f.at("warps_n"),
                          f.at("stages"), f.at("split_k"), f.at("prefetch")};
        break;
      case Mainloop::gemv: {
        static const char* const kLoads[] = {"register_ring", "bulk_rows", "tma", "tma_x"};
        static const char* const kReduce[] = {"none", "cluster", "balanced_tail"};
        c.gemv = GemvConfig{f.at("warps_k"),
                            f.at("warps_n"),
                            parse_enum<GemvLoad>("gemv.load", f.at("load"), kLoads),
                            f.at("prefetch"),
                            parse_enum<GemvReduce>("gemv.reduce", f.at("reduce"), kReduce),
                            f.at("cluster")};
        break;
      }
      case Mainloop::wgmma:
        c.wgmma = WgmmaConfig{f.at("tile_k"), f.at("stages"), f.at("split_k"), f.at("prefetch")};
        break;
      case Mainloop::wgmma_ws: {
        static const char* const kSplits[] = {"split_k", "stream_k", "split_k_tail"};
        c.ws = WsConfig{f.at("consumers"), f.at("k_groups"), f.at("stages"),
                        parse_enum<WsSplit>("wgmma_ws.split", f.at("split"), kSplits), f.at("split_k")};
        break;
      }
      case Mainloop::wgmma_pairs: c.pairs = PairsConfig{f.at("stages"), f.at("cluster_m")}; break;
    }
    return c;
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("config JSON: ") + e.what());
  }
}

namespace {

/// The paged KV-cache arguments of QkvParams (slot_mapping non-null), each error naming the argument: both caches
/// present and 16-byte aligned, the slot mapping 4-byte aligned, num_pages and page_size >= 1 with num_pages *
/// page_size slots addressable by an int32 slot, and per cache strides that are multiples of 8 elements and lay its
/// [num_pages, page_size, num_kv_heads, head_dim] elements out without overlap (any order of the three dimensions: the
/// vLLM / TensorRT-LLM [pages][slots][heads] layout and FlashInfer's [pages][heads][slots] both pass). The slots
/// themselves are device memory and are not read here: the kernels trust them (QkvParams::slot_mapping).
void check_kv_cache(const Problem& p, const QkvParams& a) {
  if (!a.k_cache || !a.v_cache) fail("a slot mapping needs k_cache and v_cache (both non-null device pointers)");
  for (auto [name, ptr] : {std::pair<const char*, const void*>{"k_cache", a.k_cache}, {"v_cache", a.v_cache}})
    if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0) fail(std::string(name) + " must be 16-byte aligned");
  if (reinterpret_cast<std::uintptr_t>(a.slot_mapping) % 4 != 0) fail("slot_mapping must be 4-byte aligned (int32)");
  if (a.page_size < 1) fail("page_size must be >= 1, got " + std::to_string(a.page_size));
  if (a.num_pages < 1) fail("num_pages must be >= 1, got " + std::to_string(a.num_pages));
  if ((long long)a.num_pages * a.page_size > 2147483647LL)
    fail("num_pages x page_size = " + std::to_string((long long)a.num_pages * a.page_size) +
         " slots exceed the int32 slot mapping");
  struct Dim {
    const char* name;
    long long stride, size;
  };
  for (int v = 0; v < 2; ++v) {
    const std::string cache = v ? "v_cache" : "k_cache";
    Dim d[3] = {{"page", v ? a.v_cache_page_stride : a.k_cache_page_stride, a.num_pages},
                {"slot", v ? a.v_cache_slot_stride : a.k_cache_slot_stride, a.page_size},
                {"head", v ? a.v_cache_head_stride : a.k_cache_head_stride, p.num_kv_heads}};
    for (const Dim& e : d)
      if (e.stride < 0 || e.stride % 8 != 0)
        fail(cache + "_" + e.name + "_stride must be a non-negative multiple of 8 elements, got " +
             std::to_string(e.stride));
    // No overlap: ordered by stride, each dimension steps past everything the smaller ones span (head_dim elements
    // contiguous innermost). Dimensions of size 1 are never stepped along.
    std::stable_sort(d, d + 3, [](const Dim& x, const Dim& y) { return x.stride < y.stride; });
    long long span = p.head_dim;  // elements one index of the dimensions so far covers
    for (const Dim& e : d) {
      if (e.size == 1) continue;
      if (e.stride < span)
        fail(cache + "_" + e.name + "_stride " + std::to_string(e.stride) + " overlaps the " + std::to_string(span) +
             " elements of the smaller dimensions ([num_pages " + std::to_string(a.num_pages) + ", page_size " +
             std::to_string(a.page_size) + ", num_kv_heads " + std::to_string(p.num_kv_heads) + ", head_dim " +
             std::to_string(p.head_dim) + "])");
      span = e.stride * (e.size - 1) + span;
    }
  }
}

}  // namespace

void check_params(const Problem& p, const Config& c, const QkvParams& a) {
  check_problem(p);
  if (a.m != p.m || a.k_dim != p.k || a.num_heads != p.num_heads || a.num_kv_heads != p.num_kv_heads)
    fail("kernel arguments do not match the problem's sizes");
  auto al16 = [](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; };
  if (!a.x || !a.w_data || !a.q) fail("x, w_data and q must be non-null device pointers");
  if (p.kv_cache) {
    if (!a.slot_mapping) fail("the problem has kv_cache set but slot_mapping is null");
    check_kv_cache(p, a);
  } else {
    if (a.slot_mapping) fail("slot_mapping given for a problem without kv_cache (its kernel has no cache write)");
    if (!a.k || !a.v) fail("k and v must be non-null device pointers (or set kv_cache and pass a slot mapping)");
    if (a.k_cache || a.v_cache)
      fail("k_cache / v_cache given without kv_cache and a slot_mapping (nothing would be written)");
  }
  if (!al16(a.x) || !al16(a.w_data) || !al16(a.q) || !al16(a.k) || !al16(a.v))
    fail("x, w_data, q, k and v must be 16-byte aligned");
  for (long long s : {a.x_row_stride, a.q_row_stride, a.k_row_stride, a.v_row_stride})
    if (s % 8 != 0) fail("row strides must be multiples of 8 elements, got " + std::to_string(s));
  if (a.x_row_stride < p.k) fail("x_row_stride is smaller than k");
  if (quant::format_group(p.format) != 0 && !a.w_scales)
    fail(std::string(fmt_tag(p.format)) + " weights need w_scales");
  if (quant::format_element(p.format) == quant::Format::int4 && !a.w_zeros)
    fail(std::string(fmt_tag(p.format)) + " weights need w_zeros");
  // The kernels read scales and zero points in 4-byte words (cp.async of whole rows, wgmma_ws's per-step words).
  auto al4 = [](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 4 == 0; };
  if (a.w_scales && !al4(a.w_scales)) fail("w_scales must be 4-byte aligned (the kernels read it in 4-byte words)");
  if (a.w_zeros && !al4(a.w_zeros)) fail("w_zeros must be 4-byte aligned (the kernels read it in 4-byte words)");
  if (p.has_bias && !a.bias) fail("the problem has a bias but bias is null");
  if (p.has_bias && reinterpret_cast<std::uintptr_t>(a.bias) % 4 != 0)
    fail("bias must be 4-byte aligned (read in pairs)");
  if (p.rope && !a.positions) fail("the problem has RoPE but positions is null");
  if (uses_workspace(c) && (!a.workspace || !a.counters))
    fail(c.mainloop == Mainloop::gemv       ? "gemv balanced_tail needs a workspace and counters"
         : c.mainloop == Mainloop::wgmma_ws ? "wgmma_ws stream-K needs a workspace and counters"
                                            : "split_k > 1 needs a workspace and counters");
  if (c.mainloop == Mainloop::wgmma_ws && ws_units(p, c) > 2147483647LL)
    fail("wgmma_ws: " + std::to_string(ws_units(p, c)) + " (tile, K step) units exceed the kernel's 32-bit index");
  if (c.mainloop == Mainloop::wgmma_ws && ws_cluster(c) > p.k / 64)
    fail("wgmma_ws: split_k " + std::to_string(ws_cluster(c)) + " exceeds the " + std::to_string(p.k / 64) +
         " K steps of 64 (every block needs at least one)");
  if (c.mainloop == Mainloop::gemv && c.gemv.load == GemvLoad::tma_x && p.k % 64 != 0)
    fail("gemv tma_x reads X through a {64, K / 64, M} tensor map: k = " + std::to_string(p.k) +
         " must be a multiple of 64");
  if (c.mainloop == Mainloop::gemv && gemv_smem_bytes(c, p.format, p.k) > gemv_smem_cap(90))
    fail("gemv holds the block's row scales (bulk_rows: and rows) in shared memory: " +
         std::to_string(gemv_smem_bytes(c, p.format, p.k)) + " bytes for k = " + std::to_string(p.k) + " exceed the " +
         std::to_string(gemv_smem_cap(90)) + " bytes per block");
  if (quant::format_element(p.format) == quant::Format::nvfp4 && !(a.tensor_scale > 0.f))
    fail(std::string(fmt_tag(p.format)) + " needs a positive tensor_scale");
}

}  // namespace qkv
}  // namespace kt
