// qkv_proj family (CPU): problem rules and errors, pruning, naming, workspace sizing, JSON, parameter checks;
// [nvrtc]: every binary of one full class compiles, and the template rejects invalid configs itself.
#include <algorithm>
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <set>
#include <tuple>

#include "generator/arch.h"
#include "generator/qkv_family.h"
#include "quant/quant.h"
#include "tests/generator/pairwise_sample.h"

using namespace kt;
using namespace kt::qkv;

namespace {
Problem qwen(quant::Format f = quant::Format::nf4, DType d = DType::bf16, int m = 16) {
  Problem p;
  p.format = f;
  p.dtype = d;
  p.m = m;
  return p;
}
/// Kernel arguments that pass check_params for p except where a test breaks them: every pointer at `dummy` (never
/// dereferenced on the host), natural strides, p's sizes, tensor_scale 1. No workspace.
QkvParams host_params(const Problem& p, int* dummy) {
  QkvParams a{};
  a.x = a.w_data = a.w_scales = a.w_zeros = a.bias = dummy;
  a.positions = dummy;
  a.q = a.k = a.v = dummy;
  a.x_row_stride = p.k;
  a.q_row_stride = a.k_row_stride = a.v_row_stride = 128;
  a.m = p.m;
  a.k_dim = p.k;
  a.num_heads = p.num_heads;
  a.num_kv_heads = p.num_kv_heads;
  a.tensor_scale = 1.f;
  return a;
}
Config mk_mma(int tm, int tn, int tk, int wm, int wn, int st, int sk, int pf) {
  return make_config(tm, tn, MmaConfig{tk, wm, wn, st, sk, pf});
}
Config mk_gemv(int tm, int tn, int wk, int wn, GemvLoad ld, int pf, GemvReduce r = GemvReduce::none, int cluster = 1) {
  return make_config(tm, tn, GemvConfig{wk, wn, ld, pf, r, cluster});
}
Config mk_wgmma(int tm, int tn, int tk, int st, int sk, int pf) {
  return make_config(tm, tn, WgmmaConfig{tk, st, sk, pf});
}
/// split_k 0: stream-K.
Config mk_ws(int tm, int tn, int consumers, int k_groups, int st, int sk) {
  return make_config(
      tm, tn, WsConfig{consumers, k_groups, st, sk == 0 ? WsSplit::stream_k : WsSplit::split_k, sk == 0 ? 1 : sk});
}
Config mk_pairs(int tm, int tn, int st, int cm = 1) { return make_config(tm, tn, PairsConfig{st, cm}); }
/// wgmma_ws split as one number: 0 for stream-K, else split_k.
int ws_split(const Config& c) { return ws_stream_k(c) ? 0 : c.ws.split_k; }
const GemvLoad kRing = GemvLoad::register_ring, kBulk = GemvLoad::bulk_rows, kTma = GemvLoad::tma,
               kTmaX = GemvLoad::tma_x;
}  // namespace

TEST_CASE("qkv_proj problems are refused with the rule they break", "[generator][qkv]") {
  CHECK_NOTHROW(check_problem(qwen()));
  Problem p = qwen(quant::Format::int4);
  p.k = 3584 + 64;  // a multiple of 64 but not of the int4 group of 128
  CHECK_THROWS_WITH(check_problem(p), Catch::Contains("not a multiple of the int4 block of 128"));
  p = qwen(quant::Format::nf4);
  p.k = 100;
  CHECK_THROWS_WITH(check_problem(p), Catch::Contains("multiple of 64"));
  p = qwen(quant::Format::fp16, DType::bf16);
  CHECK_THROWS_WITH(check_problem(p), Catch::Contains("fp16 weights need fp16 activations"));
  p = qwen();
  p.head_dim = 96;
  CHECK_THROWS_WITH(check_problem(p), Catch::Contains("head_dim 96"));
  p = qwen();
  p.num_kv_heads = 5;
  CHECK_THROWS_WITH(check_problem(p), Catch::Contains("multiple of num_kv_heads"));
  p = qwen();
  p.m = 0;
  CHECK_THROWS_WITH(check_problem(p), Catch::Contains("m (tokens)"));
}

