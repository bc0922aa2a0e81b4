#include "generator/attention_family.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <tuple>

#include "generator/arch.h"

namespace kt {
namespace attn {
namespace {

const char* dtype_tag(DType d) { return d == DType::f16 ? "fp16" : "bf16"; }

[[noreturn]] void fail(const std::string& msg) { throw ProblemError(std::string(kFamily) + ": " + msg); }

}  // namespace

std::string Problem::key() const {
  std::ostringstream s;
  s << kFamily << '/' << dtype_tag(dtype) << "/b" << batch << "/sq" << seqlen_q << "/sk" << seqlen_k << "/h"
    << num_heads << "/kv" << num_kv_heads << "/d" << head_dim << '/' << (causal ? "causal" : "full");
  return s.str();
}

double Problem::flops() const {
  double pairs = static_cast<double>(seqlen_q) * seqlen_k;
  if (causal) {
    // Visible pairs: row i sees min(seqlen_k, max(0, i + 1 + seqlen_k - seqlen_q)) keys.
    pairs = 0;
    for (long long i = 0; i < seqlen_q; ++i) {
      long long n = i + 1 + static_cast<long long>(seqlen_k) - seqlen_q;
      pairs += static_cast<double>(std::max(0LL, std::min<long long>(seqlen_k, n)));
    }
  }
  return 4.0 * batch * num_heads * pairs * head_dim;
}

void check_problem(const Problem& p) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) fail("unknown dtype (expected fp16 or bf16)");
  if (p.batch < 1) fail("batch must be >= 1, got " + std::to_string(p.batch));
  if (p.seqlen_q < 1) fail("seqlen_q must be >= 1, got " + std::to_string(p.seqlen_q));
  if (p.seqlen_k < 1) fail("seqlen_k must be >= 1, got " + std::to_string(p.seqlen_k));
  if (p.num_heads < 1) fail("num_heads must be >= 1, got " + std::to_string(p.num_heads));
  if (p.num_kv_heads < 1) fail("num_kv_heads must be >= 1, got " + std::to_string(p.num_kv_heads));
  if (p.num_heads % p.num_kv_heads != 0)
    fail("num_heads (" + std::to_string(p.num_heads) + ") must be a multiple of num_kv_heads (" +
         std::to_string(p.num_kv_heads) + ") for GQA/MQA");
  if (p.head_dim != 64 && p.head_dim != 128)
    fail("head_dim " + std::to_string(p.head_dim) + " is not supported: head_dim must be 64 or 128");
  if (p.num_heads > 65535 || p.batch > 65535 || (p.seqlen_q + 63) / 64 > 65535)
    fail("grid too large: num_heads, batch and seqlen_q / 64 must be <= 65535");
}

std::vector<Config> config_space() {
  std::vector<Config> out;
  for (int tile_m : {64, 128, 256})
    for (int tile_n : {32, 64, 128})
      for (int warps : {4, 8})
        for (int stages : {1, 2, 3})
          for (int raster : {0, 1}) out.push_back(Config{tile_m, tile_n, warps, stages, kMmaSync, raster});
  // The Hopper mainloop: one, two or three consumer warpgroups (tile_m 64 / 128 / 192), tile_n 64, 128 or 176, 2..4
  // ring slots, both block orders, intra-warpgroup overlap off / on, with several consumers and overlap pingpong off /
  // on, and one block per tile or persistent; then the same with GQA packing (pack_gqa; one block per tile, overlap on:
  // the schedules that win on the short problems packing is for).
  for (int pack_gqa : {0, 1})
    for (int warps : {4, 8, 12})
      for (int tile_n : {64, 128, 176})
        for (int stages : {2, 3, 4})
          for (int raster : {0, 1})
            for (int overlap : {0, 1})
              for (int pingpong : {0, 1})
                for (int persistent : {0, 1})
                  if ((pingpong == 0 || (warps > 4 && overlap == 1)) &&
                      (pack_gqa == 0 || (persistent == 0 && overlap == 1)))
                    out.push_back(Config{16 * warps, tile_n, warps, stages, kWgmmaWs, raster, overlap, pingpong,
                                         persistent, pack_gqa});
  return out;
}

namespace {
/// Position of v in `order` (values not listed rank after it).
int rank_in(int v, std::initializer_list<int> order) {
  int i = 0;
  for (int o : order) {
    if (o == v) return i;
    ++i;
  }
  return i;
}
}  // namespace

