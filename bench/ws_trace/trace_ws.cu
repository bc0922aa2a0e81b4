// Timeline experiment for the qkv_wgmma_ws kernel with fp16, int8, int4 or nf4 weights (KFMT; not part of the build;
// NOTES.md, qkv_proj 17).
//
// Compiles one wgmma_ws variant with KT_WS_TRACE_ON, so consumer thread 0 of every block records %globaltimer at
// entry (0), first slot full (1), last mainloop end (2), last partial counted (3, stream-K), last reduction end (4;
// split-K clusters: rank 0's partials added), the output tile in shared memory (9), finish_tile's table ready (10),
// its first batch of rows done (11) and its end (12), and end (5); the producer thread its entry (13), barriers
// initialized (14), first copy issued (8) and first ring of copies issued (15); plus the SM id (6) and ring steps
// (7); positions are 3 i + 17, so RoPE does real work. KT_TRACE_FLAGS="-DKROPE=false" builds without RoPE.
// Launches it on the Qwen2.5-7B projection shape (28 / 4 heads of 128, bias, RoPE) for M tokens and K (argv[1],
// argv[2]). fp16 activations and KFMT weights (fp16: arbitrary finite values; int8 / int4 / nf4: arbitrary codes,
// constant scales) rotated over 20 copies (cold L2); no correctness check here (the [gpu] tests do that), but a
// checksum of the outputs, so that two builds of one variant (an experiment against its base) can be compared. Prints, for
// 3 traced launches (each the second of two back to back), percentiles of each point over blocks (us from the first
// block's entry) and the blocks per SM; then the batch time per launch in a stream, in a CUDA graph and do_bench-style
// after an L2 flush (trace_common.h flushed_time, KT_TRACE_FLUSH). 16-bit weights: KT_TRACE_KB=1 lays them out
// K-blocked (fp16_kb64).
// Build: bench/ws_trace/build.sh TILE_M TILE_N CONSUMERS STAGES STREAMK(0|1) [SPLIT_K]
#define KT_WS_TRACE_ON
__device__ unsigned long long kt_ws_trace[1024 * 16];
#define KT_EPI_TRACE(i)                                                    \
  do {                                                                     \
    unsigned long long t_;                                                 \
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                 \
    if (threadIdx.x == 0) kt_ws_trace[blockIdx.x * 16 + (i)] = t_;         \
  } while (0)
#include "qkv_proj/qkv_wgmma_ws.cuh"
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
#ifndef KSPLIT
#define KSPLIT 1
#endif
#ifndef KBIAS  // bias and RoPE in the epilogue (KT_TRACE_FLAGS="-DKROPE=false" leaves RoPE out)
#define KBIAS true
#endif
#ifndef KROPE
#define KROPE true
#endif
#ifndef KDT  // activation dtype: f16 (default) or bf16 (KT_TRACE_FLAGS="-DKDT=bf16"; X keeps the fp16 bits: timing only)
#define KDT f16
#endif
#ifndef KKG  // K groups (Config::warps_n): 2 = two consumer warpgroups per feature warpgroup, alternate K steps
#define KKG 1
#endif
#ifndef KFMT  // weight format (quant::Format): 0 fp16 (default), 2 int8, 3 int4, 4 nf4 (KT_TRACE_FLAGS="-DKFMT=3")
#define KFMT 0
#endif
#if KSK == 0 && KSPLIT > 1  // split-K over a thread-block cluster of KSPLIT blocks per tile
#define K_ kt::qkv::qkv_wgmma_ws_cluster<kt::DType::KDT, KFMT, 128, KBIAS, KROPE, KTM, KTN, KC, KS, KSPLIT, KKG>
#else
#define K_ kt::qkv::qkv_wgmma_ws<kt::DType::KDT, KFMT, 128, KBIAS, KROPE, KTM, KTN, KC, KS, KSK == 1, KKG>
#endif
static_assert(KFMT == 0 || KFMT == 2 || KFMT == 3 || KFMT == 4, "trace_ws: KFMT must be 0 (fp16), 2 (int8), 3 (int4) or 4 (nf4)");
constexpr quant::Format kFmt = static_cast<quant::Format>(KFMT);
constexpr int kBits = quant::format_bits(kFmt);
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