TEST_CASE("qkv_proj space: pruning by M, validity, unique names", "[generator][qkv]") {
  const ArchId arch = parse_arch("sm_90a");
  for (int m : {1, 16, 37, 256, 4096}) {
    const Problem p = qwen(quant::Format::nf4, DType::bf16, m);
    const auto cs = valid_configs(p, arch);
    INFO("m " << m);
    REQUIRE(!cs.empty());
    std::set<std::string> names;
    for (const auto& c : cs) {
      CHECK(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, c, arch) == nullptr);
      const auto d = launch_dims(p, c, 132);
      if (c.mainloop == Mainloop::gemv) {
        CHECK(m <= 64);
        const int tm = m <= 8 ? 8 : m <= 16 ? 16 : 64;  // the power of two >= M, at least 8, or half of it
        CHECK((c.tile_m == tm || (tm > 8 && c.tile_m == tm / 2)));
        const int cl = gemv_cluster(c);
        CHECK((cl == 1 || cl == 2 || cl == 4 || cl == 8));
        if (c.gemv.reduce != GemvReduce::cluster) CHECK(c.gemv.cluster == 1);
        if (c.gemv.reduce == GemvReduce::cluster) CHECK(c.gemv.load == kBulk);  // K over a cluster's blocks
        CHECK(c.gemv.warps_k * cl <= 3584 / 128);  // every warp gets a K step (4-bit warp step 128)
        if (!gemv_balanced(c))
          CHECK(d.grid_x * c.tile_n == 4608u * cl);  // blocks (x cluster ranks) cover the 288 m16 tiles
        if (gemv_balanced(c))
          CHECK(d.grid_x ==
                unsigned(gemv_balance(4608 / c.tile_n * ((m + c.tile_m - 1) / c.tile_m), 28, 132).blocks()));
        CHECK(uses_workspace(c) == gemv_balanced(c));  // clusters reduce in distributed shared memory
      } else if (c.mainloop == Mainloop::wgmma_ws) {
        CHECK(c.tile_n % p.head_dim == 0);
        CHECK((c.tile_m == 8 || m > c.tile_m / 2));  // a token tile more than half full
        CHECK(d.block_x ==
              unsigned(c.ws.consumers * c.ws.k_groups * 128 + 128));  // consumer warpgroups (x K groups) + the producer
        CHECK(c.tile_n == 64 * c.ws.consumers * ws_atoms(c));
        const long long tiles = (long long)((4608 + c.tile_n - 1) / c.tile_n) * ((m + c.tile_m - 1) / c.tile_m);
        if (ws_split(c) > 1 && !ws_split_tail(c)) CHECK(tiles < 132);
        if (!ws_stream_k(c) && !ws_split_tail(c)) CHECK(d.grid_x == unsigned(tiles * c.ws.split_k));
        if (ws_split_tail(c)) {  // full waves of whole tiles, then one partial wave of split tiles
          const long long whole = tiles / 132 * 132 / c.ws.split_k * c.ws.split_k;
          CHECK(whole > 0);
          CHECK(whole < tiles);
          CHECK(d.grid_x == unsigned(whole + (tiles - whole) * c.ws.split_k));
          CHECK(ws_whole_tiles(int(tiles), c.ws.split_k, int(d.grid_x)) == whole);
          CHECK(d.grid_x % unsigned(c.ws.split_k) == 0u);  // whole clusters
        }
        if (ws_stream_k(c)) {  // stream-K: one block per SM, more units than SMs
          CHECK(c.ws.split_k == 1);
          CHECK(d.grid_x == 132u);
          CHECK(tiles * 56 > 132);
        }
        CHECK(d.grid_y == 1u);
        CHECK(d.smem_bytes == unsigned(ws_smem_bytes(c, p.format)));
      } else if (c.mainloop == Mainloop::wgmma) {
        CHECK(c.tile_n % p.head_dim == 0);
        CHECK((c.tile_m == 64 || m > c.tile_m / 2));       // one warpgroup per 64 tokens
        CHECK(d.block_x == unsigned(c.tile_m / 16 * 32));  // one warpgroup per 64 tokens
        if (c.wgmma.split_k > 1) CHECK(d.grid_x * d.grid_y < 132);
        CHECK(d.grid_z == unsigned(c.wgmma.split_k));
        CHECK(d.smem_bytes == unsigned(wgmma_smem_bytes(c, p.format)));
      } else {
        CHECK(c.tile_n % p.head_dim == 0);  // RoPE needs whole heads in a tile
        if (c.mainloop == Mainloop::mma) {
          if (m <= 16) CHECK(c.tile_m == 16);
          if (c.mma.split_k > 1) CHECK(d.grid_x * d.grid_y < 264);
          CHECK(d.grid_z == unsigned(c.mma.split_k));
        }
      }
      CHECK(names.insert(variant_name(p, c, arch)).second);
    }
    bool has_split = false, has_gemv = false, has_half_gemv = false, has_wgmma = false, has_ws = false,
         has_cluster = false;
    for (const auto& c : cs) {
      has_split |= c.mainloop == Mainloop::mma && c.mma.split_k > 1;
      has_gemv |= c.mainloop == Mainloop::gemv;
      has_cluster |= c.mainloop == Mainloop::gemv && c.gemv.reduce == GemvReduce::cluster;
      has_wgmma |= c.mainloop == Mainloop::wgmma;
      has_ws |= c.mainloop == Mainloop::wgmma_ws;
      has_half_gemv |= c.mainloop == Mainloop::gemv && c.tile_m == 8 && m > 8;
    }
    CHECK(has_half_gemv == (m == 16));  // M = 16 also gets two 8-token tiles per set of rows
    CHECK(has_split == (m <= 256));
    CHECK(has_gemv == (m <= 64));  // at M = 37 only the one-warp cluster blocks fit 4-bit tile_m 32 / 64 in registers
    CHECK(has_cluster == (m <= 64));
    CHECK(has_wgmma);  // sm_90a: the Hopper mainloops at every M
    CHECK(has_ws);
    // Decode sizes try the weight-streaming kernel first.
    if (m <= 16) CHECK(cs.front().mainloop == Mainloop::gemv);
    // Packed weights at M = 16 are decode-bound: the 108 blocks of split_k 3 over 36 tiles of 128 features are
    // among the first 24 candidates (the prefix a --max-candidates 24 tune measures); split_k 3
    // never with tile_m 8 (M <= 8 is the gemv's).
    bool ws_split3_m16 = false;
    for (size_t i = 0; i < cs.size(); ++i) {
      const Config& c = cs[i];
      if (c.mainloop != Mainloop::wgmma_ws || ws_split(c) != 3) continue;
      CHECK(c.tile_m >= 16);
      ws_split3_m16 |= i < 24 && c.tile_m == 16 && c.tile_n == 128;
    }
    if (m == 16) CHECK(ws_split3_m16);
    // Two K groups only for the decode-bound token tiles 16 / 32, one atom per consumer warpgroup, rings of
    // 6 or 8 slots, never stream-K; the M = 16 list holds one with split_k 3 among the first 60 (the decode tune's
    // --max-candidates).
    bool kg2_m16 = false;
    for (size_t i = 0; i < cs.size(); ++i) {
      const Config& c = cs[i];
      if (c.mainloop != Mainloop::wgmma_ws || c.ws.k_groups == 1) continue;
      CHECK(c.ws.k_groups == 2);
      CHECK((c.tile_m == 16 || c.tile_m == 32));
      CHECK(ws_atoms(c) == 1);
      CHECK((c.ws.stages == 6 || c.ws.stages == 8));
      CHECK(!ws_stream_k(c));
      kg2_m16 |= i < 60 && ws_split(c) == 3 && c.tile_m == 16;
    }
    if (m == 16) CHECK(kg2_m16);
  }
  {  // The GPU test's K = 128 case (2 K steps) holds a two-group split_k 2 config, where each rank's second group has
     // no step, and K = 384 one with split_k 4.
    for (auto [k, split] : {std::pair{128, 2}, {384, 4}}) {
      auto p = qwen(quant::Format::int4, DType::bf16, 16);
      p.k = k;
      bool found = false;
      for (const auto& c : valid_configs(p, arch))
        found |= c.mainloop == Mainloop::wgmma_ws && c.ws.k_groups == 2 && ws_split(c) == split;
      CHECK(found);
    }
  }
  {  // M = 256: the fastest wgmma_ws variants of whole-space probes on the H100 (the cost model ranked
     // them 12th to 55th among the ws candidates) are in the first 24 candidates (a --max-candidates 24 tune), through
     // the shape-class order: every (tile, split) class's first config before any class's second.
    struct Want {
      quant::Format f;
      DType dt;
      int tile_m, stages, split_k;
    };
    for (const Want w :
         {Want{quant::Format::fp16, DType::f16, 128, 6, 1}, Want{quant::Format::fp16, DType::f16, 256, 4, 3},
          Want{quant::Format::int8, DType::bf16, 256, 4, 3}, Want{quant::Format::int4, DType::bf16, 256, 0, 3},
          Want{quant::Format::nf4, DType::bf16, 256, 4, 3}}) {
      const auto cs = valid_configs(qwen(w.f, w.dt, 256), arch);
      INFO("format " << int(w.f) << " tile_m " << w.tile_m << " split_k " << w.split_k);
      bool found = false;
      for (size_t i = 0; i < std::min<size_t>(24, cs.size()); ++i) {
        const Config& c = cs[i];
        found |= c.mainloop == Mainloop::wgmma_ws && c.tile_m == w.tile_m && c.tile_n == 128 && ws_consumers(c) == 2 &&
                 ws_split(c) == w.split_k && (w.stages == 0 || c.ws.stages == w.stages);
      }
      CHECK(found);
      // Within a class two consumer warpgroups come first: the first ws config of each shape class has them when the
      // class has any.
      std::vector<const Config*> firsts;
      for (const auto& c : cs) {
        if (c.mainloop != Mainloop::wgmma_ws) continue;
        bool seen = false;
        for (const Config* f : firsts)
          seen |= f->tile_m == c.tile_m && f->tile_n == c.tile_n && ws_split(*f) == ws_split(c) &&
                  f->ws.k_groups == c.ws.k_groups;
        if (seen) continue;
        firsts.push_back(&c);
        bool class_has_c2 = false;
        for (const auto& o : cs)
          class_has_c2 |= o.mainloop == Mainloop::wgmma_ws && o.tile_m == c.tile_m && o.tile_n == c.tile_n &&
                          ws_split(o) == ws_split(c) && o.ws.k_groups == c.ws.k_groups && ws_consumers(o) == 2;
        if (class_has_c2) CHECK(ws_consumers(c) == 2);
      }
    }
  }
  {  // M = 1024 (modes in turn and shape classes up to M = 1024): the whole-space probe's winner of
    // the packed formats (m192 n128 c2 sk1) and the stream-K winners of the tune (packed m256 n128 c2 s4, fp16 m96 n256
    // c2 s4) are all in the 24-candidate prefix.
    auto in_prefix = [&](quant::Format f, DType dt, int tile_m, int tile_n, int split_k, int stages) {
      const auto cs = valid_configs(qwen(f, dt, 1024), arch);
      for (size_t i = 0; i < std::min<size_t>(24, cs.size()); ++i)
        if (cs[i].mainloop == Mainloop::wgmma_ws && cs[i].tile_m == tile_m && cs[i].tile_n == tile_n &&
            ws_consumers(cs[i]) == 2 && ws_split(cs[i]) == split_k && (stages == 0 || cs[i].ws.stages == stages))
          return true;
      return false;
    };
    for (auto f :
         {quant::Format::int8, quant::Format::int4, quant::Format::nf4, quant::Format::mxfp4, quant::Format::nvfp4}) {
      INFO("format " << int(f));
      CHECK(in_prefix(f, DType::bf16, 192, 128, 1, 0));
      CHECK(in_prefix(f, DType::bf16, 256, 128, 0, 4));
    }
    CHECK(in_prefix(quant::Format::fp16, DType::f16, 96, 256, 0, 4));
  }
  {  // M > 1024: the 256 x 128 tile's split_k 1 and stream-K (4 slots) in the fast strategy's first round, right after
     // the default (stream-K passed split_k_tail at M = 4096 on the H200 once its tiles were finished by their owner).
    for (int m : {2048, 4096, 16384})
      for (auto f : {quant::Format::int4, quant::Format::nf4, quant::Format::int8, quant::Format::fp16}) {
        const DType dt = f == quant::Format::fp16 ? DType::f16 : DType::bf16;
        const auto cs = valid_configs(qwen(f, dt, m), arch);
        int sk1 = -1, skk = -1;
        for (int i = 0; i < int(cs.size()); ++i) {
          const Config& c = cs[i];
          if (c.mainloop != Mainloop::wgmma_ws || c.tile_m != 256 || c.tile_n != 128 || ws_consumers(c) != 2 ||
              c.ws.stages != 4 || c.ws.k_groups != 1)
            continue;
          if (ws_split(c) == 1 && sk1 < 0) sk1 = i;
          if (ws_split(c) == 0 && skk < 0) skk = i;
        }
        INFO("M " << m << " format " << int(f));
        CHECK(sk1 >= 0);
        CHECK(sk1 < 8);
        CHECK(skk >= 0);
        CHECK(skk < 8);
      }
  }
  {  // gemv order: every fourth gemv candidate runs the register ring, prefetch 1 first; the register-ring winners of
     // the M = 1 whole-space probe (nf4 / nvfp4 w7 x 1 prefetch 1) and the tuned int8 M = 16 winner
     // (m16 w4 x 1 tma) lie in the decode tune's 128-candidate prefix (bench/tune_h100.sh; each balanced tail
     // comes right after its twin, and at M = 16 the default's four TMA twins lead). The order below is
     // that of the whole-unit configs (the balanced ones taken out).
    auto pos = [&](const Problem& p, int tile_m, int warps_k, GemvLoad load, int prefetch) {
      const auto cs = valid_configs(p, arch);
      const Config want = mk_gemv(tile_m, 16, warps_k, 1, load, prefetch);
      for (size_t i = 0; i < cs.size(); ++i)
        if (same_config(cs[i], want)) return int(i);
      return -1;
    };
    for (DType dt : {DType::bf16, DType::f16})
      for (auto f : {quant::Format::nf4, quant::Format::mxfp4, quant::Format::nvfp4}) {
        const int i = pos(qwen(f, dt, 1), 8, 7, kRing, 1);
        CHECK(i >= 0);
        CHECK(i < 128);
      }
    const int i8 = pos(qwen(quant::Format::int8, DType::bf16, 16), 16, 4, kTma, 1);
    CHECK(i8 >= 0);
    CHECK(i8 < 128);
    // the int4 M = 16 winner, m16 w4 x 1 tma_x prefetch 1 balanced, in the prefix too
    for (auto f : {quant::Format::int4, quant::Format::int4_kb128})
      for (DType dt : {DType::bf16, DType::f16}) {
        const auto cs = valid_configs(qwen(f, dt, 16), arch);
        const Config want = mk_gemv(16, 16, 4, 1, kTmaX, 1, GemvReduce::balanced_tail);
        const auto it = std::find_if(cs.begin(), cs.end(), [&](const Config& c) { return same_config(c, want); });
        CHECK(it - cs.begin() < 128);
      }
    // The register ring's K warps within one 64-element step of 512 K elements each rank equal, more K warps first:
    // at K 3584 8 K warps (448 each; the H200's exhaustive best of int8 and int8_kb64 at M = 1, with the balanced
    // tail) come before 7 (512 each), and both register-ring winners are in the fast strategy's first 16.
    for (auto f : {quant::Format::int8, quant::Format::int8_kb64})
      for (DType dt : {DType::bf16, DType::f16}) {
        const auto cs = valid_configs(qwen(f, dt, 1), arch);
        auto at = [&](const Config& want) {
          return std::find_if(cs.begin(), cs.end(), [&](const Config& c) { return same_config(c, want); }) - cs.begin();
        };
        const auto w8 = at(mk_gemv(8, 16, 8, 1, kRing, 1)),
                   w8_bal = at(mk_gemv(8, 16, 8, 1, kRing, 1, GemvReduce::balanced_tail)),
                   w7 = at(mk_gemv(8, 16, 7, 1, kRing, 1));
        INFO("format " << int(f) << " dtype " << int(dt) << ": w8 " << w8 << " w8 bal " << w8_bal << " w7 " << w7);
        CHECK(w8 < w7);
        CHECK(w8_bal < 16);
        CHECK(w7 < long(cs.size()));
      }
    // (every fourth whole-unit gemv candidate on the register ring, prefetch 1 first: the order properties test below)
  }
  {  // int8 at M = 37: gemv (tile_m 64) is valid, and the two mainloops alternate in the order.
    const auto cs = valid_configs(qwen(quant::Format::int8, DType::bf16, 37), arch);
    REQUIRE(cs.size() >= 2);
    CHECK((cs[0].mainloop == Mainloop::gemv && cs[1].mainloop != Mainloop::gemv));
  }
  {  // The default is a candidate (the tuner measures it first) at every M, for every format and dtype, and on sm_90a
     // up to M = 2048 it is the exhaustive sweep's winner shape named in default_config.
    for (int m : {1, 5, 8, 9, 16, 17, 32, 33, 64, 65, 128, 129, 256, 512, 513, 1024, 2048, 2049, 4096})
      for (int f = 0; f < quant::kFormatCount; ++f)
        for (DType dt : {DType::bf16, DType::f16}) {
          const auto el = quant::format_element(quant::Format(f));
          if ((el == quant::Format::fp16 && dt != DType::f16) || (el == quant::Format::bf16 && dt != DType::bf16))
            continue;  // 16-bit weights in the activations' dtype only
          const Problem p = qwen(quant::Format(f), dt, m);
          const Config def = default_config(arch, p);
          INFO("m " << m << " format " << quant::format_name(quant::Format(f)));
          const auto cs = valid_configs(p, arch);
          CHECK(std::any_of(cs.begin(), cs.end(), [&](const Config& c) { return same_config(c, def); }));
        }
    const bool hopper_rules[] = {
        default_config(arch, qwen(quant::Format::bf16, DType::bf16, 1)).mainloop == Mainloop::wgmma_ws,
        default_config(arch, qwen(quant::Format::bf16, DType::bf16, 64)).mainloop == Mainloop::wgmma_pairs,
        default_config(arch, qwen(quant::Format::int4, DType::bf16, 16)).gemv.load == GemvLoad::tma_x,
        default_config(arch, qwen(quant::Format::int4, DType::bf16, 64)).mainloop == Mainloop::wgmma_ws,
        default_config(arch, qwen(quant::Format::fp16, DType::f16, 256)).mainloop == Mainloop::wgmma_pairs,
        default_config(arch, qwen(quant::Format::nf4, DType::bf16, 256)).ws.split_k == 3,
        default_config(arch, qwen(quant::Format::int8, DType::bf16, 1024)).ws.split == WsSplit::split_k_tail,
        default_config(arch, qwen(quant::Format::int8, DType::bf16, 2048)).ws.split == WsSplit::split_k_tail,
        default_config(arch, qwen(quant::Format::fp16, DType::f16, 4096)).ws.split == WsSplit::split_k_tail,
        default_config(arch, qwen(quant::Format::int4, DType::bf16, 16384)).ws.split == WsSplit::split_k};
    for (bool ok : hopper_rules) CHECK(ok);
  }
  {  // Up to M = 16: three gemv candidates to one tiled for 8- and 4-bit weights, one each for 16-bit weights.
    for (int m : {1, 16})
      for (auto f : {quant::Format::int8, quant::Format::int4_kb128, quant::Format::nvfp4, quant::Format::bf16}) {
        const auto cs = valid_configs(qwen(f, DType::bf16, m), arch);
        INFO("m " << m << " format " << quant::format_name(f));
        REQUIRE(cs.size() >= 16);
        const bool narrow = f != quant::Format::bf16;
        for (size_t i = 0; i < 16; ++i) CHECK((cs[i].mainloop == Mainloop::gemv) == (narrow ? i % 4 != 3 : i % 2 == 0));
      }
  }
  {  // wgmma: sm_90a only; beyond M = 64 the tiled list takes one wgmma_pairs, two wgmma_ws, one wgmma and one
     // mma.sync config in turn, and for packed weights (no wgmma_pairs list) three wgmma_ws; not offered on sm_90 (no
     // "a" features).
    const Problem p4 = qwen(quant::Format::int4, DType::bf16, 4096);
    const auto cs = valid_configs(p4, arch);
    REQUIRE(cs.size() >= 10);
    for (size_t i = 0; i < 10; ++i)
      CHECK(cs[i].mainloop == (i % 5 < 3 ? Mainloop::wgmma_ws : i % 5 == 3 ? Mainloop::wgmma : Mainloop::mma));
    const auto c16 = valid_configs(qwen(quant::Format::bf16, DType::bf16, 4096), arch);
    REQUIRE(c16.size() >= 10);
    for (size_t i = 0; i < 10; ++i)
      CHECK(c16[i].mainloop == (i % 5 == 0   ? Mainloop::wgmma_pairs
                                : i % 5 < 3  ? Mainloop::wgmma_ws
                                : i % 5 == 3 ? Mainloop::wgmma
                                             : Mainloop::mma));
    for (const auto& c : valid_configs(p4, parse_arch("sm_90")))
      CHECK((c.mainloop != Mainloop::wgmma && c.mainloop != Mainloop::wgmma_ws));
    const Config wg = mk_wgmma(128, 256, 64, 3, 1, 2);
    CHECK(invalid_reason(p4.dtype, p4.format, p4.head_dim, p4.rope, wg, arch) == nullptr);
    CHECK(std::string(invalid_reason(p4.dtype, p4.format, p4.head_dim, p4.rope, wg, parse_arch("sm_90")))
              .find("sm_90a") != std::string::npos);
    CHECK(variant_name(p4, wg, arch) == "qkv_proj__bf16_int4_d128_bias_rope__wgmma_m128_n256_k64_s3_sk1_p2__sm_90a");
    CHECK(name_expression(p4, wg) ==
          "kt::qkv::qkv_wgmma<kt::DType::bf16, kt::quant::Format::int4, 128, true, true, false, 128, 256, 64, 3, 2>");
    CHECK(kernel_source(p4, wg, arch).source.find("qkv_wgmma.cuh") != std::string::npos);
    CHECK(config_to_json(wg).at("mainloop") == "wgmma");
    CHECK(same_config(config_from_json(config_to_json(wg)), wg));
    // 3 stages of X [128][64] + 3 decoded weight buffers [256][64] (bf16) = 144 KB > the fp32 output tile (130 KB).
    CHECK(launch_dims(p4, wg, 132).smem_bytes == 1024u + (3 * 128 + 3 * 256) * 64 * 2);
    CHECK(launch_dims(p4, wg, 132).block_x == 256);
    CHECK(launch_dims(p4, wg, 132).grid_x == 18);
    CHECK(launch_dims(p4, wg, 132).grid_y == 32);
    auto bad = wg;
    bad.tile_m = 96;  // not whole warpgroups of 64 tokens
    CHECK(std::string(invalid_reason(p4.dtype, p4.format, p4.head_dim, p4.rope, bad, arch)).find("warpgroup") !=
          std::string::npos);
    bad = wg;
    bad.tile_n = 192;
    CHECK(invalid_reason(p4.dtype, p4.format, p4.head_dim, p4.rope, bad, arch) != nullptr);
    // 16-bit weights: cp.async into stages + 1 slots, no register ring.
    const Problem pf = qwen(quant::Format::fp16, DType::f16, 4096);
    CHECK(invalid_reason(pf.dtype, pf.format, pf.head_dim, pf.rope, wg, arch) != nullptr);  // prefetch 2
    auto wf = wg;
    wf.wgmma.prefetch = 1;
    CHECK(invalid_reason(pf.dtype, pf.format, pf.head_dim, pf.rope, wf, arch) == nullptr);
    CHECK(wgmma_w_buffers(wf, pf.format) == 4);
  }
  {  // wgmma_ws: fields, names, JSON, shared memory, threads, rules.
    const Problem p4 = qwen(quant::Format::int4, DType::bf16, 4096);
    const Config ws = mk_ws(256, 128, 2, 1, 4, 1);
    CHECK(invalid_reason(p4.dtype, p4.format, p4.head_dim, p4.rope, ws, arch) == nullptr);
    CHECK(std::string(invalid_reason(p4.dtype, p4.format, p4.head_dim, p4.rope, ws, parse_arch("sm_90")))
              .find("sm_90a") != std::string::npos);
    CHECK(ws_consumers(ws) == 2);
    CHECK(ws_atoms(ws) == 1);
    CHECK(variant_name(p4, ws, arch) == "qkv_proj__bf16_int4_d128_bias_rope__wgmma_ws_m256_n128_c2_kg1_s4_sk1__sm_90a");
    CHECK(
        name_expression(p4, ws) ==
        "kt::qkv::qkv_wgmma_ws<kt::DType::bf16, kt::quant::Format::int4, 128, true, true, false, 256, 128, 2, 4, false>");
    CHECK(kernel_source(p4, ws, arch).source.find("qkv_wgmma_ws.cuh") != std::string::npos);
    CHECK(config_to_json(ws).at("mainloop") == "wgmma_ws");
    CHECK(same_config(config_from_json(config_to_json(ws)), ws));
    // 4 slots of X [256][64] bf16 + packed int4 rows [128][32 bytes] = 144 KB > the fp32 output tile (132 KB).
    CHECK(launch_dims(p4, ws, 132).smem_bytes == 1024u + 4 * (256 * 128 + 128 * 32));
    CHECK(launch_dims(p4, ws, 132).block_x == 384);
    CHECK(launch_dims(p4, ws, 132).grid_x == 36 * 16);  // 1-D: tiles x split_k
    CHECK(launch_dims(p4, ws, 132).grid_y == 1);
    CHECK(workspace_bytes(p4, ws, 132) == 0);
    auto split = ws;
    split.ws.split_k = 2;  // a cluster of 2 blocks per tile: partials through the ranks' shared memory, no workspace
    CHECK(workspace_bytes(p4, split, 132) == 0);
    CHECK(counter_bytes(p4, split) == 0);
    CHECK(!uses_workspace(split));
    CHECK(variant_name(p4, split, arch) ==
          "qkv_proj__bf16_int4_d128_bias_rope__wgmma_ws_m256_n128_c2_kg1_s4_sk2__sm_90a");
    CHECK(
        name_expression(p4, split) ==
        "kt::qkv::qkv_wgmma_ws_cluster<kt::DType::bf16, kt::quant::Format::int4, 128, true, true, false, 256, 128, 2, 4, 2>");
    CHECK(launch_dims(p4, split, 132).grid_x == 36 * 16 * 2);
    // Each rank finishes 128 of the 256 token rows. Its shared memory: the ring or its fp32 output tile over it,
    // whichever is larger, then one partial slot of its rows beside them (stored into while its mainloop runs).
    CHECK(ws_cluster_rows(split) == 128);
    CHECK(ws_cluster_slots_beside(split, p4.format));
    CHECK(ws_cluster_slot_offset(split, p4.format) == 4 * (256 * 128 + 128 * 32));
    CHECK(ws_cluster_tile_offset(split, p4.format) == 0);  // the output tile over the ring
    CHECK(launch_dims(p4, split, 132).smem_bytes ==
          1024u + std::max(4 * (256 * 128 + 128 * 32), 128 * 132 * 4) + 128 * 128 * 4);
    // Token groups dealt out in contiguous ranges: 32 groups over 3 ranks -> 10, 11, 11; 1 group over 2 ranks -> rank 1.
    CHECK(ws_group_owner(0, 32, 3) == 0);
    CHECK(ws_group_owner(9, 32, 3) == 0);
    CHECK(ws_group_owner(10, 32, 3) == 1);
    CHECK(ws_group_owner(20, 32, 3) == 1);
    CHECK(ws_group_owner(21, 32, 3) == 2);
    CHECK(ws_group_owner(31, 32, 3) == 2);
    CHECK(ws_group_owner(0, 1, 2) == 1);
    // bf16 weights, split_k 3: a ring of 4 x 48 KB leaves no room for two slots of 88 rows beside it, so the slots lie
    // over the ring (a cluster barrier after the mainloops) and the output tile after them.
    const Problem pb16 = qwen(quant::Format::bf16, DType::bf16, 256);
    auto split3 = ws;
    split3.ws.split_k = 3;
    CHECK(invalid_reason(pb16.dtype, pb16.format, pb16.head_dim, pb16.rope, split3, arch) == nullptr);
    CHECK(ws_cluster_rows(split3) == 88);
    CHECK(!ws_cluster_slots_beside(split3, pb16.format));
    CHECK(ws_cluster_slot_offset(split3, pb16.format) == 0);
    CHECK(ws_cluster_tile_offset(split3, pb16.format) == 2 * 88 * 128 * 4);
    CHECK(launch_dims(pb16, split3, 132).smem_bytes == 1024u + 4 * (256 * 128 + 128 * 128));
    CHECK(launch_dims(pb16, split3, 132).grid_x == 36 * 3);
    auto split16 = ws;
    split16.ws.split_k = 16;  // beyond the portable cluster size
    CHECK(std::string(invalid_reason(p4.dtype, p4.format, p4.head_dim, p4.rope, split16, arch)).find("cluster") !=
          std::string::npos);
    // stream-K: its own name and template flag, one block per SM, two partial slots per block, the
    // output tile next to the ring in shared memory.
    const Problem p16 = qwen(quant::Format::int4, DType::bf16, 16);
    const Config sk = mk_ws(16, 128, 2, 1, 8, 0);
    CHECK(invalid_reason(p16.dtype, p16.format, p16.head_dim, p16.rope, sk, arch) == nullptr);
    CHECK(variant_name(p16, sk, arch) ==
          "qkv_proj__bf16_int4_d128_bias_rope__wgmma_ws_m16_n128_c2_kg1_s8_streamk__sm_90a");
    CHECK(
        name_expression(p16, sk) ==
        "kt::qkv::qkv_wgmma_ws<kt::DType::bf16, kt::quant::Format::int4, 128, true, true, false, 16, 128, 2, 8, true>");
    CHECK(same_config(config_from_json(config_to_json(sk)), sk));
    CHECK(ws_units(p16, sk) == 36 * 56);
    CHECK(launch_dims(p16, sk, 132).grid_x == 132);
    CHECK(launch_dims(p16, sk, 114).grid_x == 114);
    CHECK(launch_dims(p16, sk, 132).smem_bytes == 1024u + 8 * (16 * 128 + 128 * 32) + 16 * 132 * 4);
    // Stream-K's output tile sits beside the ring, as many token rows as fit (tile_m, 128, 64, else 32): 4 bf16 slots
    // of 48 KB leave room for 32 rows of 256; 4 int4 slots of 36 KB for 128; with 128-token tiles, the whole tile.
    const Config sk256 = mk_ws(256, 128, 2, 1, 4, 0);
    const Problem pb = qwen(quant::Format::bf16, DType::bf16, 4096);
    CHECK(ws_epilogue_rows(sk256, pb.format) == 32);
    CHECK(ws_smem_bytes(sk256, pb.format) == 1024 + 4 * (256 * 128 + 128 * 128) + 32 * 132 * 4);
    CHECK(invalid_reason(pb.dtype, pb.format, pb.head_dim, pb.rope, sk256, arch) == nullptr);
    CHECK(ws_epilogue_rows(sk256, quant::Format::int4) == 128);
    CHECK(ws_smem_bytes(sk256, quant::Format::int4) == 1024 + 4 * (256 * 128 + 128 * 32) + 128 * 132 * 4);
    CHECK(ws_epilogue_rows(mk_ws(128, 128, 2, 1, 4, 0), quant::Format::int4) == 128);
    CHECK(ws_epilogue_rows(mk_ws(256, 128, 2, 1, 3, 0), quant::Format::nf4) == 128);
    CHECK(ws_epilogue_rows(mk_ws(256, 128, 2, 1, 4, 0), quant::Format::nf4) == 64);
    // Two K groups: 4 consumer warpgroups + the producer (640 threads), named and instantiated with the group count;
    // their partial sums meet over the ring, so the ring must hold them; not with stream-K.
    const Config kg = mk_ws(16, 128, 2, 2, 8, 3);
    CHECK(invalid_reason(p16.dtype, p16.format, p16.head_dim, p16.rope, kg, arch) == nullptr);
    CHECK(ws_kgroups(kg) == 2);
    CHECK(launch_dims(p16, kg, 132).block_x == 640);
    CHECK(launch_dims(p16, kg, 132).grid_x == 36 * 3);
    CHECK(variant_name(p16, kg, arch) == "qkv_proj__bf16_int4_d128_bias_rope__wgmma_ws_m16_n128_c2_kg2_s8_sk3__sm_90a");
    CHECK(
        name_expression(p16, kg) ==
        "kt::qkv::qkv_wgmma_ws_cluster<kt::DType::bf16, kt::quant::Format::int4, 128, true, true, false, 16, 128, 2, 8, 3, 2>");
    CHECK(same_config(config_from_json(config_to_json(kg)), kg));
    CHECK(ws_kgroup_xfer_bytes(kg) == 256 * 8 * 4);  // 256 threads x 8 fp32 accumulators
    auto kg1 = kg;
    kg1.ws.split_k = 1;
    CHECK(
        name_expression(p16, kg1) ==
        "kt::qkv::qkv_wgmma_ws<kt::DType::bf16, kt::quant::Format::int4, 128, true, true, false, 16, 128, 2, 8, false, 2>");
    auto kgs = kg;
    kgs.ws.split = WsSplit::stream_k, kgs.ws.split_k = 1;
    CHECK(std::string(invalid_reason(p16.dtype, p16.format, p16.head_dim, p16.rope, kgs, arch)).find("K groups") !=
          std::string::npos);
    CHECK(ws_consumer_reg_budget(kg) == kWsConsumerRegs4);
    CHECK(ws_consumer_reg_budget(kg1) == kWsConsumerRegs4);
    auto kg3 = kg;
    kg3.ws.k_groups = 3;
    CHECK(invalid_reason(p16.dtype, p16.format, p16.head_dim, p16.rope, kg3, arch) != nullptr);
    // split_k 2, tile_m 64: 2 slots of X [64][64] + int4 rows [128][32 bytes] = 24 KB (more than the rank's 32-row
    // output tile) cannot hold the 256 threads x 32 fp32 partials (32 KB)
    const Config kgsmall = mk_ws(64, 128, 2, 2, 2, 2);
    CHECK(std::string(invalid_reason(p16.dtype, p16.format, p16.head_dim, p16.rope, kgsmall, arch))
              .find("over the ring") != std::string::npos);
    CHECK(workspace_bytes(p16, sk, 132) == size_t(2) * 132 * 16 * 128 * 4);
    CHECK(counter_bytes(p16, sk) == 36 * 4);
    CHECK_THROWS_WITH(launch_dims(p16, sk, 0), Catch::Contains("SM count"));
    Problem tiny = p16;
    tiny.k = 64;  // 36 units < 132 SMs: one block per unit
    CHECK(launch_dims(tiny, sk, 132).grid_x == 36);
    auto mma_sk0 = mk_mma(16, 128, 64, 1, 4, 2, 0, 1);
    CHECK(invalid_reason(p16.dtype, p16.format, p16.head_dim, p16.rope, mma_sk0, arch) != nullptr);  // split_k >= 1
    auto sk_split = sk;  // stream-K blocks are one per SM: no split_k besides
    sk_split.ws.split_k = 2;
    CHECK(std::string(invalid_reason(p16.dtype, p16.format, p16.head_dim, p16.rope, sk_split, arch)).find("stream-K") !=
          std::string::npos);
    auto cons3 = ws;
    cons3.ws.consumers = 3;
    CHECK(std::string(invalid_reason(p4.dtype, p4.format, p4.head_dim, p4.rope, cons3, arch)).find("consumers") !=
          std::string::npos);
    auto bad = ws;
    bad.tile_n = 192;  // 96 features per consumer warpgroup is not a whole number of m64 atoms
    CHECK(std::string(invalid_reason(p4.dtype, p4.format, p4.head_dim, p4.rope, bad, arch)).find("atoms") !=
          std::string::npos);
    bad = ws;
    bad.tile_n = 512;  // two atoms per warpgroup x 256 tokens: 256 accumulators
    CHECK(invalid_reason(p4.dtype, p4.format, p4.head_dim, p4.rope, bad, arch) != nullptr);
    bad = ws;
    bad.tile_m = 24;
    CHECK(std::string(invalid_reason(p4.dtype, p4.format, p4.head_dim, p4.rope, bad, arch)).find("tile_m") !=
          std::string::npos);
    bad = ws;
    bad.ws.stages = 9;
    CHECK(invalid_reason(p4.dtype, p4.format, p4.head_dim, p4.rope, bad, arch) != nullptr);
    // wgmma_ws split modes taken in turn: the first ws candidates of a 16-bit M = 64 problem hold both stream-K and
    // split_k 1 (split_k 1 wins there on the H100; the cost model alone put every stream-K config first).
    {
      std::vector<int> first_modes;
      for (const auto& c : valid_configs(qwen(quant::Format::fp16, DType::f16, 64), arch))
        if (c.mainloop == Mainloop::wgmma_ws && first_modes.size() < 4) first_modes.push_back(ws_split(c));
      REQUIRE(first_modes.size() == 4);
      CHECK(std::count(first_modes.begin(), first_modes.end(), 0) >= 1);
      CHECK(std::count(first_modes.begin(), first_modes.end(), 1) >= 1);
      CHECK(first_modes[0] != first_modes[1]);
    }
    // decode sizes: tile_m 8 with split-K is offered for M = 1
    bool small_split = false;
    for (const auto& c : valid_configs(qwen(quant::Format::int4, DType::bf16, 1), arch))
      small_split |= c.mainloop == Mainloop::wgmma_ws && c.tile_m == 8 && ws_split(c) > 1;
    CHECK(small_split);
  }
  const Config c = mk_mma(16, 128, 64, 1, 4, 2, 8, 1);
  const Problem p = qwen();
  CHECK(variant_name(p, c, arch) == "qkv_proj__bf16_nf4_d128_bias_rope__mma_m16_n128_k64_w1x4_s2_sk8_p1__sm_90a");
  CHECK(name_expression(p, c) ==
        "kt::qkv::qkv_proj<kt::DType::bf16, kt::quant::Format::nf4, 128, true, true, false, 16, 128, 64, 1, 4, 2, 1>");
  CHECK(p.key() == "qkv_proj/bf16/nf4/m16/k3584/h28/kv4/d128/bias/rope");
  CHECK(p.n() == 4608);
  CHECK(workspace_bytes(p, c, 132) == size_t(36) * 1 * 8 * 16 * 128 * 4);
  CHECK(counter_bytes(p, c) == 36 * 4);
  CHECK(workspace_bytes(p, mk_mma(16, 128, 64, 1, 4, 2, 1, 1), 132) == 0);
  CHECK(problem_from_json(problem_to_json(p)).key() == p.key());
  CHECK(same_config(config_from_json(config_to_json(c)), c));
  // The weight bytes the roofline counts: 4-bit data + fp32 absmax per 64.
  CHECK(p.min_bytes() ==
        Approx(4608.0 * 3584 / 2 + 4608.0 * 3584 / 64 * 4 + 2.0 * 16 * 3584 + 2.0 * 16 * 4608 + 2 * 4608));
  // gemv configs: their own name and template, a JSON round trip that keeps the mainloop.
  const Config gv = mk_gemv(8, 32, 4, 1, kRing, 1);  // 4 K warps x 1, two m16 tiles per warp
  CHECK(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, gv, arch) == nullptr);
  CHECK(variant_name(p, gv, arch) ==
        "qkv_proj__bf16_nf4_d128_bias_rope__gemv_m8_n32_wk4_wn1_register_ring_p1_nored__sm_90a");
  CHECK(name_expression(p, gv) ==
        "kt::qkv::qkv_gemv<kt::DType::bf16, kt::quant::Format::nf4, 128, true, true, false, 8, 32, 4, 1, 1, 0>");
  CHECK(config_to_json(gv).at("mainloop") == "gemv");
  CHECK(same_config(config_from_json(config_to_json(gv)), gv));
  CHECK_FALSE(same_config(gv, mk_mma(8, 32, 128, 4, 1, 0, 1, 1)));
  CHECK(kernel_source(p, gv, arch).source.find("qkv_gemv.cuh") != std::string::npos);
  CHECK(workspace_bytes(p, gv, 132) == 0);       // no split-K workspace
  CHECK(launch_dims(p, gv, 132).grid_x == 144);  // 288 m16 tiles, 2 per block
  CHECK(launch_dims(p, gv, 132).grid_y == 2);    // M = 16: two 8-token tiles
  CHECK(launch_dims(p, gv, 132).block_x == 4 * 32);
  CHECK(launch_dims(p, gv, 132).smem_bytes == 3 * 2 * 32 * 16);  // K slices 1..3: a float4 per lane per m16 tile
  // stages 1: the block's 32 rows of nf4 (1792 data + 224 scale bytes each for K = 3584) join the partials.
  auto gv1 = gv;
  gv1.gemv.load = kBulk;
  CHECK(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, gv1, arch) == nullptr);
  CHECK(launch_dims(p, gv1, 132).smem_bytes == 3 * 2 * 32 * 16 + 32 * (1792 + 224));
  // The ceiling: 227 KB per block less 1 KB and the decode table's 8 KB of static shared memory.
  CHECK(kernel_source(p, gv1, arch).dynamic_smem_bytes == 227u * 1024u - 1024u - 256u * kGemvTableCopies * 4u);
  CHECK(std::string(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, gv1, parse_arch("sm_80"))).find("sm_90") !=
        std::string::npos);
  {  // stages 2 (per-step TMA): its own template (WsParams with the weight's 5-D map), whole warp steps per row (K = 1088
    // 128 bytes of TMA alignment slack, a per-warp ring and one mbarrier per (step, warp column); sm_90 only; no
    // cluster; never prefetch 4 in the space.
    auto gv2 = gv;
    gv2.gemv.load = kTma;
    CHECK(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, gv2, arch) == nullptr);
    CHECK(variant_name(p, gv2, arch) == "qkv_proj__bf16_nf4_d128_bias_rope__gemv_m8_n32_wk4_wn1_tma_p1_nored__sm_90a");
    CHECK(name_expression(p, gv2) ==
          "kt::qkv::qkv_gemv_tma<kt::DType::bf16, kt::quant::Format::nf4, 128, true, true, false, 8, 32, 4, 1, 1>");
    // Data: a ring per warp of prefetch + 2 slots x its 2 m16 tiles x 1 KB, not the rows' 1792 bytes; scales whole.
    CHECK(gemv_ring_slots(gv2) == 3);
    CHECK(gemv_ring_bytes(gv2) == 4 * 3 * 2 * 1024);
    CHECK(launch_dims(p, gv2, 132).smem_bytes == 3 * 2 * 32 * 16 + 32 * 224 + 128 + 4 * 3 * 2 * 1024 + 8 * 28);
    // K = 1088 (8.5 steps of 128: the last box half out of bounds) needs 9 mbarriers per warp column; the ring is the same.
    CHECK(gemv_smem_bytes(gv2, p.format, 1088) == 3 * 2 * 32 * 16 + 32 * 68 + 128 + 4 * 3 * 2 * 1024 + 8 * 9);
    CHECK(gemv_seg_bytes(p.format, 1088, 1) == 544);
    {  // 16-bit weights: stages 1 holds 32 rows x 7 KB; the stages-2 ring does not grow with K.
      const auto f16 = quant::Format::fp16;
      const auto h1 = gv1, h2 = gv2;  // (the warp step is the format's, not a config field)
      CHECK(gemv_smem_bytes(h1, f16, 3584) - gemv_smem_bytes(h1, f16, 1792) == 32 * 3584);
      CHECK(gemv_smem_bytes(h2, f16, 3584) - gemv_smem_bytes(h2, f16, 1792) == 8 * (112 - 56));
    }
    CHECK(kernel_source(p, gv2, arch).dynamic_smem_bytes == kernel_source(p, gv1, arch).dynamic_smem_bytes);
    CHECK(!uses_workspace(gv2));
    CHECK(std::string(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, gv2, parse_arch("sm_80"))).find("sm_90") !=
          std::string::npos);
    auto cl2 = gv2;
    cl2.gemv.reduce = GemvReduce::cluster, cl2.gemv.cluster = 2;
    CHECK(std::string(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, cl2, arch)).find("bulk_rows") !=
          std::string::npos);
    auto s4 = gv2;
    s4.gemv.load = GemvLoad(4);
    CHECK(std::string(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, s4, arch)).find("load must be") !=
          std::string::npos);
    // tma_x (X by TMA too): tile_m 16 / 32 and packed weights only, its own kernel (WsParams with X's 3-D map), the
    // X rings (prefetch + 1 boxes of tile_m x 128 elements x 2 bytes per warp, 1 KB of alignment slack) beside
    // tma's, K a multiple of 64.
    auto s3 = gv2;
    s3.gemv.load = kTmaX;
    CHECK(std::string(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, s3, arch)).find("tile_m 16 or 32") !=
          std::string::npos);
    s3.tile_m = 16;
    s3.tile_n = 16;  // (two m16 tiles per warp at tile_m 16 exceed the register budget)
    auto s3_2 = s3;
    s3_2.gemv.load = kTma;
    CHECK(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, s3, arch) == nullptr);
    CHECK(variant_name(p, s3, arch) ==
          "qkv_proj__bf16_nf4_d128_bias_rope__gemv_m16_n16_wk4_wn1_tma_x_p1_nored__sm_90a");
    CHECK(name_expression(p, s3) ==
          "kt::qkv::qkv_gemv_tma_x<kt::DType::bf16, kt::quant::Format::nf4, 128, true, true, false, 16, 16, 4, 1, 1>");
    CHECK(gemv_smem_bytes(s3, p.format, p.k) - gemv_smem_bytes(s3_2, p.format, p.k) ==
          1024 - 128 + 4 * 2 * 16 * 128 * 2);
    CHECK(std::string(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, s3, parse_arch("sm_80"))).find("sm_90") !=
          std::string::npos);
    const auto s3w = s3;  // 16-bit weights
    CHECK(std::string(invalid_reason(DType::bf16, quant::Format::bf16, p.head_dim, p.rope, s3w, arch)).find("tma_x") !=
          std::string::npos);
    CHECK(same_config(config_from_json(config_to_json(s3)), s3));
    CHECK(same_config(config_from_json(config_to_json(gv2)), gv2));
    int n2 = 0;
    for (const auto& c : gemv_config_space(p.format))
      if (c.gemv.load == kTma) {
        ++n2;
        CHECK(c.gemv.prefetch != 4);
        CHECK((c.gemv.reduce == GemvReduce::none ||
               (gemv_balanced(c) && c.tile_m <= 16)));  // (the balanced tail: tile_m 8, 16)
      }
    CHECK(n2 == 4 * 2 * 11 * 2 + 2 * 2 * 11 * 2);
    int n2_16 = 0, p4_16 = 0;  // 16-bit weights also get window 5 (prefetch 4)
    for (const auto& c : gemv_config_space(quant::Format::bf16))
      if (c.gemv.load == kTma) {
        ++n2_16;
        p4_16 += c.gemv.prefetch == 4;
      }
    CHECK(n2_16 == 4 * 2 * 11 * 3 + 2 * 2 * 11 * 3);  // (+ the balanced tails of tile_m 8 and 16)
    CHECK(p4_16 == 4 * 2 * 11 + 2 * 2 * 11);
  }
  {  // fp16 weights with K = 16384: 32 rows x 32 KB do not fit, so bulk_rows is not offered.
    Problem big = qwen(quant::Format::fp16, DType::f16, 1);
    big.k = 16384;
    for (const auto& c : valid_configs(big, arch))
      if (c.mainloop == Mainloop::gemv && !gemv_ring(c)) CHECK(gemv_smem_bytes(c, big.format, big.k) <= 226 * 1024);
  }
  auto bad_json = config_to_json(gv);
  bad_json["mainloop"] = "tma";
  CHECK_THROWS_WITH(config_from_json(bad_json), Catch::Contains("'mainloop': unknown value 'tma'"));
  bad_json = config_to_json(gv);
  bad_json["gemv"]["load"] = "stages2";
  CHECK_THROWS_WITH(config_from_json(bad_json), Catch::Contains("'gemv.load': unknown value 'stages2'") &&
                                                    Catch::Contains("register_ring, bulk_rows, tma, tma_x"));
  bad_json = config_to_json(gv);
  bad_json.erase("gemv");
  CHECK_THROWS_WITH(config_from_json(bad_json), Catch::Contains("object 'gemv'"));
  auto gv_bad = gv;
  gv_bad.tile_n = 48;  // not warps_n x 16 or x 32
  CHECK(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, gv_bad, arch) != nullptr);
  gv_bad = gv;
  gv_bad.gemv.reduce = GemvReduce::cluster, gv_bad.gemv.cluster = 2;  // a cluster needs bulk_rows
  CHECK(std::string(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, gv_bad, arch)).find("bulk_rows") !=
        std::string::npos);
  gv_bad.gemv.load = kBulk;
  gv_bad.gemv.cluster = 3;
  CHECK(std::string(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, gv_bad, arch)).find("cluster 2, 4 or 8") !=
        std::string::npos);
  gv_bad = gv;
  gv_bad.gemv.cluster = 2;  // a cluster size without the cluster reduction
  CHECK(std::string(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, gv_bad, arch)).find("cluster must be 1") !=
        std::string::npos);
  {  // K split over a cluster of 4 blocks (reduce cluster, cluster 4, bulk_rows): its own template and name, 4 x the blocks, no
     // workspace; each block holds ceil(28 / 4) = 7 warp steps (448 bytes) of its 32 rows, the rows' whole scales,
     // and the cluster's partial sums (3 ranks) beside the block's 3 K slices'.
    auto cl = gv1;
    cl.gemv.reduce = GemvReduce::cluster, cl.gemv.cluster = 4;
    CHECK(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, cl, arch) == nullptr);
    CHECK(variant_name(p, cl, arch) ==
          "qkv_proj__bf16_nf4_d128_bias_rope__gemv_m8_n32_wk4_wn1_bulk_rows_p1_cl4__sm_90a");
    CHECK(
        name_expression(p, cl) ==
        "kt::qkv::qkv_gemv_cluster<kt::DType::bf16, kt::quant::Format::nf4, 128, true, true, false, 8, 32, 4, 1, 1, 4>");
    CHECK(!uses_workspace(cl));
    CHECK(workspace_bytes(p, cl, 132) == 0);
    CHECK(launch_dims(p, cl, 132).grid_x == 144 * 4);
    CHECK(gemv_seg_bytes(p.format, p.k, 4) == 448);
    CHECK(gemv_seg_bytes(p.format, 3456, 4) == 448);  // 27 steps: ranks hold 6, 7, 7, 7
    CHECK(gemv_seg_bytes(p.format, p.k, 1) == 1792);
    CHECK(launch_dims(p, cl, 132).smem_bytes == (3 + 3) * 2 * 32 * 16 + 32 * (448 + 224));
    CHECK(std::string(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, cl, parse_arch("sm_80"))).find("sm_90") !=
          std::string::npos);
    CHECK(same_config(config_from_json(config_to_json(cl)), cl));
  }
  gv_bad = gv;
  gv_bad.gemv.warps_k = 16;
  gv_bad.tile_n = 16;
  gv_bad.gemv.prefetch = 2;
  gv_bad.tile_m = 16;  // 512 threads: 40 + 8 + 2 x (14 + 32) + 8 = 148 registers > 112
  CHECK(std::string(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, gv_bad, arch)).find("registers") !=
        std::string::npos);
  // wgmma tile_k 128 on large tiles: rejected by the register estimate (these compiled to 48-416 spilled bytes), while
  // 128 x 128 tile_k 128 stays valid.
  for (auto [f, d] : {std::pair{quant::Format::fp16, DType::f16}, {quant::Format::int4, DType::bf16}}) {
    const Config w256 = mk_wgmma(256, 128, 128, 2, 1, 1), w64 = mk_wgmma(64, 256, 128, 2, 1, 1),
                 w128 = mk_wgmma(128, 128, 128, 2, 1, 1);
    CHECK(std::string(invalid_reason(d, f, 128, true, w256, arch)).find("register") != std::string::npos);
    if (f == quant::Format::fp16)
      CHECK(std::string(invalid_reason(d, f, 128, true, w64, arch)).find("register") != std::string::npos);
    CHECK(invalid_reason(d, f, 128, true, w128, arch) == nullptr);
  }
  // RoPE with a tile narrower than a head is invalid, and says so.
  CHECK(std::string(invalid_reason(DType::bf16, quant::Format::nf4, 128, true, mk_mma(16, 64, 64, 1, 4, 2, 1, 1), arch))
            .find("RoPE") != std::string::npos);
}