namespace {
/// The m-blocks of a launch: ceil(seqlen_q / tile_positions), the grid's x (raster 0) or z (raster 1).
unsigned m_blocks_of(const Problem& p, const Config& c) {
  const int positions = tile_positions(c, p.num_heads / p.num_kv_heads);
  return static_cast<unsigned>((p.seqlen_q + positions - 1) / positions);
}
}  // namespace

const char* problem_reason(const Problem& p, const Config& c) {
  if (const char* why = pack_gqa_reason(p.num_heads, p.num_kv_heads, c)) return why;
  if (c.raster == 1 && m_blocks_of(p, c) > 65535) return "grid too large: raster 1 takes at most 65535 m-blocks";
  return nullptr;
}

std::vector<Config> valid_configs(const Problem& p, ArchId arch) {
  std::vector<Config> out;
  for (const auto& c : config_space())
    if (invalid_reason(p.dtype, p.head_dim, p.causal, c, arch) == nullptr && problem_reason(p, c) == nullptr)
      out.push_back(c);
  // Candidate order (what --max-candidates and the fast strategy keep): the wgmma_ws mainloop first; within it
  // FlashAttention-3's tiles (two consumer warpgroups, 128 query rows, intra-warpgroup overlap; 128 keys when causal,
  // 176 when not, then the other sizes), the shallowest rings first, every block order, pingpong and persistence
  // next to each other: the first 16 on sm_90a; one consumer warpgroup next, then three. When seqlen_q <= 64 (a tile
  // of one head's positions is then mostly empty) the GQA-packed variants come first and one consumer warpgroup
  // before two (default_config's measurements); otherwise packed variants come after the unpacked ones. mma.sync:
  // the 128 x 64 tile of 4 warps with a 2-slot ring first (FlashAttention-2's shape), then growing distance from it.
  const bool causal = p.causal, pack_first = p.seqlen_q <= 64;
  auto key = [causal, pack_first](const Config& c) {
    if (c.mainloop == kWgmmaWs)
      return std::make_tuple(0, pack_first ? 1 - c.pack_gqa : c.pack_gqa,
                             pack_first ? rank_in(c.warps, {4, 8, 12}) : rank_in(c.warps, {8, 4, 12}),
                             rank_in(c.overlap, {1, 0}),
                             causal ? rank_in(c.tile_n, {128, 64, 176}) : rank_in(c.tile_n, {176, 128, 64}), c.stages,
                             rank_in(c.pingpong, {1, 0}) * 4 + c.persistent * 2 + c.raster);
    return std::make_tuple(1, 0, rank_in(c.tile_m, {128, 64, 256}), rank_in(c.tile_n, {64, 128, 32}),
                           rank_in(c.warps, {4, 8}), rank_in(c.stages, {2, 3, 1}), c.raster);
  };
  std::stable_sort(out.begin(), out.end(), [&](const Config& a, const Config& b) { return key(a) < key(b); });
  return out;
}

Config default_config(ArchId arch, const Problem& p) {
  Config c{128, 64, 4, 2, kMmaSync, 0};
  if (arch.sm == 90 && arch.arch_specific) c = Config{128, 128, 8, 2, kWgmmaWs, 1, 1, 1};
  if (arch.sm == 90 && arch.arch_specific && p.seqlen_q <= 64) {  // one consumer, GQA-packed where the group allows
    c = Config{64, 128, 4, 2, kWgmmaWs, 0, 1, 0, 0, 1};
    if (pack_gqa_reason(p.num_heads, p.num_kv_heads, c) != nullptr) c.pack_gqa = 0;
  }
  if (const char* why = invalid_reason(p.dtype, p.head_dim, p.causal, c, arch))
    fail(std::string("no default config for ") + arch_name(arch) + ": " + why);
  return c;
}

std::string variant_name(const Problem& p, const Config& c, ArchId arch) {
  std::ostringstream s;
  s << kFamily << "__" << dtype_tag(p.dtype) << "_d" << p.head_dim << '_' << (p.causal ? "causal" : "full") << "__"
    << (c.mainloop == kWgmmaWs ? "wgmmaws_m" : "mmasync_m") << c.tile_m << "_n" << c.tile_n << "_w" << c.warps << "_s"
    << c.stages << "_r" << c.raster;
  if (c.mainloop == kWgmmaWs) s << "_o" << c.overlap << "_p" << c.pingpong << "_pers" << c.persistent;
  if (c.pack_gqa == 1) s << "_gqa";
  s << "__" << arch_name(arch);
  return s.str();
}