// As runtime/qkv.cpp encode_2d: 16-bit elements with the 128-byte swizzle (box {64, box_rows}), or bytes with none
// (packed weights: box {ws_w_row_bytes, box_rows}). X, and the packed weights.
static bool encode(TmaDescriptor* d, const void* base, long long inner, long long rows, int box_rows, bool wide = true) {
  const cuuint64_t dims[2] = {cuuint64_t(inner), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(inner * (wide ? 2 : 1))};
  const cuuint32_t box[2] = {wide ? 64u : cuuint32_t(ws_w_row_bytes(kFmt)), cuuint32_t(box_rows)}, es[2] = {1, 1};
  return cuTensorMapEncodeTiled(reinterpret_cast<CUtensorMap*>(d), wide ? CU_TENSOR_MAP_DATA_TYPE_UINT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8,
                                2, const_cast<void*>(base), dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                wide ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// As runtime/qkv.cpp encode_wide_rows: a 16-bit weight as {64, N rows, K / 64} with the strides of the KT_TRACE_KB
// layout (trace_common.h; 0 or 1: rows evenly spaced), box {64, box_rows, 1}.
static bool encode_wide(TmaDescriptor* d, const void* base, long long k, long long n, int box_rows, int layout) {
  const cuuint64_t dims[3] = {64, cuuint64_t(n), cuuint64_t(k / 64)};
  const cuuint64_t strides[2] = {cuuint64_t(trace::wide_row_span(layout, n, k, 1)), cuuint64_t(trace::wide_step_span(layout, n))};
  const cuuint32_t box[3] = {64, cuuint32_t(box_rows), 1}, es[3] = {1, 1, 1};
  return cuTensorMapEncodeTiled(reinterpret_cast<CUtensorMap*>(d), CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, const_cast<void*>(base), dims,
                                strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

int main(int argc, char** argv) {
  const int M = argc > 1 ? atoi(argv[1]) : 64, K = argc > 2 ? atoi(argv[2]) : 3584, Hq = 28, Hkv = 4, D = 128;
  const int N = (Hq + 2 * Hkv) * D;
  constexpr Config C{KTM, KTN, 64, 4 * KC, KKG, KS, KSK == 1 ? 0 : KSPLIT, 1, kMainloopWgmmaWs};
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const long long tiles = (long long)((M + KTM - 1) / KTM) * ((N + KTN - 1) / KTN);
  const long long units = tiles * (K / 64);
  const int grid = KSK == 1 ? int(std::min<long long>(sms, units)) : int(tiles) * KSPLIT;
  const size_t wbytes = size_t(N) * K * kBits / 8;
  const int copies = 20;
  std::vector<unsigned short> hw(wbytes / 2);  // fp16: small values; packed: arbitrary codes
  for (size_t i = 0; i < hw.size(); ++i)
    hw[i] = kBits == 16 ? 0x2000 + (unsigned short)((i * 2654435761u >> 13) & 0x3ff) : (unsigned short)(i * 2654435761u >> 7);
  // KT_TRACE_KB (16-bit weights): the same weight in another layout (trace_common.h), so the checksum must not change.
  const int layout = kBits == 16 ? trace::wide_layout() : 0;
  if (layout < 0 || layout > 1) { printf("trace_ws: KT_TRACE_KB must be 0 or 1\n"); return 1; }
  trace::permute_wide(hw, N, K, layout);
  unsigned char* dw; CK(cudaMalloc(&dw, wbytes * copies));
  for (int c = 0; c < copies; ++c) CK(cudaMemcpy(dw + c * wbytes, hw.data(), wbytes, cudaMemcpyHostToDevice));
  // Scales (and int4 zero points) as quant_format.h lays them out: int4 fp16 [N][K / 128] + bytes [N][K / 128]; nf4
  // fp32 absmax [N][K / 64]; int8 fp32 [N]. One copy shared by the weight copies (K / 64 of the row's bytes: small beside them).
  void* dsc = nullptr; unsigned char* dz = nullptr;
  if (kFmt == quant::Format::int4) {
    std::vector<unsigned short> hs(size_t(N) * (K / 128), 0x2000);
    std::vector<unsigned char> hz(size_t(N) * (K / 128), 8);
    CK(cudaMalloc(&dsc, hs.size() * 2)); CK(cudaMemcpy(dsc, hs.data(), hs.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&dz, hz.size())); CK(cudaMemcpy(dz, hz.data(), hz.size(), cudaMemcpyHostToDevice));
  } else if (kFmt == quant::Format::nf4 || kFmt == quant::Format::int8) {  // nf4 [N][K / 64], int8 [N] fp32
    std::vector<float> hs(kFmt == quant::Format::int8 ? size_t(N) : size_t(N) * (K / 64), 0.01f);
    CK(cudaMalloc(&dsc, hs.size() * 4)); CK(cudaMemcpy(dsc, hs.data(), hs.size() * 4, cudaMemcpyHostToDevice));
  }
  std::vector<unsigned short> hx(size_t(M) * K, 0x3800), hb(N, 0x2000);
  unsigned short *dx, *db, *dq, *dk, *dv; int* dp; float* dws; unsigned* dcnt;
  CK(cudaMalloc(&dx, hx.size() * 2)); CK(cudaMemcpy(dx, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&db, N * 2)); CK(cudaMemcpy(db, hb.data(), N * 2, cudaMemcpyHostToDevice));
  std::vector<int> hp(M);
  for (int i = 0; i < M; ++i) hp[i] = 3 * i + 17;  // nonzero positions: RoPE does real work
  CK(cudaMalloc(&dp, M * 4)); CK(cudaMemcpy(dp, hp.data(), M * 4, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&dq, size_t(M) * Hq * D * 2)); CK(cudaMalloc(&dk, size_t(M) * Hkv * D * 2)); CK(cudaMalloc(&dv, size_t(M) * Hkv * D * 2));
  CK(cudaMalloc(&dws, size_t(ws_workspace_slots(C, grid)) * KTM * KTN * 4 + 16));
  CK(cudaMalloc(&dcnt, tiles * 4 + 16)); CK(cudaMemset(dcnt, 0, tiles * 4 + 16));
  std::vector<WsParams> wp(copies);
  for (int c = 0; c < copies; ++c) {
    WsParams& w = wp[c];
    w = WsParams{};
    QkvParams& p = w.p;
    p.x = dx; p.w_data = dw + c * wbytes; p.w_scales = dsc; p.w_zeros = dz; p.bias = db; p.positions = dp;
    p.q = dq; p.k = dk; p.v = dv; p.workspace = dws; p.counters = dcnt;
    p.x_row_stride = K; p.q_row_stride = Hq * D; p.k_row_stride = Hkv * D; p.v_row_stride = Hkv * D;
    p.m = M; p.k_dim = K; p.num_heads = Hq; p.num_kv_heads = Hkv; p.tensor_scale = 1.f; p.rope_log2_theta = std::log2(1e6);
    p.w_evict_first = trace::evict_first();
    const bool wmap = kBits == 16 ? encode_wide(&w.w_map, p.w_data, K, N, KTN, layout)
                                  : encode(&w.w_map, p.w_data, (long long)K * kBits / 8, N, KTN, false);
    if (!encode(&w.x_map, dx, K, M, KTM) || !wmap) { printf("cuTensorMapEncodeTiled failed\n"); return 1; }
  }
  const int smem = ws_smem_bytes(C, kFmt);
  CK(cudaFuncSetAttribute(K_, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int block = threads(C);
  float stream_us = 0.f, graph_us = 0.f;  // (the checksum: outputs of launch 99, copy 99 % copies)
  if (!trace::warm_check_time([&](int i, cudaStream_t s) { K_<<<grid, block, smem, s>>>(wp[i % copies]); }, dq, dk, dv,
                              size_t(M) * Hq * D, size_t(M) * Hkv * D, stream_us, graph_us))
    return 1;
  std::vector<unsigned long long> tr(size_t(grid) * 16);
  const char* names[14] = {"entry", "producer entry", "barriers init", "1st copy issued", "ring issued", "first full",
                           "mainloop end", "partial counted", "reduced", "tile in smem", "inv_freq", "batch 0",
                           "finish_tile end", "end"};
  const int kIdx[14] = {0, 13, 14, 8, 15, 1, 2, 3, 4, 9, 10, 11, 12, 5};
  for (int rep = 0; rep < 3; ++rep) {
    K_<<<grid, block, smem>>>(wp[(rep + 7) % copies]);
    CK(cudaMemcpyToSymbol(kt_ws_trace, std::vector<unsigned long long>(tr.size(), 0).data(), tr.size() * 8));
    K_<<<grid, block, smem>>>(wp[(rep + 3) % copies]);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpyFromSymbol(tr.data(), kt_ws_trace, tr.size() * 8));
    printf("rep %d:", rep);
    trace::print_trace(tr, grid, names, kIdx, 14, 6);
  }
  float flush_med = 0.f, flush_p80 = 0.f;
  if (!trace::flushed_time([&](int i, cudaStream_t s) { K_<<<grid, block, smem, s>>>(wp[i % copies]); }, flush_med, flush_p80))
    return 1;
  printf("%s M=%d K=%d grid %d, %d threads, smem %d: stream batch %.2f us, graph %.2f us per launch, flushed %.2f (p80 %.2f)\n",
         argv[0], M, K, grid, block, smem, stream_us, graph_us, flush_med, flush_p80);
  return 0;
}