TEST_CASE("qkv_proj gemv balanced tail: the cut, grid, workspace, names, order", "[generator][qkv]") {
  // gemv_balance: whole units in multiples of the SM count, the rest split along K into about one piece per SM.
  for (long long units : {1LL, 5LL, 131LL, 132LL, 133LL, 288LL, 576LL, 1000LL})
    for (int steps : {1, 3, 28, 56})
      for (int sms : {1, 7, 132}) {
        const GemvBalance b = gemv_balance(units, steps, sms);
        INFO("units " << units << " steps " << steps << " sms " << sms);
        CHECK(b.full % sms == 0);
        CHECK(b.full + b.tail == units);
        CHECK(b.tail < sms);
        CHECK(b.split >= 1);
        CHECK(b.split <= steps);  // every piece has a K step
        CHECK(b.blocks() == b.full + (long long)b.tail * b.split);
        if (b.tail > 0) CHECK((long long)b.tail * b.split <= sms);                          // at most one piece per SM
        if (b.tail > 0 && b.split < steps) CHECK((long long)b.tail * (b.split + 1) > sms);  // as many as fit
      }
  const GemvBalance q = gemv_balance(288, 28, 132);  // Qwen2.5-7B, m16 row blocks, M = 1, H100
  CHECK(q.full == 264);
  CHECK(q.tail == 24);
  CHECK(q.split == 5);
  CHECK(q.blocks() == 384);
  CHECK(gemv_balance(288, 28, 0).split == 1);  // no SM count: nothing split (launch_dims throws instead)

  const ArchId arch = parse_arch("sm_90a");
  const Problem p = qwen(quant::Format::int4, DType::bf16, 1);
  const Config base = mk_gemv(8, 16, 4, 1, kTma, 1);
  Config bal = base;
  bal.gemv.reduce = GemvReduce::balanced_tail;
  CHECK(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, bal, arch) == nullptr);
  CHECK(variant_name(p, bal, arch) == "qkv_proj__bf16_int4_d128_bias_rope__gemv_m8_n16_wk4_wn1_tma_p1_bal__sm_90a");
  CHECK(
      name_expression(p, bal) ==
      "kt::qkv::qkv_gemv_tma<kt::DType::bf16, kt::quant::Format::int4, 128, true, true, false, 8, 16, 4, 1, 1, true>");
  Config bal0 = bal;
  bal0.gemv.load = kRing;
  CHECK(name_expression(p, bal0) ==
        "kt::qkv::qkv_gemv<kt::DType::bf16, kt::quant::Format::int4, 128, true, true, false, 8, 16, 4, 1, 1, 0, true>");
  CHECK(same_config(config_from_json(config_to_json(bal)), bal));
  CHECK(uses_workspace(bal));
  CHECK(!uses_workspace(base));
  const auto d = launch_dims(p, bal, 132);
  CHECK(d.grid_x == 384);
  CHECK(d.grid_y == 1);
  CHECK(d.smem_bytes == launch_dims(p, base, 132).smem_bytes);
  CHECK(launch_dims(p, base, 132).grid_x == 288);
  CHECK_THROWS_WITH(launch_dims(p, bal, 0), Catch::Contains("SM count"));
  CHECK(workspace_bytes(p, bal, 132) == size_t(24) * 5 * 16 * 8 * 4);  // [tail unit][piece][16 features x 8 tokens]
  CHECK(counter_bytes(p, bal) == size_t(288) * 1 * 4);                 // one per (unit, warp column)
  {  // two token tiles (M = 16, tile_m 8): units are (row block, token tile) pairs
    Problem p16 = qwen(quant::Format::int4, DType::bf16, 16);
    CHECK(launch_dims(p16, bal, 132).grid_x == unsigned(gemv_balance(576, 28, 132).blocks()));
    CHECK(counter_bytes(p16, bal) == size_t(576) * 4);
  }
  int dummy[4];
  QkvParams a = host_params(p, dummy);
  CHECK_THROWS_WITH(check_params(p, bal, a), Catch::Contains("balanced_tail"));  // no workspace
  {  // tma_x reads X through a {64, K / 64, M} map: K a multiple of 64
    Problem p16 = qwen(quant::Format::int4, DType::bf16, 16);
    const Config x3 = mk_gemv(16, 16, 4, 1, kTmaX, 1);
    QkvParams a16 = a;
    a16.m = 16;
    CHECK_NOTHROW(check_params(p16, x3, a16));
    p16.k = a16.k_dim = 3584 + 32;
    p16.format = quant::Format::nvfp4;  // (groups of 16 along K)
    CHECK_THROWS_WITH(check_params(p16, x3, a16), Catch::Contains("multiple of 64"));
    for (const auto& c : valid_configs(p16, arch)) CHECK(!(c.mainloop == Mainloop::gemv && c.gemv.load == kTmaX));
  }
  // In the candidate order each balanced config comes right after its whole-unit twin, for every load but bulk_rows at M <= 16
  // only; none at M = 64.
  for (int m : {1, 16}) {
    const auto cs = valid_configs(qwen(quant::Format::int4, DType::bf16, m), arch);
    std::vector<Config> g;
    for (const auto& c : cs)
      if (c.mainloop == Mainloop::gemv) g.push_back(c);
    int n_bal = 0;
    for (size_t i = 0; i < g.size(); ++i)
      if (gemv_balanced(g[i])) {
        ++n_bal;
        CHECK(g[i].gemv.load != kBulk);
        CHECK(g[i].tile_m <= 16);
        REQUIRE(i > 0);
        Config twin = g[i];
        twin.gemv.reduce = GemvReduce::none;
        CHECK(same_config(g[i - 1], twin));
      }
    CHECK(n_bal > 10);
    // each tma_x config right before its tma twins (tma_x, tma_x bal, tma, tma bal)
    int n3 = 0;
    for (size_t i = 0; i < g.size(); ++i)
      if (g[i].gemv.load == kTmaX && !gemv_balanced(g[i])) {
        ++n3;
        CHECK(m == 16);
        Config t = g[i];
        t.gemv.load = kTma;
        REQUIRE(i + 2 < g.size());
        CHECK((same_config(g[i + 1], t) || same_config(g[i + 2], t)));
      }
    CHECK((m == 1 ? n3 == 0 : n3 > 4));
  }
  for (const auto& c : valid_configs(qwen(quant::Format::int8, DType::bf16, 64), arch))
    CHECK(!(c.mainloop == Mainloop::gemv && gemv_balanced(c)));
}

