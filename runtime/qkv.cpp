#include "runtime/qkv.h"

#include <array>
#include <cstring>
#include <mutex>

#include "cuda/driver.h"
#include "quant/quant.h"  // format_packed_k_blocked
#include "runtime/tma.h"

namespace kt {
namespace qkv {
namespace {

/// A 2-D map over `rows` rows of `inner` elements (elem_bytes 2 or 1) with `row_bytes` between rows; box {box_inner,
/// box_rows}; swizzle 128 B (16-bit operands) or none (packed bytes).
TmaDescriptor encode_2d(const void* base, int elem_bytes, long long inner, long long rows, long long row_bytes,
                        int box_inner, int box_rows, bool swizzle128) {
  const cuuint64_t dims[2] = {cuuint64_t(inner), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(row_bytes)};
  const cuuint32_t box[2] = {cuuint32_t(box_inner), cuuint32_t(box_rows)};
  return encode_tiled(base, elem_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, dims,
                      strides, box, swizzle128, "cuTensorMapEncodeTiled");
}

/// The weight of gemv tma as a 5-D byte tensor (qkv_gemv_tma in qkv_gemv.cuh): {row bytes, 8 rows g, 2 halves h,
/// head_dim / 16 tiles, heads}, strides {1 row, head_dim / 2 rows, 8 rows, head_dim rows}, box {64, 8, 2, 1, 1}: the 16
/// RoPE-paired rows (g, g + head_dim / 2) of one m16 tile for one 64-byte warp step.
TmaDescriptor encode_gemv_rows(const void* base, long long row_bytes, int head_dim, int heads) {
  const cuuint64_t dims[5] = {cuuint64_t(row_bytes), 8, 2, cuuint64_t(head_dim / 16), cuuint64_t(heads)};
  const cuuint64_t strides[4] = {cuuint64_t(row_bytes), cuuint64_t(row_bytes * (head_dim / 2)),
                                 cuuint64_t(row_bytes * 8), cuuint64_t(row_bytes * head_dim)};
  const cuuint32_t box[5] = {64, 8, 2, 1, 1};
  return encode_tiled(base, CU_TENSOR_MAP_DATA_TYPE_UINT8, 5, dims, strides, box, false,
                      "cuTensorMapEncodeTiled (gemv rows)");
}

/// The K-blocked packed weight of gemv tma ([K bytes / 64][N][64 bytes], quant_format.h) as a 5-D byte tensor {64
/// bytes, 8 rows g, head_dim / 16 tiles, 2 heads halves (2 head + h), K bytes / 64 blocks}, strides {1 row, 8 rows,
/// head_dim / 2 rows, 1 block} (a row is 64 bytes within a block of N rows), box {64, 8, 1, 2, 1}: the same 16 RoPE-paired
/// rows per 64-byte warp step as encode_gemv_rows, each half one contiguous 512-byte run (QkvParams::w_k_blocked).
TmaDescriptor encode_gemv_blocks(const void* base, long long row_bytes, int head_dim, int heads) {
  const long long n = (long long)heads * head_dim;
  const cuuint64_t dims[5] = {64, 8, cuuint64_t(head_dim / 16), cuuint64_t(2 * heads), cuuint64_t(row_bytes / 64)};
  const cuuint64_t strides[4] = {64, 512, cuuint64_t(64 * (head_dim / 2)), cuuint64_t(64 * n)};
  const cuuint32_t box[5] = {64, 8, 1, 2, 1};
  return encode_tiled(base, CU_TENSOR_MAP_DATA_TYPE_UINT8, 5, dims, strides, box, false,
                      "cuTensorMapEncodeTiled (gemv K blocks)");
}

/// X of gemv tma_x (qkv_gemv_tma_x in qkv_gemv.cuh) as a 3-D tensor of 16-bit elements {64, K / 64, M}, strides
/// {128 bytes, x_row_bytes}, box {64, step_k / 64, tile_m} (one warp step of K for a block's tokens), 128-byte swizzle;
/// tokens past M read as zeros. K must be a multiple of 64 (check_params).
TmaDescriptor encode_gemv_x(const void* x, long long k, long long m, long long x_row_bytes, int step_k, int tile_m) {
  const cuuint64_t dims[3] = {64, cuuint64_t(k / 64), cuuint64_t(m)};
  const cuuint64_t strides[2] = {128, cuuint64_t(x_row_bytes)};
  const cuuint32_t box[3] = {64, cuuint32_t(step_k / 64), cuuint32_t(tile_m)};
  return encode_tiled(x, CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, dims, strides, box, true,
                      "cuTensorMapEncodeTiled (gemv X)");
}

/// The K-blocked packed weight of wgmma_ws as a 3-D byte tensor {64 bytes, N rows, K bytes / 64 blocks}, strides {64,
/// 64 N}, box {box_bytes (ws_w_row_bytes), box_rows, 1} (QkvParams::w_k_blocked).
TmaDescriptor encode_ws_blocks(const void* base, long long row_bytes, long long n, int box_bytes, int box_rows) {
  const cuuint64_t dims[3] = {64, cuuint64_t(n), cuuint64_t(row_bytes / 64)};
  const cuuint64_t strides[2] = {64, cuuint64_t(64 * n)};
  const cuuint32_t box[3] = {cuuint32_t(box_bytes), cuuint32_t(box_rows), 1};
  return encode_tiled(base, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, dims, strides, box, false,
                      "cuTensorMapEncodeTiled (K blocks)");
}

/// Byte strides of a 16-bit [N, K] weight seen as {64 elements of a K step, row, K step}: between rows and between K
/// steps. Row-major (fp16 / bf16): {2 K, 128}; K-blocked ([K / 64][N][64], fp16_kb64 / bf16_kb64): {128, 128 N}.
struct Wide16Strides {
  long long row, step;
};
Wide16Strides wide16_strides(quant::Format f, long long k, long long n) {
  return quant::format_k_blocked(f) ? Wide16Strides{128, 128 * n} : Wide16Strides{2 * k, 128};
}

/// The 16-bit weight of wgmma_ws as a 3-D tensor {64, N rows, K / 64 steps} (strides: wide16_strides), box {64,
/// tile_n, 1}, 128-byte swizzle: one K step of tile_n rows.
TmaDescriptor encode_wide_rows(const void* base, quant::Format f, long long k, long long n, int tile_n) {
  const Wide16Strides s = wide16_strides(f, k, n);
  const cuuint64_t dims[3] = {64, cuuint64_t(n), cuuint64_t(k / 64)};
  const cuuint64_t strides[2] = {cuuint64_t(s.row), cuuint64_t(s.step)};
  const cuuint32_t box[3] = {64, cuuint32_t(tile_n), 1};
  return encode_tiled(base, CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, dims, strides, box, true,
                      "cuTensorMapEncodeTiled (wide rows)");
}

/// The 16-bit weight of wgmma_pairs as a 5-D tensor (qkv_wgmma_pairs.cuh) {64, head_dim / 2 pairs i, 2 halves, heads,
/// K / 64 steps}, strides {1 row, head_dim / 2 rows, head_dim rows, 1 step} (wide16_strides), box {64, box_pairs, 2,
/// box_heads, 1}: rows i .. i + box_pairs - 1 of both halves of box_heads heads for one 64-wide K step (a whole feature
/// tile), 128-byte swizzle; heads past the last read as zeros.
TmaDescriptor encode_pair_rows(const void* base, quant::Format f, long long k, int head_dim, int heads, int box_pairs,
                               int box_heads) {
  const Wide16Strides s = wide16_strides(f, k, (long long)heads * head_dim);
  const cuuint64_t dims[5] = {64, cuuint64_t(head_dim / 2), 2, cuuint64_t(heads), cuuint64_t(k / 64)};
  const cuuint64_t strides[4] = {cuuint64_t(s.row), cuuint64_t(s.row * (head_dim / 2)), cuuint64_t(s.row * head_dim),
                                 cuuint64_t(s.step)};
  const cuuint32_t box[5] = {64, cuuint32_t(box_pairs), 2, cuuint32_t(box_heads), 1};
  return encode_tiled(base, CU_TENSOR_MAP_DATA_TYPE_UINT16, 5, dims, strides, box, true,
                      "cuTensorMapEncodeTiled (pair rows)");
}

/// The tensor maps of a wgmma_ws launch (and of gemv tma_x) depend on the pointers, M, K, N, the X row stride and the
/// tile shape; gemv tma has only the weight's map (the weight pointer, K, N, head_dim), so new activation buffers or
/// token counts reuse it. The last 64 encodings are kept (the tuner rotates over up to about 20 weight copies), so repeated launches
/// encode nothing.
struct MapKey {
  const void* x;
  const void* w;
  long long x_row_stride;
  int m, k, n, format, tile_m, tile_n, mainloop, head_dim;
  bool operator==(const MapKey& o) const { return std::memcmp(this, &o, sizeof(MapKey)) == 0; }
};

WsParams ws_params(const Problem& problem, const Config& c, const QkvParams& a) {
  MapKey key;
  std::memset(&key, 0, sizeof key);                                                   // padding compares equal
  const bool x_map = c.mainloop != Mainloop::gemv || c.gemv.load == GemvLoad::tma_x;  // gemv tma: the weight's map only
  key.x = x_map ? a.x : nullptr;
  key.w = a.w_data;
  key.x_row_stride = x_map ? a.x_row_stride : 0;
  key.m = x_map ? a.m : 0;
  key.k = a.k_dim;
  key.n = problem.n();
  key.format = int(problem.format);
  key.tile_m = x_map ? c.tile_m : 0;
  key.tile_n = x_map ? c.tile_n : 0;
  key.mainloop = int(c.mainloop);
  key.head_dim = problem.head_dim;
  struct Entry {
    MapKey key;
    TmaDescriptor x_map, w_map;
  };
  static std::mutex mu;
  static std::array<Entry, 64> cache;
  static size_t next = 0, used = 0;
  WsParams w;
  w.p = a;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < used; ++i)
      if (cache[i].key == key) {
        w.x_map = cache[i].x_map;
        w.w_map = cache[i].w_map;
        return w;
      }
  }
  const int bits = quant::format_bits(problem.format);
  const bool packed_kb = quant::format_packed_k_blocked(problem.format);
  if (c.mainloop == Mainloop::gemv) {  // tma: the weight's map only; tma_x: X's too
    if (x_map) w.x_map = encode_gemv_x(a.x, a.k_dim, a.m, a.x_row_stride * 2, gemv_step_k(problem.format), c.tile_m);
    else std::memset(&w.x_map, 0, sizeof w.x_map);
    w.w_map = packed_kb ? encode_gemv_blocks(a.w_data, (long long)a.k_dim * bits / 8, problem.head_dim,
                                             problem.n() / problem.head_dim)
                        : encode_gemv_rows(a.w_data, (long long)a.k_dim * bits / 8, problem.head_dim,
                                           problem.n() / problem.head_dim);
  } else {
    w.x_map = encode_2d(a.x, 2, a.k_dim, a.m, a.x_row_stride * 2, 64, c.tile_m, true);
    w.w_map = c.mainloop == Mainloop::wgmma_pairs
                  ? encode_pair_rows(a.w_data, problem.format, a.k_dim, problem.head_dim,
                                     problem.n() / problem.head_dim, wp_box_pairs(c), wp_box_heads(c))
              : bits == 16 ? encode_wide_rows(a.w_data, problem.format, a.k_dim, problem.n(), c.tile_n)
              : packed_kb  ? encode_ws_blocks(a.w_data, (long long)a.k_dim * bits / 8, problem.n(),
                                              ws_w_row_bytes(problem.format), c.tile_n)
                           : encode_2d(a.w_data, 1, (long long)a.k_dim * bits / 8, problem.n(),
                                       (long long)a.k_dim * bits / 8, ws_w_row_bytes(problem.format), c.tile_n, false);
  }
  std::lock_guard<std::mutex> lock(mu);
  cache[next] = Entry{key, w.x_map, w.w_map};
  next = (next + 1) % cache.size();
  used = used < cache.size() ? used + 1 : used;
  return w;
}

}  // namespace