std::string name_expression(const Problem& p, const Config& c) {
  std::ostringstream s;
  if (c.mainloop == kWgmmaWs) {  // flash_fwd_ws<dtype, D, causal, tile_n, consumers, stages, raster, overlap, pingpong,
                                 // persistent, pack_gqa>
    s << "kt::attn::flash_fwd_ws<kt::DType::" << (p.dtype == DType::f16 ? "f16" : "bf16") << ", " << p.head_dim << ", "
      << (p.causal ? "true" : "false") << ", " << c.tile_n << ", " << c.warps / 4 << ", " << c.stages << ", "
      << c.raster << ", " << (c.overlap ? "true" : "false") << ", " << (c.pingpong ? "true" : "false") << ", "
      << (c.persistent ? "true" : "false") << ", " << (c.pack_gqa ? "true" : "false") << ">";
    return s.str();
  }
  s << "kt::attn::flash_fwd<kt::DType::" << (p.dtype == DType::f16 ? "f16" : "bf16") << ", " << p.head_dim << ", "
    << (p.causal ? "true" : "false") << ", " << c.tile_m << ", " << c.tile_n << ", " << c.warps << ", " << c.stages
    << ", " << c.mainloop << ", " << c.raster << ">";
  return s.str();
}

KernelSource kernel_source(const Problem& p, const Config& c, ArchId arch) {
  KernelSource k;
  k.family = kFamily;
  k.variant_name = variant_name(p, c, arch);
  k.name_expression = name_expression(p, c);
  k.source =
      c.mainloop == kWgmmaWs ? "#include \"attention/flash_fwd_ws.cuh\"\n" : "#include \"attention/flash_fwd.cuh\"\n";
  k.arch = arch;
  k.dynamic_smem_bytes = static_cast<unsigned>(smem_bytes(c, p.head_dim));
  return k;
}

LaunchDims launch_dims(const Problem& p, const Config& c, int sm_count) {
  if (const char* why = problem_reason(p, c)) fail(why);
  LaunchDims d;
  const unsigned m_blocks = m_blocks_of(p, c);
  const unsigned heads = static_cast<unsigned>(c.pack_gqa == 1 ? p.num_kv_heads : p.num_heads);
  d.grid_x = c.raster == 0 ? m_blocks : heads;
  d.grid_y = c.raster == 0 ? heads : static_cast<unsigned>(p.batch);
  d.grid_z = c.raster == 0 ? static_cast<unsigned>(p.batch) : m_blocks;
  if (c.persistent == 1) {
    if (sm_count < 1) fail("a persistent attention_prefill config needs the GPU's SM count");
    const unsigned long long tiles = 1ull * m_blocks * heads * unsigned(p.batch);
    d.grid_x = static_cast<unsigned>(std::min<unsigned long long>(tiles, unsigned(sm_count)));
    d.grid_y = d.grid_z = 1;
  }
  d.block_x = static_cast<unsigned>((c.warps + (c.mainloop == kWgmmaWs ? 4 : 0)) * 32);  // + the producer warpgroup
  d.smem_bytes = static_cast<unsigned>(smem_bytes(c, p.head_dim));
  return d;
}

FwdParams contiguous_params(const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse,
                            float softmax_scale) {
  FwdParams a{};
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = o;
  a.lse = lse;
  const long long d = p.head_dim;
  a.q_head_stride = d;
  a.q_row_stride = d * p.num_heads;
  a.q_batch_stride = a.q_row_stride * p.seqlen_q;
  a.o_head_stride = a.q_head_stride;
  a.o_row_stride = a.q_row_stride;
  a.o_batch_stride = a.q_batch_stride;
  a.k_head_stride = d;
  a.k_row_stride = d * p.num_kv_heads;
  a.k_batch_stride = a.k_row_stride * p.seqlen_k;
  a.v_head_stride = a.k_head_stride;
  a.v_row_stride = a.k_row_stride;
  a.v_batch_stride = a.k_batch_stride;
  a.batch = p.batch;
  a.seqlen_q = p.seqlen_q;
  a.seqlen_k = p.seqlen_k;
  a.num_heads = p.num_heads;
  a.num_kv_heads = p.num_kv_heads;
  a.softmax_scale = softmax_scale > 0.f ? softmax_scale : static_cast<float>(1.0 / std::sqrt(double(p.head_dim)));
  a.scale_log2 = static_cast<float>(a.softmax_scale * 1.4426950408889634);
  return a;
}

nlohmann::json problem_to_json(const Problem& p) {
  return {{"dtype", dtype_tag(p.dtype)}, {"batch", p.batch},         {"seqlen_q", p.seqlen_q},
          {"seqlen_k", p.seqlen_k},      {"num_heads", p.num_heads}, {"num_kv_heads", p.num_kv_heads},
          {"head_dim", p.head_dim},      {"causal", p.causal}};
}