TEST_CASE(
    "qkv_proj gemv: the register ring keeps every format's scales in registers, the other loads in shared memory sized with K and checked",
    "[generator][qkv]") {
  // gemv_smem_scales: the register ring loads the scales' raw bits with each step's units, so its
  // shared memory is the partial sums' alone for every format; bulk_rows, tma and tma_x copy each row's scales (and
  // int4 zero points).
  const ArchId arch = parse_arch("sm_90a");
  const Config s0 = mk_gemv(8, 32, 4, 1, kRing, 1);  // two m16 tiles per warp: tile_n 32 rows
  const int partial = gemv_partial_bytes(s0);
  CHECK(!gemv_smem_scales(kRing));
  CHECK(gemv_smem_scales(kBulk));
  CHECK(gemv_smem_scales(kTma));
  CHECK(gemv_smem_scales(kTmaX));
  for (quant::Format f :
       {quant::Format::mxfp4, quant::Format::mxfp4_kb128, quant::Format::nvfp4, quant::Format::nvfp4_kb128,
        quant::Format::nf4, quant::Format::int4, quant::Format::int8, quant::Format::bf16}) {
    INFO("format " << int(f));
    const Config cfg = s0;
    CHECK(gemv_smem_bytes(cfg, f, 3584) == partial);
    CHECK(gemv_smem_bytes(cfg, f, 131072) == partial);  // no term grows with K
    if (invalid_reason(DType::bf16, f, 128, true, cfg, arch) == nullptr)
      CHECK(launch_dims(qwen(f, DType::bf16, 1), cfg, 132).smem_bytes == unsigned(partial));
  }
  // The kernels take the per-block cap as their dynamic shared memory attribute (bulk_rows, tma, tma_x grow with K).
  CHECK(kernel_source(qwen(quant::Format::mxfp4, DType::bf16, 1), s0, arch).dynamic_smem_bytes ==
        unsigned(gemv_smem_cap(90)));
  // tma holds tile_n x K / 16 scale bytes of nvfp4: a K whose scales do not fit is left out of valid_configs and
  // refused by check_params, naming the row scales and k; the register ring runs that K.
  Problem huge = qwen(quant::Format::nvfp4, DType::bf16, 1);
  const auto at_3584 = valid_configs(huge, arch);
  const auto s2 = std::find_if(at_3584.begin(), at_3584.end(),
                               [](const Config& c) { return c.mainloop == Mainloop::gemv && c.gemv.load == kTma; });
  REQUIRE(s2 != at_3584.end());
  // doubling K adds tile_n x K / 16 scale bytes and one 8-byte mbarrier per (K step, warp column)
  CHECK(gemv_smem_bytes(*s2, huge.format, 7168) - gemv_smem_bytes(*s2, huge.format, 3584) ==
        s2->tile_n * 3584 / 16 + 8 * s2->gemv.warps_n * 3584 / gemv_step_k(huge.format));
  huge.k = 524288;
  REQUIRE(gemv_smem_bytes(*s2, huge.format, huge.k) > gemv_smem_cap(90));
  bool any_s0 = false;
  for (const auto& c : valid_configs(huge, arch))
    if (c.mainloop == Mainloop::gemv) {
      CHECK(gemv_smem_bytes(c, huge.format, huge.k) <= gemv_smem_cap(arch.sm));
      any_s0 = any_s0 || gemv_ring(c);
    }
  CHECK(any_s0);
  int dummy[4];
  const QkvParams a = host_params(huge, dummy);
  CHECK_THROWS_WITH(check_params(huge, *s2, a), Catch::Contains("row scales") && Catch::Contains("k = 524288"));
  CHECK_NOTHROW(check_params(huge, s0, a));
}

