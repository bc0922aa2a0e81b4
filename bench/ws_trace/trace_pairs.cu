// Timeline experiment for the qkv_wgmma_pairs kernel (fp16 weights and activations; not part of the build; NOTES.md,
// qkv_proj 25). Compiles one variant with KT_WP_TRACE_ON, so thread 0 of every block records %globaltimer at entry
// (0), first slot full (1), mainloop end (2), epilogue staged (3), end (4), after the block-wide barrier (6), and the
// producer thread after issuing the first ring (5); plus the SM id (7). Launches it on the Qwen2.5-7B projection
// shape (28 / 4 heads of 128, bias, RoPE at positions 3 i + 17) for M tokens and K (argv[1], argv[2]), the weight
// rotated over 20 copies (cold L2). No correctness check (the [gpu] tests do that) but an output checksum, so two
// builds of one variant can be compared. Prints, for 3 traced launches (each the second of two back to back),
// percentiles of each point over blocks (us from the first block's entry), then the time per launch in a stream, in
// a CUDA graph, and do_bench-style after an L2 flush (trace_common.h flushed_time: KT_TRACE_FLUSH=read flushes with
// reads, leaving the L2 clean; the default memset leaves it dirty, as do_bench does). KT_TRACE_KB=1 / 2 / 3 lays the
// weight out K-blocked (fp16_kb64) or in one of the row-blocked layouts measured against it (trace_common.h).
// Build: bench/ws_trace/build_pairs.sh TILE_M TILE_N STAGES
#define KT_WP_TRACE_ON
__device__ unsigned long long kt_wp_trace[2048 * 16];
#include "qkv_proj/qkv_wgmma_pairs.cuh"
#include "trace_common.h"
#include <cuda.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
using namespace kt;
using namespace kt::qkv;
#define K_ kt::qkv::qkv_wgmma_pairs<kt::DType::f16, 0, 128, true, true, KTM, KTN, KS>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