namespace {
template <class T>
T field(const nlohmann::json& j, const char* name, const char* what) {
  if (!j.is_object() || !j.contains(name)) fail(std::string(what) + " JSON lacks field '" + name + "'");
  try {
    return j.at(name).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail(std::string(what) + " JSON field '" + name + "' has the wrong type");
  }
}
}  // namespace

Problem problem_from_json(const nlohmann::json& j) {
  Problem p;
  const auto dt = field<std::string>(j, "dtype", "problem");
  if (dt == "fp16") p.dtype = DType::f16;
  else if (dt == "bf16") p.dtype = DType::bf16;
  else fail("problem JSON field 'dtype': unknown dtype '" + dt + "'");
  p.batch = field<int>(j, "batch", "problem");
  p.seqlen_q = field<int>(j, "seqlen_q", "problem");
  p.seqlen_k = field<int>(j, "seqlen_k", "problem");
  p.num_heads = field<int>(j, "num_heads", "problem");
  p.num_kv_heads = field<int>(j, "num_kv_heads", "problem");
  p.head_dim = field<int>(j, "head_dim", "problem");
  p.causal = field<bool>(j, "causal", "problem");
  return p;
}

nlohmann::json config_to_json(const Config& c) {
  return {{"tile_m", c.tile_m},         {"tile_n", c.tile_n},    {"warps", c.warps},     {"stages", c.stages},
          {"mainloop", c.mainloop},     {"raster", c.raster},    {"overlap", c.overlap}, {"pingpong", c.pingpong},
          {"persistent", c.persistent}, {"pack_gqa", c.pack_gqa}};
}

Config config_from_json(const nlohmann::json& j) {
  Config c{};
  c.tile_m = field<int>(j, "tile_m", "config");
  c.tile_n = field<int>(j, "tile_n", "config");
  c.warps = field<int>(j, "warps", "config");
  c.stages = field<int>(j, "stages", "config");
  c.mainloop = field<int>(j, "mainloop", "config");
  c.raster = field<int>(j, "raster", "config");
  // overlap, pingpong and persistent came with the wgmma_ws mainloop: configs stored before it have none (all 0).
  c.overlap = j.contains("overlap") ? field<int>(j, "overlap", "config") : 0;
  c.pingpong = j.contains("pingpong") ? field<int>(j, "pingpong", "config") : 0;
  c.persistent = j.contains("persistent") ? field<int>(j, "persistent", "config") : 0;
  c.pack_gqa = j.contains("pack_gqa") ? field<int>(j, "pack_gqa", "config") : 0;  // added after persistent
  return c;
}

bool same_config(const Config& a, const Config& b) {
  return a.tile_m == b.tile_m && a.tile_n == b.tile_n && a.warps == b.warps && a.stages == b.stages &&
         a.mainloop == b.mainloop && a.raster == b.raster && a.overlap == b.overlap && a.pingpong == b.pingpong &&
         a.persistent == b.persistent && a.pack_gqa == b.pack_gqa;
}

void check_params(const Problem& p, const FwdParams& a) {
  check_problem(p);
  if (a.batch != p.batch || a.seqlen_q != p.seqlen_q || a.seqlen_k != p.seqlen_k || a.num_heads != p.num_heads ||
      a.num_kv_heads != p.num_kv_heads)
    fail("kernel arguments do not match the problem's sizes");
  if (!a.q || !a.k || !a.v || !a.o) fail("q, k, v and o must be non-null device pointers");
  auto aligned = [](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; };
  if (!aligned(a.q) || !aligned(a.k) || !aligned(a.v) || !aligned(a.o)) fail("q, k, v and o must be 16-byte aligned");
  if (a.lse && reinterpret_cast<std::uintptr_t>(a.lse) % 4 != 0) fail("lse must be 4-byte aligned");
  const long long strides[] = {a.q_batch_stride, a.q_row_stride,   a.q_head_stride,  a.k_batch_stride,
                               a.k_row_stride,   a.k_head_stride,  a.v_batch_stride, a.v_row_stride,
                               a.v_head_stride,  a.o_batch_stride, a.o_row_stride,   a.o_head_stride};
  for (long long s : strides)
    if (s % 8 != 0)
      fail("every batch/row/head stride must be a multiple of 8 elements (16-byte loads), got " + std::to_string(s));
  if (!(a.softmax_scale > 0.f) || !std::isfinite(a.softmax_scale)) fail("softmax_scale must be positive and finite");
}

}  // namespace attn
}  // namespace kt