TEST_CASE("qkv_proj wgmma_pairs: space, tiles over (head, pair), names, rules, order", "[generator][qkv]") {
  const ArchId arch = parse_arch("sm_90a");
  // Every pairs config of a problem: box pairs x 2 halves x box heads = tile_n; the grid's tiles (pair chunk, head
  // group) cover every RoPE pair (i, i + D/2) of every head exactly once; threads, shared memory, unique names.
  auto check_space = [&](const Problem& p) {
    const auto cs = valid_configs(p, arch);
    const int heads = p.num_heads + 2 * p.num_kv_heads, half = p.head_dim / 2;
    int n = 0;
    std::set<std::string> names;
    for (const auto& c : cs) {
      if (c.mainloop != Mainloop::wgmma_pairs) continue;
      ++n;
      INFO(variant_name(p, c, arch));
      CHECK(names.insert(variant_name(p, c, arch)).second);
      CHECK((c.tile_m == 64 || (c.tile_m == 128 && p.m > 64)));
      const int pb = wp_box_pairs(c), hn = wp_box_heads(c);
      CHECK((pb == 4 || pb == 8 || pb == 16));
      CHECK(half % pb == 0);
      CHECK(2 * pb * hn == c.tile_n);
      CHECK(pb == (c.tile_n % 32 == 0 ? 16 : c.tile_n % 16 == 0 ? 8 : 4));  // the widest box: fewer output pieces
      const auto d = launch_dims(p, c, 132);
      CHECK(d.grid_x == unsigned(half / pb * ((heads + hn - 1) / hn)));
      // Token tiles rounded up to whole clusters of cluster_m, never more than one cluster's worth past M, and a
      // cluster of more token tiles than M has is not offered.
      const int token_tiles = (p.m + c.tile_m - 1) / c.tile_m;
      const int cm = c.pairs.cluster_m;
      CHECK((cm == 1 || cm == 2 || cm == 4));
      CHECK(cm <= token_tiles);
      CHECK(d.cluster_y == unsigned(cm));
      CHECK(d.grid_y % d.cluster_y == 0);
      CHECK(d.grid_y >= unsigned(token_tiles));
      CHECK(d.grid_y < unsigned(token_tiles + cm));
      CHECK(d.block_x == unsigned(c.tile_m * 2 + 32));  // a consumer warpgroup per 64 tokens + the producer warp
      CHECK(d.smem_bytes == unsigned(wp_smem_bytes(c)));
      CHECK(!uses_workspace(c));
      std::vector<int> covered(size_t(heads) * half, 0);
      for (unsigned bx = 0; bx < d.grid_x; ++bx) {
        const int i0 = int(bx % unsigned(half / pb)) * pb, h0 = int(bx / unsigned(half / pb)) * hn;
        for (int h = h0; h < h0 + hn && h < heads; ++h)
          for (int i = i0; i < i0 + pb; ++i) ++covered[size_t(h) * half + i];
      }
      CHECK(std::count(covered.begin(), covered.end(), 1) == heads * half);
    }
    return n;
  };
  for (int m : {1, 16, 17, 37, 64, 256, 4096}) {
    INFO("m " << m);
    const int n = check_space(qwen(quant::Format::fp16, DType::f16, m));
    CHECK((n > 0) == (m > 16));  // M <= 16: the weight-streaming kernels
    CHECK(check_space(qwen(quant::Format::bf16, DType::bf16, m)) == n);
    CHECK(check_space(qwen(quant::Format::nf4, DType::bf16, m)) == 0);  // 16-bit weights only
  }
  Problem p32 = qwen(quant::Format::fp16, DType::f16, 300);  // 32/8 heads (48); head_dim 64 (32 pairs per head)
  p32.num_heads = 32, p32.num_kv_heads = 8;
  CHECK(check_space(p32) > 40);
  Problem p64 = qwen(quant::Format::bf16, DType::bf16, 300);
  p64.head_dim = 64;
  CHECK(check_space(p64) > 40);

  const Problem pf = qwen(quant::Format::fp16, DType::f16, 256);
  const Config c = mk_pairs(128, 96, 6);
  CHECK(invalid_reason(pf.dtype, pf.format, pf.head_dim, pf.rope, c, arch) == nullptr);
  CHECK(variant_name(pf, c, arch) == "qkv_proj__fp16_fp16_d128_bias_rope__wgmma_pairs_m128_n96_s6_cm1__sm_90a");
  CHECK(name_expression(pf, c) ==
        "kt::qkv::qkv_wgmma_pairs<kt::DType::f16, kt::quant::Format::fp16, 128, true, true, false, 128, 96, 6>");
  CHECK(kernel_source(pf, c, arch).source.find("qkv_wgmma_pairs.cuh") != std::string::npos);
  CHECK(config_to_json(c).at("mainloop") == "wgmma_pairs");
  CHECK(same_config(config_from_json(config_to_json(c)), c));
  // Clusters of token tiles: a launch attribute, so the name changes and the binary does not; JSON round trip.
  auto cm2 = c;
  cm2.pairs.cluster_m = 2;
  CHECK(invalid_reason(pf.dtype, pf.format, pf.head_dim, pf.rope, cm2, arch) == nullptr);
  CHECK(variant_name(pf, cm2, arch) == "qkv_proj__fp16_fp16_d128_bias_rope__wgmma_pairs_m128_n96_s6_cm2__sm_90a");
  CHECK(name_expression(pf, cm2) == name_expression(pf, c));
  CHECK(!same_config(cm2, c));
  CHECK(same_config(config_from_json(config_to_json(cm2)), cm2));
  const auto d2 = launch_dims(pf, cm2, 132);
  CHECK(d2.grid_y == 2u);
  CHECK(d2.cluster_y == 2u);
  Problem p300 = pf;  // 3 token tiles of 128: clusters of 2 round the grid up to 4, of 4 to 4
  p300.m = 300;
  CHECK(launch_dims(p300, cm2, 132).grid_y == 4u);
  auto cm4 = c;
  cm4.pairs.cluster_m = 4;
  CHECK(launch_dims(p300, cm4, 132).grid_y == 4u);
  CHECK(launch_dims(p300, c, 132).grid_y == 3u);
  CHECK(launch_dims(p300, c, 132).cluster_y == 1u);
  // 6 slots of X [128][64] + W [96][64] (16-bit, 128-byte rows) + 1024 alignment; the staging tile [128][2 x 96 + 16]
  // lies over the ring (and is smaller here).
  CHECK(wp_smem_bytes(c) == 1024 + 6 * (128 + 96) * 128);
  auto one = c;  // n128 with a 1-slot ring: the staging tile [128][2 x 128 + 16] is the larger
  one.tile_n = 128, one.pairs.stages = 1;
  CHECK(wp_smem_bytes(one) == 1024 + 128 * (2 * 128 + 16));
  auto deep = c;  // 8 slots: 224 KB + alignment + static barriers, bias, positions, RoPE turns: within 227 KB
  deep.pairs.stages = 8;
  CHECK(invalid_reason(pf.dtype, pf.format, pf.head_dim, pf.rope, deep, arch) == nullptr);
  CHECK(launch_dims(pf, c, 132).grid_x == 4u * 12u);  // 4 chunks of 16 pairs x 12 groups of 3 heads (Qwen2.5-7B: 36)
  auto refused = [&](Config b, quant::Format f, const char* arch_name, const char* why) {
    const char* r = invalid_reason(f == quant::Format::bf16   ? DType::bf16
                                   : f == quant::Format::fp16 ? DType::f16
                                                              : DType::bf16,
                                   f, 128, true, b, parse_arch(arch_name));
    INFO(why);
    REQUIRE(r != nullptr);
    CHECK(std::string(r).find(why) != std::string::npos);
  };
  refused(c, quant::Format::int4, "sm_90a", "16-bit");
  refused(c, quant::Format::fp16, "sm_90", "sm_90a");
  auto b = c;
  b.tile_m = 256;
  refused(b, quant::Format::fp16, "sm_90a", "tile_m");
  b = c, b.tile_n = 36;
  refused(b, quant::Format::fp16, "sm_90a", "tile_n");
  b = c, b.tile_n = 88;  // no wgmma N of that width in wgmma.cuh
  refused(b, quant::Format::fp16, "sm_90a", "tile_n");
  b = c, b.tile_n = 160;
  refused(b, quant::Format::fp16, "sm_90a", "tile_n");
  b = c, b.pairs.stages = 17;
  refused(b, quant::Format::fp16, "sm_90a", "stages");
  b = c, b.pairs.stages = 12;  // 12 x 28 KB ring: over the 227 KB per block
  refused(b, quant::Format::fp16, "sm_90a", "shared memory");
  b = c, b.pairs.cluster_m = 3;
  refused(b, quant::Format::fp16, "sm_90a", "cluster_m");
  b = c, b.pairs.cluster_m = 8;
  refused(b, quant::Format::fp16, "sm_90a", "cluster_m");
  // cluster_m is a wgmma_pairs field only: the other mainloops' launches have no token-tile clusters.
  Config ws = mk_ws(128, 128, 2, 1, 6, 1);
  REQUIRE(invalid_reason(DType::f16, quant::Format::fp16, 128, true, ws, arch) == nullptr);
  ws.pairs.cluster_m = 2;  // not read for wgmma_ws
  CHECK(launch_dims(pf, ws, 132).cluster_y == 1u);

  // Order: the tuned winner shapes of the probe lie in the 24-candidate prefix a tune measures,
  // with the rings of 8 slots that the m128 shapes could not have before the staging tile moved over the ring
  // (faster at M = 256); M = 64 keeps 12 slots (16 measured slower).
  // With clusters of 2 token tiles wherever M has 2 or more (m128 n96 s8 at M = 256 18.0 vs 19.9
  // us in CUDA graphs; M = 1024 57.4 vs 66.1).
  auto in_prefix = [&](int m, int tile_m, int tile_n, int stages, int cluster_m) {
    const auto cs = valid_configs(qwen(quant::Format::fp16, DType::f16, m), arch);
    for (size_t i = 0; i < std::min<size_t>(24, cs.size()); ++i)
      if (cs[i].mainloop == Mainloop::wgmma_pairs && cs[i].tile_m == tile_m && cs[i].tile_n == tile_n &&
          cs[i].pairs.stages == stages && cs[i].pairs.cluster_m == cluster_m)
        return true;
    return false;
  };
  CHECK(in_prefix(64, 64, 48, 12, 1));
  CHECK(in_prefix(64, 64, 64, 12, 1));
  CHECK(in_prefix(128, 128, 64, 8, 1));
  CHECK(in_prefix(128, 64, 96, 8, 2));
  CHECK(in_prefix(256, 128, 96, 8, 2));
  CHECK(in_prefix(256, 128, 80, 8, 2));
  CHECK(in_prefix(1024, 128, 96, 8, 2));
}