static bool encode_x(TmaDescriptor* d, const void* base, long long k, long long rows, int box_rows) {
  const cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(rows)}, strides[1] = {cuuint64_t(k * 2)};
  const cuuint32_t box[2] = {64u, cuuint32_t(box_rows)}, es[2] = {1, 1};
  return cuTensorMapEncodeTiled(reinterpret_cast<CUtensorMap*>(d), CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, const_cast<void*>(base), dims,
                                strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
// As runtime/qkv.cpp encode_pair_rows: 5-D {64, D/2, 2, heads, K/64} with the strides of the KT_TRACE_KB layout
// (trace_common.h; layouts 2 and 3 need a half-head within one row block).
static bool encode_w(TmaDescriptor* d, const void* base, long long k, int head_dim, int heads, int box_pairs, int box_heads, int layout) {
  const long long n = (long long)heads * head_dim;
  const cuuint64_t dims[5] = {64, cuuint64_t(head_dim / 2), 2, cuuint64_t(heads), cuuint64_t(k / 64)};
  const cuuint64_t strides[4] = {cuuint64_t(trace::wide_row_span(layout, n, k, 1)), cuuint64_t(trace::wide_row_span(layout, n, k, head_dim / 2)),
                                 cuuint64_t(trace::wide_row_span(layout, n, k, head_dim)), cuuint64_t(trace::wide_step_span(layout, n))};
  const cuuint32_t box[5] = {64, cuuint32_t(box_pairs), 2, cuuint32_t(box_heads), 1}, es[5] = {1, 1, 1, 1, 1};
  return cuTensorMapEncodeTiled(reinterpret_cast<CUtensorMap*>(d), CU_TENSOR_MAP_DATA_TYPE_UINT16, 5, const_cast<void*>(base), dims,
                                strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

int main(int argc, char** argv) {
  const int M = argc > 1 ? atoi(argv[1]) : 256, K = argc > 2 ? atoi(argv[2]) : 3584, Hq = 28, Hkv = 4, D = 128;
  const int heads = Hq + 2 * Hkv, N = heads * D;
  constexpr Config C{KTM, KTN, 64, KTM / 16, 1, KS, 1, 1, kMainloopWgmmaPairs};
  const int hn = wp_box_heads(C), pb = wp_box_pairs(C);
  const int gx = D / 2 / pb * ((heads + hn - 1) / hn);
  const dim3 grid(gx, (M + KTM - 1) / KTM);
  const int nblocks = int(grid.x * grid.y);
  const size_t wbytes = size_t(N) * K * 2;
  const int copies = 20;
  std::vector<unsigned short> hw(wbytes / 2);
  for (size_t i = 0; i < hw.size(); ++i) hw[i] = 0x2000 + (unsigned short)((i * 2654435761u >> 13) & 0x3ff);
  // KT_TRACE_KB: the same weight in another 16-bit layout (trace_common.h wide_layout), so the checksum must not change.
  const int kb = trace::wide_layout();
  trace::permute_wide(hw, N, K, kb);
  unsigned char* dw; CK(cudaMalloc(&dw, wbytes * copies));
  for (int c = 0; c < copies; ++c) CK(cudaMemcpy(dw + c * wbytes, hw.data(), wbytes, cudaMemcpyHostToDevice));
  std::vector<unsigned short> hx(size_t(M) * K), hb(N, 0x2000);
  for (size_t i = 0; i < hx.size(); ++i) hx[i] = 0x3400 + (unsigned short)((i * 40503u >> 7) & 0x3ff);
  unsigned short *dx, *db, *dq, *dk, *dv; int* dp;
  CK(cudaMalloc(&dx, hx.size() * 2)); CK(cudaMemcpy(dx, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&db, N * 2)); CK(cudaMemcpy(db, hb.data(), N * 2, cudaMemcpyHostToDevice));
  std::vector<int> hp(M);
  for (int i = 0; i < M; ++i) hp[i] = 3 * i + 17;
  CK(cudaMalloc(&dp, M * 4)); CK(cudaMemcpy(dp, hp.data(), M * 4, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&dq, size_t(M) * Hq * D * 2));
  CK(cudaMalloc(&dk, size_t(M) * Hkv * D * 2)); CK(cudaMalloc(&dv, size_t(M) * Hkv * D * 2));
  std::vector<WsParams> wp(copies);
  for (int c = 0; c < copies; ++c) {
    WsParams& w = wp[c];
    w = WsParams{};
    QkvParams& p = w.p;
    p.x = dx; p.w_data = dw + c * wbytes; p.bias = db; p.positions = dp; p.q = dq; p.k = dk; p.v = dv;
    p.x_row_stride = K; p.q_row_stride = Hq * D; p.k_row_stride = Hkv * D; p.v_row_stride = Hkv * D;
    p.m = M; p.k_dim = K; p.num_heads = Hq; p.num_kv_heads = Hkv; p.tensor_scale = 1.f; p.rope_log2_theta = std::log2(1e6);
    p.w_evict_first = trace::evict_first();
    if (!encode_x(&w.x_map, dx, K, M, KTM) || !encode_w(&w.w_map, p.w_data, K, D, heads, pb, hn, kb)) { printf("cuTensorMapEncodeTiled failed\n"); return 1; }
  }
  const int smem = wp_smem_bytes(C);
  CK(cudaFuncSetAttribute(K_, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int block = threads(C);
  float stream_us = 0.f, graph_us = 0.f;  // (the checksum: outputs of launch 99, copy 99 % copies)
  // KT_TRACE_CLUSTER=cx,cy launches with thread-block clusters of cx x cy (placement only: the kernel does not use them).
  // Unlike the runtime (launch_dims), the grid is not rounded up to whole clusters: cx and cy must divide it.
  unsigned cx = 1, cy = 1;
  if (const char* e = std::getenv("KT_TRACE_CLUSTER")) sscanf(e, "%u,%u", &cx, &cy);
  auto launch = [&](const WsParams& w, cudaStream_t s) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = dim3(block), cfg.dynamicSmemBytes = smem, cfg.stream = s;
    cudaLaunchAttribute a[1];
    a[0].id = cudaLaunchAttributeClusterDimension;
    a[0].val.clusterDim.x = cx, a[0].val.clusterDim.y = cy, a[0].val.clusterDim.z = 1;
    cfg.attrs = a, cfg.numAttrs = cx * cy > 1 ? 1 : 0;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, K_, w);
    if (e != cudaSuccess) printf("launch (cluster %ux%u): %s\n", cx, cy, cudaGetErrorString(e));
  };
  if (!trace::warm_check_time([&](int i, cudaStream_t s) { launch(wp[i % copies], s); }, dq, dk, dv,
                              size_t(M) * Hq * D, size_t(M) * Hkv * D, stream_us, graph_us))
    return 1;
  std::vector<unsigned long long> tr(size_t(nblocks) * 16);
  const char* names[7] = {"entry", "ring issued", "syncthreads", "first full", "mainloop end", "staged", "end"};
  const int kIdx[7] = {0, 5, 6, 1, 2, 3, 4};
  for (int rep = 0; rep < 3; ++rep) {
    launch(wp[(rep + 7) % copies], 0);
    CK(cudaMemcpyToSymbol(kt_wp_trace, std::vector<unsigned long long>(tr.size(), 0).data(), tr.size() * 8));
    launch(wp[(rep + 3) % copies], 0);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpyFromSymbol(tr.data(), kt_wp_trace, tr.size() * 8));
    printf("rep %d:", rep);
    trace::print_trace(tr, nblocks, names, kIdx, 7, 7);
  }
  if (std::getenv("KT_TRACE_DUMP")) {  // the last traced launch, one row per block: us from the first block's entry
    unsigned long long t0 = ~0ull;
    for (int b = 0; b < nblocks; ++b) t0 = std::min(t0, tr[size_t(b) * 16]);
    printf("block bx by smid entry first_full mainloop_end staged end\n");
    for (int b = 0; b < nblocks; ++b) {
      const unsigned long long* r = &tr[size_t(b) * 16];
      auto us = [&](int i) { return r[i] >= t0 ? (r[i] - t0) / 1000.0 : -1.0; };
      printf("%d %d %d %llu %.3f %.3f %.3f %.3f %.3f\n", b, b % int(grid.x), b / int(grid.x), r[7], us(0), us(1), us(2), us(3),
             us(4));
    }
  }
  float flush_med = 0.f, flush_p80 = 0.f;
  if (!trace::flushed_time([&](int i, cudaStream_t st) { launch(wp[i % copies], st); }, flush_med, flush_p80)) return 1;
  printf("%s M=%d K=%d grid %dx%d, %d threads, smem %d: stream batch %.2f us, graph %.2f us per launch, flushed %.2f (p80 %.2f)\n",
         argv[0], M, K, grid.x, grid.y, block, smem, stream_us, graph_us, flush_med, flush_p80);
  return 0;
}