void launch(const LoadedKernel& kernel, const Problem& problem, const Config& config, const QkvParams& params,
            CUstream stream) {
  check_params(problem, config, params);
  const int sm_count = needs_sm_count(config) ? cuda::current_sm_count() : 0;  // stream-K, gemv's balanced tail
  const LaunchDims d = launch_dims(problem, config, sm_count);
  QkvParams a = params;
  a.w_evict_first = weight_evict_first(problem, config) ? 1 : 0;
  a.w_k_blocked = quant::format_packed_k_blocked(problem.format) ? 1 : 0;
  a.gemv_full = a.gemv_split = 0;
  if (config.mainloop == Mainloop::gemv && gemv_balanced(config)) {
    const GemvBalance b = gemv_balance_of(problem, config, sm_count);
    a.gemv_full = b.full;
    a.gemv_split = b.split;
  }
  if (config.mainloop == Mainloop::wgmma_ws || config.mainloop == Mainloop::wgmma_pairs ||
      (config.mainloop == Mainloop::gemv && gemv_tma(config))) {
    const WsParams w = ws_params(problem, config, a);
    kernel.launch(d.grid_x, d.grid_y, d.grid_z, d.block_x, d.smem_bytes, stream, &w, d.cluster_y);
    return;
  }
  kernel.launch(d.grid_x, d.grid_y, d.grid_z, d.block_x, d.smem_bytes, stream, &a);
}

}  // namespace qkv
}  // namespace kt