TEST_CASE("qkv_proj K-blocked 16-bit weights: TMA mainloops only, the row-major twin's binaries", "[generator][qkv]") {
  const ArchId arch = parse_arch("sm_90a");
  // The element encoding must match the activations, as for fp16 / bf16.
  CHECK_NOTHROW(check_problem(qwen(quant::Format::fp16_kb64, DType::f16)));
  CHECK_NOTHROW(check_problem(qwen(quant::Format::bf16_kb64, DType::bf16)));
  CHECK_THROWS_WITH(check_problem(qwen(quant::Format::fp16_kb64, DType::bf16)),
                    Catch::Contains("fp16_kb64 weights need fp16 activations"));
  CHECK_THROWS_WITH(check_problem(qwen(quant::Format::bf16_kb64, DType::f16)),
                    Catch::Contains("bf16_kb64 weights need bf16 activations"));
  CHECK(qwen(quant::Format::fp16_kb64, DType::f16, 256).key() ==
        "qkv_proj/fp16/fp16_kb64/m256/k3584/h28/kv4/d128/bias/rope");
  CHECK(problem_from_json(problem_to_json(qwen(quant::Format::bf16_kb64, DType::bf16, 7))).format ==
        quant::Format::bf16_kb64);
  for (const auto& [kb, rm, dt] : {std::make_tuple(quant::Format::fp16_kb64, quant::Format::fp16, DType::f16),
                                   std::make_tuple(quant::Format::bf16_kb64, quant::Format::bf16, DType::bf16)})
    for (int m : {1, 16, 64, 256, 4096}) {
      INFO(format_tag(kb) << " m=" << m);
      const Problem pk = qwen(kb, dt, m), pr = qwen(rm, dt, m);
      const auto ck = valid_configs(pk, arch), cr = valid_configs(pr, arch);
      REQUIRE(!ck.empty());
      std::set<Mainloop> mainloops;
      for (const auto& c : ck) {
        mainloops.insert(c.mainloop);
        // the same kernel as the row-major twin (the layout is in the host's tensor map), a name of its own
        CHECK(name_expression(pk, c) == name_expression(pr, c));
        CHECK(variant_name(pk, c, arch) != variant_name(pr, c, arch));
        CHECK(variant_name(pk, c, arch).find(std::string("_") + format_tag(kb) + "_d128") != std::string::npos);
      }
      CHECK(mainloops.count(Mainloop::wgmma_ws) == 1);
      CHECK(mainloops.count(Mainloop::gemv) + mainloops.count(Mainloop::mma) + mainloops.count(Mainloop::wgmma) == 0);
      if (m >= 64) CHECK(mainloops.count(Mainloop::wgmma_pairs) == 1);
      // exactly the twin's TMA configs, in the twin's order
      std::vector<Config> tma;
      for (const auto& c : cr)
        if (c.mainloop == Mainloop::wgmma_ws || c.mainloop == Mainloop::wgmma_pairs) tma.push_back(c);
      REQUIRE(tma.size() == ck.size());
      for (size_t i = 0; i < tma.size(); ++i) CHECK(same_config(tma[i], ck[i]));
      // the default config is valid for the format
      CHECK(invalid_reason(pk.dtype, pk.format, pk.head_dim, pk.rope, default_config(arch, pk), arch) == nullptr);
    }
  const Problem p = qwen(quant::Format::fp16_kb64, DType::f16, 16);
  for (const auto& c :
       {mk_mma(16, 128, 64, 1, 4, 2, 1, 1), mk_gemv(8, 16, 8, 1, kBulk, 1), mk_wgmma(64, 128, 64, 3, 1, 1)})
    CHECK_THAT(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, c, arch), Catch::Contains("K-blocked"));
}

TEST_CASE(
    "qkv_proj K-blocked packed weights: gemv register_ring / tma / tma_x and wgmma_ws only, the row-major twin's binaries",
    "[generator][qkv]") {
  const ArchId arch = parse_arch("sm_90a");
  const std::pair<quant::Format, quant::Format> pairs[] = {{quant::Format::int8_kb64, quant::Format::int8},
                                                           {quant::Format::int4_kb128, quant::Format::int4},
                                                           {quant::Format::nf4_kb128, quant::Format::nf4},
                                                           {quant::Format::mxfp4_kb128, quant::Format::mxfp4},
                                                           {quant::Format::nvfp4_kb128, quant::Format::nvfp4}};
  for (const auto& [kb, rm] : pairs)
    for (DType dt : {DType::f16, DType::bf16})
      for (int m : {1, 16, 64, 256, 4096}) {
        INFO(format_tag(kb) << " m=" << m);
        const Problem pk = qwen(kb, dt, m), pr = qwen(rm, dt, m);
        CHECK_NOTHROW(check_problem(pk));
        const auto ck = valid_configs(pk, arch), cr = valid_configs(pr, arch);
        REQUIRE(!ck.empty());
        std::set<Mainloop> mainloops;
        for (const auto& c : ck) {
          mainloops.insert(c.mainloop);
          if (c.mainloop == Mainloop::gemv) CHECK(c.gemv.load != kBulk);
          CHECK(name_expression(pk, c) == name_expression(pr, c));  // the layout lives in the host's tensor maps
          CHECK(variant_name(pk, c, arch).find(std::string("_") + format_tag(kb) + "_d128") != std::string::npos);
        }
        CHECK(mainloops.count(Mainloop::wgmma_ws) == 1);
        CHECK(mainloops.count(Mainloop::mma) + mainloops.count(Mainloop::wgmma) +
                  mainloops.count(Mainloop::wgmma_pairs) ==
              0);
        if (m <= 16) {
          CHECK(mainloops.count(Mainloop::gemv) == 1);
          auto has = [&](GemvLoad l) {
            return std::any_of(ck.begin(), ck.end(),
                               [&](const Config& c) { return c.mainloop == Mainloop::gemv && c.gemv.load == l; });
          };
          CHECK(has(kRing));
          CHECK(has(kTma));
          CHECK(has(kTmaX) == (m == 16));  // X by TMA: tile_m 16 / 32 only
        }
        // exactly the twin's gemv register_ring / tma / tma_x and wgmma_ws configs (the decode order interleaves the loads that remain)
        std::vector<Config> tma;
        for (const auto& c : cr)
          if (c.mainloop == Mainloop::wgmma_ws || (c.mainloop == Mainloop::gemv && c.gemv.load != kBulk))
            tma.push_back(c);
        REQUIRE(tma.size() == ck.size());
        for (const auto& c : tma)
          CHECK(std::any_of(ck.begin(), ck.end(), [&](const Config& o) { return same_config(c, o); }));
        CHECK(invalid_reason(pk.dtype, pk.format, pk.head_dim, pk.rope, default_config(arch, pk), arch) == nullptr);
        if (m == 1) CHECK(default_config(arch, pk).mainloop == Mainloop::gemv);
      }
  const Problem p = qwen(quant::Format::int4_kb128, DType::bf16, 16);
  for (const auto& c :
       {mk_mma(16, 128, 64, 1, 4, 2, 1, 1), mk_gemv(8, 16, 4, 1, kBulk, 1), mk_wgmma(64, 128, 64, 3, 1, 1)})
    CHECK_THAT(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, c, arch), Catch::Contains("K-blocked packed"));
  // the register ring reads K-blocked units by address (ld.global.nc), on sm_80 too
  CHECK(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, mk_gemv(8, 16, 4, 1, kRing, 1), arch) == nullptr);
  CHECK(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, mk_gemv(8, 16, 4, 1, kRing, 1), parse_arch("sm_80")) ==
        nullptr);
  // K must tile into 64-byte blocks: 4-bit K a multiple of 128, int8 of 64.
  Problem odd = qwen(quant::Format::nf4_kb128, DType::bf16, 1);
  odd.k = 3584 + 64;
  CHECK_THROWS_WITH(check_problem(odd), Catch::Contains("nf4_kb128: k must be a multiple of 128"));
  odd.format = quant::Format::nf4;
  CHECK_NOTHROW(check_problem(odd));
  odd.format = quant::Format::int8_kb64;
  CHECK_NOTHROW(check_problem(odd));
  CHECK(problem_from_json(problem_to_json(qwen(quant::Format::mxfp4_kb128, DType::bf16, 7))).format ==
        quant::Format::mxfp4_kb128);
}

TEST_CASE("qkv_proj weight L2 policy: evict_first where it measured faster", "[generator][qkv]") {
  const Config pairs = mk_pairs(128, 96, 8, 2), ws8 = mk_ws(8, 128, 1, 1, 8, 2), ws256 = mk_ws(256, 128, 2, 1, 4, 1),
               gemv8 = mk_gemv(8, 16, 4, 1, kBulk, 1), mma = mk_mma(64, 128, 64, 2, 4, 2, 1, 1),
               wgmma = mk_wgmma(128, 128, 64, 3, 1, 1);
  for (int m : {1, 64, 256, 1024, 4096}) CHECK(weight_evict_first(qwen(quant::Format::fp16, DType::f16, m), pairs));
  CHECK(weight_evict_first(qwen(quant::Format::fp16_kb64, DType::f16, 1), ws8));
  CHECK(weight_evict_first(qwen(quant::Format::fp16, DType::f16, 8), ws8));
  CHECK_FALSE(weight_evict_first(qwen(quant::Format::fp16, DType::f16, 9), ws8));   // two token tiles
  CHECK_FALSE(weight_evict_first(qwen(quant::Format::int4, DType::bf16, 1), ws8));  // packed weights
  CHECK(weight_evict_first(qwen(quant::Format::bf16, DType::bf16, 256), ws256));
  CHECK_FALSE(weight_evict_first(qwen(quant::Format::bf16, DType::bf16, 4096), ws256));
  CHECK(weight_evict_first(qwen(quant::Format::int8, DType::bf16, 8), gemv8));
  CHECK_FALSE(
      weight_evict_first(qwen(quant::Format::int8, DType::bf16, 16), gemv8));  // the half-M tile: two token tiles
  CHECK_FALSE(weight_evict_first(qwen(quant::Format::fp16, DType::f16, 16), mma));
  CHECK_FALSE(weight_evict_first(qwen(quant::Format::fp16, DType::f16, 256), wgmma));
}

