#include "runtime/attention.h"

#include "cuda/driver.h"
#include "runtime/tma.h"

namespace kt {
namespace attn {
namespace {

/// Q, K, V or O as a 4-D tensor map {head_dim, seqlen, heads, batch} of 16-bit elements, box {64, box_rows, 1, 1},
/// 128-byte swizzle (FwdTmaParams; flash_fwd_ws.cuh).
TmaDescriptor encode_4d(const void* base, int head_dim, int seqlen, int heads, int batch, long long row_stride,
                        long long head_stride, long long batch_stride, int box_rows, const char* what) {
  const cuuint64_t dims[4] = {cuuint64_t(head_dim), cuuint64_t(seqlen), cuuint64_t(heads), cuuint64_t(batch)};
  const cuuint64_t strides[3] = {cuuint64_t(row_stride * 2), cuuint64_t(head_stride * 2), cuuint64_t(batch_stride * 2)};
  const cuuint32_t box[4] = {64, cuuint32_t(box_rows), 1, 1};
  return encode_tiled(base, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, dims, strides, box, true, what);
}

/// Q or O of a pack_gqa config as {head_dim, heads, seqlen, batch}, box {64, group, 64 / group, 1}: one box is
/// ws_packed_positions(group) positions of a group's heads, a position's heads in consecutive rows (FwdTmaParams).
TmaDescriptor encode_packed(const void* base, int head_dim, int seqlen, int heads, int batch, int group,
                            long long row_stride, long long head_stride, long long batch_stride, const char* what) {
  const cuuint64_t dims[4] = {cuuint64_t(head_dim), cuuint64_t(heads), cuuint64_t(seqlen), cuuint64_t(batch)};
  const cuuint64_t strides[3] = {cuuint64_t(head_stride * 2), cuuint64_t(row_stride * 2), cuuint64_t(batch_stride * 2)};
  const cuuint32_t box[4] = {64, cuuint32_t(group), cuuint32_t(ws_packed_positions(group)), 1};
  return encode_tiled(base, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, dims, strides, box, true, what);
}

}  // namespace

void launch(const LoadedKernel& kernel, const Problem& problem, const Config& config, const FwdParams& params,
            CUstream stream) {
  check_params(problem, params);
  const LaunchDims d = launch_dims(problem, config, config.persistent ? cuda::current_sm_count() : 0);
  if (config.mainloop != kWgmmaWs) {
    kernel.launch(d.grid_x, d.grid_y, d.grid_z, d.block_x, d.smem_bytes, stream, &params);
    return;
  }
  const Problem& p = problem;
  FwdTmaParams tp{};
  tp.p = params;
  // Q and O: [64 x 64] boxes of one head, or with pack_gqa boxes of a whole GQA group.
  auto map_rows = [&](const void* base, long long row_stride, long long head_stride, long long batch_stride,
                      const char* what) {
    return config.pack_gqa == 1
               ? encode_packed(base, p.head_dim, p.seqlen_q, p.num_heads, p.batch, p.num_heads / p.num_kv_heads,
                               row_stride, head_stride, batch_stride, what)
               : encode_4d(base, p.head_dim, p.seqlen_q, p.num_heads, p.batch, row_stride, head_stride, batch_stride,
                           64, what);
  };
  tp.q_map = map_rows(params.q, params.q_row_stride, params.q_head_stride, params.q_batch_stride,
                      "cuTensorMapEncodeTiled (attention Q)");
  tp.k_map =
      encode_4d(params.k, p.head_dim, p.seqlen_k, p.num_kv_heads, p.batch, params.k_row_stride, params.k_head_stride,
                params.k_batch_stride, config.tile_n, "cuTensorMapEncodeTiled (attention K)");
  tp.v_map =
      encode_4d(params.v, p.head_dim, p.seqlen_k, p.num_kv_heads, p.batch, params.v_row_stride, params.v_head_stride,
                params.v_batch_stride, config.tile_n, "cuTensorMapEncodeTiled (attention V)");
  tp.o_map = map_rows(params.o, params.o_row_stride, params.o_head_stride, params.o_batch_stride,
                      "cuTensorMapEncodeTiled (attention O)");
  kernel.launch(d.grid_x, d.grid_y, d.grid_z, d.block_x, d.smem_bytes, stream, &tp);
}

}  // namespace attn
}  // namespace kt