TEST_CASE("qkv_proj kernel arguments are checked", "[generator][qkv]") {
  const Problem p = qwen(quant::Format::int4, DType::f16, 16);
  const Config c = mk_mma(16, 128, 64, 1, 4, 2, 4, 1);
  QkvParams a{};
  auto fake = [](std::uintptr_t v) { return reinterpret_cast<void*>(v); };
  a.x = fake(0x1000);
  a.w_data = fake(0x2000);
  a.w_scales = fake(0x3000);
  a.w_zeros = fake(0x4000);
  a.bias = fake(0x5000);
  a.positions = static_cast<const int*>(fake(0x6000));
  a.q = fake(0x7000);
  a.k = fake(0x8000);
  a.v = fake(0x9000);
  a.workspace = static_cast<float*>(fake(0xa000));
  a.counters = static_cast<unsigned*>(fake(0xb000));
  a.x_row_stride = 3584;
  a.q_row_stride = 28 * 128;
  a.k_row_stride = a.v_row_stride = 4 * 128;
  a.m = 16;
  a.k_dim = 3584;
  a.num_heads = 28;
  a.num_kv_heads = 4;
  a.tensor_scale = 1;
  CHECK_NOTHROW(check_params(p, c, a));
  auto b = a;
  b.x = fake(0x1002);
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("16-byte aligned"));
  b = a;
  b.w_zeros = nullptr;
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("w_zeros"));
  b = a;
  b.workspace = nullptr;
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("workspace"));
  b = a;
  b.positions = nullptr;
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("positions"));
  b = a;
  b.k_row_stride = 4 * 128 + 2;
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("multiples of 8"));
  b = a;
  b.bias = fake(0x5002);  // the epilogue reads the bias in pairs
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("bias must be 4-byte aligned"));
  // scales and zero points are read in 4-byte words: 2-byte aligned (an fp16 / byte array's natural alignment) is
  // refused, 4-byte aligned accepted
  b = a;
  b.w_scales = fake(0x6002);
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("w_scales must be 4-byte aligned"));
  b = a;
  b.w_zeros = fake(0x7001);
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("w_zeros must be 4-byte aligned"));
  b = a;
  b.w_scales = fake(0x6004);
  b.w_zeros = fake(0x7004);
  CHECK_NOTHROW(check_params(p, c, b));
  // wgmma_ws: every block needs a K step; stream-K needs the workspace too.
  const Config ws_split = mk_ws(16, 128, 2, 1, 4, 16);
  Problem short_k = p;
  short_k.k = 512;  // 8 K steps < split_k 16
  b = a;
  b.k_dim = 512;
  CHECK_THROWS_WITH(check_params(short_k, ws_split, b), Catch::Contains("exceeds the 8 K steps"));
  Problem huge = p;  // 62500 token tiles x 136 feature tiles x 256 K steps: 2.18e9 units
  huge.m = 1000000;
  huge.k = 16384;
  huge.num_heads = 128;
  b = a;
  b.m = huge.m;
  b.k_dim = huge.k;
  b.num_heads = huge.num_heads;
  b.x_row_stride = huge.k;
  CHECK_THROWS_WITH(check_params(huge, ws_split, b), Catch::Contains("32-bit index"));
  const Config ws_stream = mk_ws(16, 128, 2, 1, 4, 0);
  b = a;
  b.counters = nullptr;
  CHECK_THROWS_WITH(check_params(p, ws_stream, b), Catch::Contains("stream-K"));
}

TEST_CASE("qkv_proj kv_cache class: its own key, name and binary; the plain class's key and configs",
          "[generator][qkv]") {
  const ArchId arch = parse_arch("sm_90a");
  Problem plain = qwen(quant::Format::int4, DType::bf16, 16);
  Problem kv = plain;
  kv.kv_cache = true;
  CHECK(kv.key() == plain.key() + "/kvcache");
  CHECK(problem_to_json(plain).count("kv_cache") == 0);  // plain problems keep the JSON they always had
  CHECK(problem_from_json(problem_to_json(kv)).kv_cache);
  CHECK(problem_from_json(problem_to_json(kv)).key() == kv.key());
  // The same class key (the runtime's nearest step finds the plain problem's winners) and the same valid configs.
  const Family& f = family_type();
  CHECK(f.class_key(problem_to_json(kv)) == f.class_key(problem_to_json(plain)));
  const auto cp = valid_configs(plain, arch), ck = valid_configs(kv, arch);
  REQUIRE(cp.size() == ck.size());
  for (size_t i = 0; i < cp.size(); ++i) CHECK(same_config(cp[i], ck[i]));
  // Its own binary: KvCache in the name expression, "_kvcache" in the variant name.
  const Config& c = cp.front();
  CHECK(name_expression(kv, c) != name_expression(plain, c));
  CHECK(name_expression(plain, c).find(", true, true, false, ") != std::string::npos);
  CHECK(name_expression(kv, c).find(", true, true, true, ") != std::string::npos);
  CHECK(variant_name(kv, c, arch).find("_rope_kvcache__") != std::string::npos);
  CHECK(variant_name(plain, c, arch).find("kvcache") == std::string::npos);
}

TEST_CASE("qkv_proj KV-cache arguments are checked, each error naming the argument", "[generator][qkv]") {
  Problem p = qwen(quant::Format::int8, DType::bf16, 16);  // Hkv 4, D 128
  p.kv_cache = true;
  const Config c = mk_gemv(16, 32, 4, 1, GemvLoad::register_ring, 1);
  int dummy[64];
  QkvParams a = host_params(p, dummy);
  a.x_row_stride = p.k;
  a.q_row_stride = 28 * 128;
  a.k_row_stride = a.v_row_stride = 4 * 128;
  auto fake = [](std::uintptr_t v) { return reinterpret_cast<void*>(v); };
  a.slot_mapping = static_cast<const int*>(fake(0x10000));
  a.k_cache = fake(0x20000);
  a.v_cache = fake(0x30000);
  a.num_pages = 50;
  a.page_size = 16;
  // K: [pages][slots][heads][D] (vLLM), V: [pages][heads][slots][D] (FlashInfer's HND), pages padded
  a.k_cache_head_stride = 128, a.k_cache_slot_stride = 4 * 128, a.k_cache_page_stride = 16 * 4 * 128 + 64;
  a.v_cache_head_stride = 16 * 128, a.v_cache_slot_stride = 128, a.v_cache_page_stride = 4 * 16 * 128;
  CHECK_NOTHROW(check_params(p, c, a));
  // k and v may be null with a slot mapping (only the cache is written); without one they are required.
  QkvParams b = a;
  b.k = b.v = nullptr;
  CHECK_NOTHROW(check_params(p, c, b));
  b.slot_mapping = nullptr;
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("kv_cache set but slot_mapping is null"));
  // The plain class (kv_cache false): k and v required, no slot mapping or cache.
  Problem plain = p;
  plain.kv_cache = false;
  CHECK_THROWS_WITH(check_params(plain, c, a), Catch::Contains("slot_mapping given for a problem without kv_cache"));
  b = a;
  b.slot_mapping = nullptr;
  CHECK_THROWS_WITH(check_params(plain, c, b), Catch::Contains("without kv_cache and a slot_mapping"));
  b.k_cache = b.v_cache = nullptr;
  CHECK_NOTHROW(check_params(plain, c, b));  // the plain projection
  b.k = nullptr;
  CHECK_THROWS_WITH(check_params(plain, c, b), Catch::Contains("k and v must be non-null"));
  b = a;
  b.v_cache = nullptr;
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("k_cache and v_cache"));
  b = a;
  b.k_cache = fake(0x20008);
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("k_cache must be 16-byte aligned"));
  b = a;
  b.v_cache = fake(0x30004);
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("v_cache must be 16-byte aligned"));
  b = a;
  b.slot_mapping = static_cast<const int*>(fake(0x10002));
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("slot_mapping must be 4-byte aligned"));
  b = a;
  b.page_size = 0;
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("page_size must be >= 1, got 0"));
  b = a;
  b.num_pages = -3;
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("num_pages must be >= 1, got -3"));
  b = a;
  b.num_pages = 1 << 20;
  b.page_size = 1 << 12;  // 2^32 slots: not addressable by an int32 slot
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("exceed the int32 slot mapping"));
  b = a;
  b.k_cache_slot_stride = 4 * 128 + 4;
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("k_cache_slot_stride must be a non-negative multiple of 8"));
  b = a;
  b.v_cache_page_stride = -8;
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("v_cache_page_stride must be a non-negative multiple"));
  // overlaps: heads closer than head_dim, slots inside the heads' span, pages inside the slots'
  b = a;
  b.k_cache_head_stride = 64;
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("k_cache_head_stride 64 overlaps"));
  b = a;
  b.k_cache_slot_stride = 3 * 128;
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("k_cache_slot_stride 384 overlaps the 512 elements"));
  b = a;
  b.v_cache_page_stride = 2 * 16 * 128;  // two heads' slots: pages overlap heads 2 and 3
  CHECK_THROWS_WITH(check_params(p, c, b), Catch::Contains("v_cache_page_stride 4096 overlaps the 8192 elements"));
  // a dimension of size 1 is never stepped along: any stride passes
  Problem one_head = p;  // kv_cache set
  one_head.num_heads = 7;
  one_head.num_kv_heads = 1;
  b = a;
  b.num_heads = 7;
  b.num_kv_heads = 1;
  b.k_cache_head_stride = b.v_cache_head_stride = 0;
  b.k_cache_slot_stride = 128;
  b.k_cache_page_stride = 16 * 128;
  b.v_cache_page_stride = 16 * 128;
  CHECK_NOTHROW(check_params(one_head, c, b));
}

TEST_CASE("qkv_proj gemv: stages-0 binaries compile for sm_80 (no sm_90 instruction outside the TMA paths)",
          "[nvrtc][qkv]") {
  // The tma / tma_x proxy fence must sit inside the sm_90 guard, or no gemv binary compiles for sm_80.
  const ArchId arch = parse_arch("sm_80");
  std::vector<KernelSource> src;
  for (const quant::Format f : {quant::Format::int4, quant::Format::nvfp4}) {
    const Problem p = qwen(f, DType::f16, 1);
    src.push_back(kernel_source(p, default_config(arch, p), arch));
    int n = 0;
    for (const auto& c : valid_configs(p, arch))
      if (c.mainloop == Mainloop::gemv && n++ < 2) src.push_back(kernel_source(p, c, arch));
  }
  Compiler compiler(nullptr);
  for (const auto& r : compiler.compile_all(src)) {
    INFO(r.kernel.variant_name << "\n" << r.error);
    CHECK(r.kernel.variant_name.find("gemv") != std::string::npos);
    CHECK(r.ok);
  }
}

TEST_CASE("qkv_proj: a pairwise sample of one class's binaries compiles, invalid configs are rejected by the template",
          "[nvrtc][qkv]") {
  // The binaries of one class (nvfp4, bf16, every mainloop) that valid_configs proposes at M 1, 64, 256 and 4096, in
  // their pairwise-covering sample: every pair of template-argument values compiled at least once. The [gpu]
  // every-variant tests compile and run them all.
  const ArchId arch = parse_arch("sm_90a");
  std::vector<KernelSource> src;
  std::set<std::string> seen;
  for (int m : {1, 64, 256, 4096}) {
    const Problem p = qwen(quant::Format::nvfp4, DType::bf16, m);
    for (const auto& c : valid_configs(p, arch))
      if (seen.insert(name_expression(p, c)).second) src.push_back(kernel_source(p, c, arch));
  }
  REQUIRE(src.size() >= 400);
  src = kt_test::pairwise_sample(src);
  for (const char* mainloop : {"qkv_proj<", "qkv_gemv", "qkv_wgmma<", "qkv_wgmma_ws"})
    CHECK(std::count_if(src.begin(), src.end(), [&](const KernelSource& k) {
            return k.name_expression.find(mainloop) != std::string::npos;
          }) >= 4);
  Compiler compiler(nullptr);
  const auto res = compiler.compile_all(src);
  for (const auto& r : res) {
    INFO(r.kernel.variant_name << "\n" << r.error);
    CHECK(r.ok);
    CHECK(r.report.spill_store_bytes == 0);
  }
  const auto bad = compiler.compile(kernel_source(qwen(), mk_mma(16, 64, 64, 1, 4, 2, 1, 1), arch));  // RoPE, tile_n 64
  CHECK_FALSE(bad.ok);
  CHECK_THAT(bad.error, Catch::Contains("invalid qkv_proj variant"));
  // The gemv template static_asserts the same rules (here: 3 warps along K).
  const auto bad_gemv = compiler.compile(kernel_source(qwen(), mk_gemv(8, 32, 3, 1, kRing, 2), arch));
  CHECK_FALSE(bad_gemv.ok);
  CHECK_THAT(bad_gemv.error, Catch::Contains("invalid qkv_gemv variant"));
  // wgmma_pairs (16-bit weights only, so not in the nvfp4 class): the pairwise sample of the fp16 class's binaries
  // compiles without spills, and its template rejects a tile_n with no wgmma N (88) itself.
  std::vector<KernelSource> pairs;
  const Problem pf = qwen(quant::Format::fp16, DType::f16, 256);
  for (const auto& c : valid_configs(pf, arch))
    if (c.mainloop == Mainloop::wgmma_pairs) pairs.push_back(kernel_source(pf, c, arch));
  REQUIRE(pairs.size() >= 45);
  pairs = kt_test::pairwise_sample(pairs);
  for (const auto& r : compiler.compile_all(pairs)) {
    INFO(r.kernel.variant_name << "\n" << r.error);
    CHECK(r.ok);
    CHECK(r.report.spill_store_bytes == 0);
  }
  const auto bad_pairs = compiler.compile(kernel_source(pf, mk_pairs(128, 88, 6), arch));
  CHECK_FALSE(bad_pairs.ok);
  CHECK_THAT(bad_pairs.error, Catch::Contains("invalid qkv_wgmma_pairs variant"));
}

TEST_CASE("qkv_proj KV-cache write: variants of every mainloop compile with it, without spills, within the smem model",
          "[nvrtc][qkv]") {
  // The cache store is compiled into the kv_cache class only (store_head in qkv_epilogue.cuh; wgmma_pairs' own store
  // loop): a few variants of each mainloop and each epilogue path of that class -- mma and wgmma split-K
  // (finish_tile after the workspace reduction), gemv register ring / bulk rows / tma / tma_x / cluster / balanced
  // tail (its register epilogue), wgmma_ws with and without pre-loaded epilogue inputs, two K groups and stream-K,
  // wgmma_pairs with 4, 8 and 16 pairs per box -- for the RoPE + bias class and the plain one.
  const ArchId arch = parse_arch("sm_90a");
  using Pred = std::function<bool(const Config&)>;
  const Pred kinds[] = {
      [](const Config& c) { return c.mainloop == Mainloop::mma && c.mma.split_k == 1; },
      [](const Config& c) { return c.mainloop == Mainloop::mma && c.mma.split_k > 1; },
      [](const Config& c) { return c.mainloop == Mainloop::gemv && gemv_ring(c) && !gemv_balanced(c); },
      [](const Config& c) { return c.mainloop == Mainloop::gemv && gemv_ring(c) && gemv_balanced(c); },
      [](const Config& c) { return c.mainloop == Mainloop::gemv && c.gemv.reduce == GemvReduce::cluster; },
      [](const Config& c) { return c.mainloop == Mainloop::gemv && c.gemv.load == GemvLoad::tma && gemv_balanced(c); },
      [](const Config& c) { return c.mainloop == Mainloop::gemv && c.gemv.load == GemvLoad::tma_x; },
      [](const Config& c) { return c.mainloop == Mainloop::wgmma && c.wgmma.split_k == 1; },
      [](const Config& c) { return c.mainloop == Mainloop::wgmma && c.wgmma.split_k > 1; },
      [](const Config& c) {
        return c.mainloop == Mainloop::wgmma_ws && c.ws.k_groups == 1 && ws_cluster(c) == 1 && !ws_stream_k(c);
      },
      [](const Config& c) { return c.mainloop == Mainloop::wgmma_ws && ws_cluster(c) > 1; },
      [](const Config& c) { return c.mainloop == Mainloop::wgmma_ws && c.ws.k_groups == 2; },
      [](const Config& c) { return c.mainloop == Mainloop::wgmma_ws && ws_stream_k(c); },
      [](const Config& c) { return c.mainloop == Mainloop::wgmma_pairs && wp_box_pairs(c) == 4; },
      [](const Config& c) { return c.mainloop == Mainloop::wgmma_pairs && wp_box_pairs(c) == 8; },
      [](const Config& c) { return c.mainloop == Mainloop::wgmma_pairs && wp_box_pairs(c) == 16; },
  };
  std::vector<KernelSource> src;
  std::vector<Config> configs;
  std::vector<Problem> problems;
  for (bool rope : {true, false})
    for (const Pred& kind : kinds) {
      // the first valid config of this kind (int4, or fp16 for wgmma_pairs) at M 16, 64 or 256
      bool found = false;
      for (auto [f, dt] : {std::pair{quant::Format::int4, DType::bf16}, {quant::Format::fp16, DType::f16}})
        for (int m : {16, 64, 256}) {
          Problem p = qwen(f, dt, m);
          p.rope = p.has_bias = rope;
          p.kv_cache = true;
          for (const auto& c : valid_configs(p, arch))
            if (!found && kind(c)) {
              found = true;
              src.push_back(kernel_source(p, c, arch));
              configs.push_back(c);
              problems.push_back(p);
            }
        }
      CHECK(found);
    }
  // ... and the wgmma_pairs variant closest to the shared-memory limit
  Problem pf = qwen(quant::Format::fp16, DType::f16, 256);
  pf.kv_cache = true;
  Config fullest{};
  int most = 0;
  for (const auto& c : valid_configs(pf, arch))
    if (c.mainloop == Mainloop::wgmma_pairs && wp_smem_bytes(c) + wp_static_bytes(c, 128) > most)
      most = wp_smem_bytes(c) + wp_static_bytes(c, 128), fullest = c;
  REQUIRE(most > 0);
  src.push_back(kernel_source(pf, fullest, arch));
  configs.push_back(fullest);
  problems.push_back(pf);
  Compiler compiler(nullptr);
  const auto res = compiler.compile_all(src);
  REQUIRE(res.size() == src.size());
  std::set<Mainloop> seen;
  for (size_t i = 0; i < res.size(); ++i) {
    const auto& r = res[i];
    INFO(r.kernel.variant_name << "\n" << r.error);
    CHECK(r.ok);
    CHECK(r.report.spill_store_bytes == 0);
    seen.insert(configs[i].mainloop);
    // wgmma_pairs' static shared memory is the model invalid_reason budgets with (the cache write adds none), up to
    // the arrays' alignment padding, and with the dynamic request fits the block's limit.
    if (configs[i].mainloop == Mainloop::wgmma_pairs) {
      CHECK(r.report.static_smem_bytes <= wp_static_bytes(configs[i], problems[i].head_dim) + 64);
      CHECK(wp_smem_bytes(configs[i]) + r.report.static_smem_bytes <= max_smem_per_block(90));
    }
  }
  CHECK(seen.size() == 5);
}

TEST_CASE(
    "qkv_proj candidate order: properties for every device model, read from the device and not an H100's constants",
    "[generator][qkv]") {
  const ArchId arch = parse_arch("sm_90a");
  DeviceModel h100_pcie = device_model(arch, 114), small_gpu = device_model(arch, 40);
  small_gpu.smem_per_sm = 100 * 1024;  // a GPU with less shared memory per SM than the H100's 228 KB
  const DeviceModel models[] = {device_model(arch), h100_pcie, small_gpu};
  CHECK(device_model(arch).sm_count == 132);
  CHECK(device_model(arch).smem_per_sm == 228 * 1024);
  CHECK(device_model(arch).smem_per_block == max_smem_per_block(90));
  CHECK(device_model(parse_arch("sm_80")).sm_count == 108);
  CHECK(device_model(parse_arch("sm_86")).smem_per_block == max_smem_per_block(86));
  CHECK_THROWS_WITH(device_model(arch, 0), Catch::Contains("sm_count must be >= 1"));
  DeviceModel none = device_model(arch);
  none.sm_count = 0;
  CHECK_THROWS_WITH(valid_configs(qwen(), arch, none), Catch::Contains("sm_count"));
  CHECK(valid_configs(qwen(), arch).size() == valid_configs(qwen(), arch, device_model(arch)).size());

  for (const DeviceModel& dev : models)
    for (auto [f, dt] : {std::pair{quant::Format::nf4, DType::bf16},
                         {quant::Format::fp16, DType::f16},
                         {quant::Format::int8, DType::bf16},
                         {quant::Format::int4_kb128, DType::f16}})
      for (int m : {1, 16, 37, 64, 256, 1024, 4096}) {
        const Problem p = qwen(f, dt, m);
        const double sms = dev.sm_count;
        INFO(p.key() << " on " << dev.sm_count << " SMs, " << dev.smem_per_sm << " bytes per SM");
        const auto cs = valid_configs(p, arch, dev);
        REQUIRE(!cs.empty());
        // Deterministic: the same list again.
        const auto again = valid_configs(p, arch, dev);
        REQUIRE(again.size() == cs.size());
        for (size_t i = 0; i < cs.size(); ++i) CHECK(same_config(cs[i], again[i]));
        // Every candidate valid, none twice, names unique; the default is valid and among the candidates (the tuner
        // measures it first as the baseline).
        std::set<std::string> names;
        for (const auto& c : cs) {
          CHECK(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, c, arch) == nullptr);
          CHECK(names.insert(variant_name(p, c, arch)).second);
        }
        const Config def = default_config(arch, p);
        CHECK(invalid_reason(p.dtype, p.format, p.head_dim, p.rope, def, arch) == nullptr);
        CHECK(std::any_of(cs.begin(), cs.end(), [&](const Config& c) { return same_config(c, def); }));
        // Decode sizes try the weight-streaming kernel first; gemv only up to M = 64.
        if (m <= 16) CHECK(cs.front().mainloop == Mainloop::gemv);
        if (m > 64)
          CHECK(std::none_of(cs.begin(), cs.end(), [](const Config& c) { return c.mainloop == Mainloop::gemv; }));
        std::vector<Config> by[5];
        for (const auto& c : cs) by[int(c.mainloop)].push_back(c);
        // mma: split-K only while the grid has fewer than 2 blocks per SM of this device; grids closest to 2 per SM first.
        double last = -1;
        for (const auto& c : by[int(Mainloop::mma)]) {
          const double blocks = double((p.n() + c.tile_n - 1) / c.tile_n) * ((m + c.tile_m - 1) / c.tile_m);
          if (c.mma.split_k > 1) CHECK(blocks < 2 * sms);
          const double dist = std::round(std::fabs(std::log2(blocks * c.mma.split_k / (2 * sms))) * 2) / 2;
          CHECK(dist >= last);
          last = dist;
        }
        // wgmma: split-K only while the grid has fewer blocks than SMs; whole waves first (the busy share of the last
        // wave, non-increasing down the list).
        last = 2;
        for (const auto& c : by[int(Mainloop::wgmma)]) {
          const double blocks = double(p.n() / c.tile_n) * ((m + c.tile_m - 1) / c.tile_m);
          if (c.wgmma.split_k > 1) CHECK(blocks < sms);
          const double waves = blocks * c.wgmma.split_k / sms;
          const double eff = std::round((waves < 1 ? waves : waves >= 4 ? 1.0 : waves / std::ceil(waves)) * 8) / 8;
          CHECK(eff <= last);
          last = eff;
        }
        // wgmma_ws: stream-K only with more (tile, K step) units than SMs, a cluster split only with fewer output tiles
        // than SMs.
        for (const auto& c : by[int(Mainloop::wgmma_ws)]) {
          if (ws_stream_k(c)) CHECK(ws_units(p, c) > dev.sm_count);
          const double tiles = double((p.n() + c.tile_n - 1) / c.tile_n) * ((m + c.tile_m - 1) / c.tile_m);
          if (ws_split(c) > 1 && !ws_split_tail(c)) CHECK(tiles < sms);
          if (ws_split_tail(c)) CHECK(tiles > sms);  // a full wave of whole tiles before the split ones
        }
        // gemv: at 8 < M <= 16 the default's TMA twins first (tma_x, its balanced tail, tma, its tail, where valid;
        // the sm_90a default is the tma_x balanced tail itself); every fourth whole-unit candidate runs the register
        // ring while both kinds last (3 others, 1 ring).
        const auto& gv = by[int(Mainloop::gemv)];
        if (m > 8 && m <= 16 && def.mainloop == Mainloop::gemv && def.gemv.load != kTma) {
          Config t = def;
          t.gemv.load = kTma;
          t.gemv.reduce = GemvReduce::none;
          if (std::any_of(gv.begin(), gv.end(), [&](const Config& c) { return same_config(c, t); })) {
            size_t i = 0;
            while (i < gv.size() && gv[i].gemv.load == kTmaX) ++i;  // its tma_x twins, when valid
            REQUIRE(i < gv.size());
            CHECK(same_config(gv[i], t));
            if (i > 0) {  // the tma_x twin first
              Config x = t;
              x.gemv.load = kTmaX;
              CHECK(same_config(gv[0], x));
            }
          }
        }
        std::vector<Config> whole;
        for (const auto& c : gv)
          if (!gemv_balanced(c) && c.gemv.load != kTmaX) whole.push_back(c);
        size_t rings = 0;
        for (const auto& c : whole) rings += gemv_ring(c);
        const size_t rounds = std::min(rings, (whole.size() - rings) / 3);
        for (size_t i = 0; i < 4 * rounds; ++i) CHECK(gemv_ring(whole[i]) == (i % 4 == 3));
        if (m <= 16) CHECK(rounds >= 4);
        if (m == 1 && f == quant::Format::nf4 && &dev == &models[0]) {  // the ring's prefetch-1 configs that fit first
          int last_prefetch = 0;
          for (size_t i = 3; i < 40 && i < 4 * rounds; i += 4) {
            CHECK(whole[i].gemv.prefetch >= last_prefetch);
            last_prefetch = whole[i].gemv.prefetch;
          }
          CHECK(rounds >= 10);
        }
      }
  // The order follows the device: 114 SMs make different whole waves than 132 for a prefill-sized problem, and the
  // register-ring gemv configs whose blocks fit in 228 KB per SM need not fit in 100 KB.
  auto order = [&](const Problem& p, const DeviceModel& dev) {
    std::vector<std::string> v;
    for (const auto& c : valid_configs(p, arch, dev)) v.push_back(variant_name(p, c, arch));
    return v;
  };
  CHECK(order(qwen(quant::Format::int4, DType::bf16, 4096), device_model(arch)) !=
        order(qwen(quant::Format::int4, DType::bf16, 4096), h100_pcie));
  CHECK(order(qwen(quant::Format::nf4, DType::bf16, 1), device_model(arch)) !=
        order(qwen(quant::Format::nf4, DType::bf16, 1), small_gpu));
}

TEST_CASE("qkv_proj config JSON: one object per mainloop, every field named; the flat schema-1 form is refused",
          "[generator][qkv]") {
  const Problem p = qwen();
  const Config cs[] = {mk_mma(16, 128, 64, 1, 4, 2, 8, 1),
                       mk_gemv(8, 32, 7, 1, kBulk, 2, GemvReduce::cluster, 4),
                       mk_gemv(8, 16, 4, 1, kTmaX, 1, GemvReduce::balanced_tail),
                       mk_wgmma(128, 256, 64, 3, 1, 2),
                       mk_ws(16, 128, 2, 2, 8, 3),
                       mk_ws(128, 128, 2, 1, 6, 0),
                       mk_pairs(128, 96, 8, 2)};
  for (const Config& c : cs) {
    const nlohmann::json j = config_to_json(c);
    INFO(j.dump());
    const std::string ml = j.at("mainloop");
    CHECK(ml == mainloop_name(c.mainloop));
    CHECK(j.size() == 4);  // mainloop, tile_m, tile_n and the mainloop's object
    REQUIRE(j.contains(ml));
    CHECK(same_config(config_from_json(j), c));
    // the variant name spells the mainloop, the tile and every field of its object, in order
    const std::string name = variant_name(p, c, parse_arch("sm_90a"));
    CHECK(name.find("__" + ml + "_m" + std::to_string(c.tile_m) + "_n" + std::to_string(c.tile_n) + "_") !=
          std::string::npos);
  }
  CHECK(config_to_json(cs[1]).at("gemv") == nlohmann::json{{"warps_k", 7},
                                                           {"warps_n", 1},
                                                           {"load", "bulk_rows"},
                                                           {"prefetch", 2},
                                                           {"reduce", "cluster"},
                                                           {"cluster", 4}});
  CHECK(config_to_json(cs[5]).at("wgmma_ws") ==
        nlohmann::json{{"consumers", 2}, {"k_groups", 1}, {"stages", 6}, {"split", "stream_k"}, {"split_k", 1}});
  // A config stored by schema 1 (flat fields, their meaning depending on the mainloop) names the migration.
  const auto old = nlohmann::json::parse(
      R"({"mainloop":"gemv","tile_m":8,"tile_n":16,"tile_k":128,"warps_m":4,"warps_n":1,"stages":2,"split_k":0,"prefetch":1,"cluster_m":1})");
  CHECK_THROWS_WITH(config_from_json(old), Catch::Contains("schema 1") && Catch::Contains("migrate"));
  auto missing = config_to_json(cs[4]);
  missing["wgmma_ws"].erase("k_groups");
  CHECK_THROWS_WITH(config_from_json(missing), Catch::Contains("k_groups"));
  auto bad_split = config_to_json(cs[4]);
  bad_split["wgmma_ws"]["split"] = "split_k_0";
  CHECK_THROWS_WITH(config_from_json(bad_split), Catch::Contains("'wgmma_ws.split': unknown value 'split_k_0'"));
}

TEST_CASE("quant weight formats: element x layout, the public identifiers unchanged", "[generator][qkv]") {
  for (int i = 0; i < quant::kFormatCount; ++i) {
    const auto f = quant::Format(i);
    INFO(format_tag(f));
    const quant::WeightFormat w = quant::weight_format(f);
    CHECK(quant::format_of(w) == f);
    CHECK(int(w.element) == int(quant::format_element(f)));
    CHECK((w.layout == quant::Layout::k_blocked) == quant::format_k_blocked(f));
    CHECK((std::string(format_tag(f)).find("_kb") != std::string::npos) == (w.layout == quant::Layout::k_blocked));
  }
  CHECK(quant::format_of({quant::Element::int4, quant::Layout::k_blocked}) == quant::Format::int4_kb128);
  CHECK(quant::format_of({quant::Element::nvfp4, quant::Layout::row_major}) == quant::Format::nvfp4);
}
