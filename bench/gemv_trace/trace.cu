// Timeline experiment for the qkv_gemv kernel (not part of the build; NOTES.md, qkv_proj items 6-8).
//
// Compiles one gemv variant with KT_GEMV_TRACE_ON, so each warp records %globaltimer at entry (0), data ready (1),
// mainloop end (2) and end (3), and launches it on the Qwen2.5-7B projection (K 3584, 28 / 4 heads of 128, bias,
// RoPE) for M tokens (argv[1], default 1). Weights are arbitrary non-zero bytes rotated over 20 copies (cold L2); there
// is no correctness check here (the [gpu] tests do that). Prints, for 5 traced launches, the span and percentiles of
// each point over warps (us from the first warp's entry); then the launch time in stream batches, an empty kernel with
// the same grid in a stream and in a CUDA graph, and this kernel in a CUDA graph. The last traced launch is also
// summarized per SM (%smid): SMs grouped by how many blocks ran there, with the p50 / max over those SMs of their last
// loop end (the kernel's end is the slowest SM's).
// Build: bench/gemv_trace/build.sh DT F TILE_M TILE_N WARPS_K WARPS_N PREFETCH STAGES (F: quant::Format as int; for a
// K-blocked packed format pass its row-major twin's F and KT_TRACE_FLAGS=-DKKB=1: stages 2 then reads the weight as
// [K bytes / 64][N][64] through runtime/qkv.cpp's encode_gemv_blocks map). -DKT_PROMO=CU_TENSOR_MAP_L2_PROMOTION_* sets the
// weight map's L2 promotion (default 256B, as runtime/qkv.cpp).
#define KT_GEMV_TRACE_ON
#ifndef KT_PROMO  // the weight map's L2 promotion (runtime/qkv.cpp: 256B)
#define KT_PROMO CU_TENSOR_MAP_L2_PROMOTION_L2_256B
#endif
__device__ unsigned long long kt_gemv_trace[288 * 64 * 16 * 16];
__device__ unsigned kt_gemv_smid[288 * 64 * 16];
#include "qkv_proj/qkv_gemv.cuh"
#include "../ws_trace/trace_common.h"  // flushed_time (do_bench-style), KT_TRACE_EVICT
#include <cstdio>
#include <vector>
#include <algorithm>
#include <map>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <string>
#include <cmath>
#include <cstring>
using namespace kt;
__global__ void empty_kernel(const kt::qkv::QkvParams p) { if (p.m < 0) kt_gemv_trace[threadIdx.x] = 1; }
using namespace kt::qkv;
#ifndef KCS
#define KCS 1
#endif
#ifndef KBAL  // 1: the balanced tail (config split_k 0; gemv_balance), stages 0 / 1 / 2
#define KBAL 0
#endif
#if KCS > 1  // K split over a cluster of KCS blocks (stages 1)
#define K_ kt::qkv::qkv_gemv_cluster<kt::DType::KDT, KF, 128, true, true, KTM, KTN, KWK, KWN, KP, KCS>
#elif KS == 2  // per-step TMA: the kernel takes WsParams with the weight's 5-D map (as runtime/qkv.cpp encodes it)
#include <cuda.h>
#define K_ kt::qkv::qkv_gemv_tma<kt::DType::KDT, KF, 128, true, true, KTM, KTN, KWK, KWN, KP, KBAL>
#else
#define K_ kt::qkv::qkv_gemv<kt::DType::KDT, KF, 128, true, true, KTM, KTN, KWK, KWN, KP, KS, KBAL>
#endif
// Kernel argument for the current weight copy: stages 2 adds that copy's tensor map (maps[copy], encoded in main).
static std::vector<kt::qkv::WsParams> maps;
[[maybe_unused]] static const unsigned char* w0 = nullptr;
[[maybe_unused]] static size_t wcopy_bytes = 1;
#if KS == 2 && KCS == 1
static kt::qkv::WsParams arg_of(const kt::qkv::QkvParams& p) {
  kt::qkv::WsParams w = maps[(static_cast<const unsigned char*>(p.w_data) - w0) / wcopy_bytes];
  w.p = p;
  return w;
}
#else
static const kt::qkv::QkvParams& arg_of(const kt::qkv::QkvParams& p) { return p; }
#endif
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)
int main(int argc, char** argv) {
  const int M = argc > 1 ? atoi(argv[1]) : 1, K = 3584, Hq = 28, Hkv = 4, D = 128, N = (Hq + 2 * Hkv) * D;
  constexpr quant::Format F = static_cast<quant::Format>(KF);
  constexpr Config C{KTM, KTN, gemv_step_k(F), KWK, KWN, KS, KBAL ? 0 : KCS, KP, kMainloopGemv};
  const int bits = quant::format_bits(F);
  const size_t wbytes = size_t(N) * K * bits / 8;
  const int copies = 20;  // rotate weight copies (> 3x L2) for cold-L2 timing
  std::vector<unsigned char> hw(wbytes);
  for (size_t i = 0; i < wbytes; ++i) hw[i] = (unsigned char)(i * 2654435761u >> 13);
  unsigned char* dw; CK(cudaMalloc(&dw, wbytes * copies));
  for (int c = 0; c < copies; ++c) CK(cudaMemcpy(dw + c * wbytes, hw.data(), wbytes, cudaMemcpyHostToDevice));
  const int gsz = quant::format_group(F) > 0 ? quant::format_group(F) : K;
  const size_t nsc = size_t(N) * (K / gsz) * 4 + 64;
  std::vector<unsigned char> hs(nsc);
  for (size_t i = 0; i < nsc; ++i) hs[i] = (F == quant::Format::mxfp4) ? 120 : (F == quant::Format::nvfp4 ? 0x30 : 0);
  if (F == quant::Format::int4) for (size_t i = 0; i + 1 < nsc; i += 2) { hs[i] = 0x00; hs[i + 1] = 0x24; }  // fp16 0.0156
  if (F == quant::Format::nf4 || F == quant::Format::int8) for (size_t i = 0; i + 3 < nsc; i += 4) { float f = 0.01f; memcpy(&hs[i], &f, 4); }
  unsigned char *ds, *dz; CK(cudaMalloc(&ds, nsc)); CK(cudaMemcpy(ds, hs.data(), nsc, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&dz, size_t(N) * K / 128 + 64)); CK(cudaMemset(dz, 8, size_t(N) * K / 128 + 64));
  std::vector<unsigned short> hx(size_t(M) * K, 0x3800), hb(N, 0x2000);
  unsigned short *dx, *db, *dq, *dk, *dv; int* dp;
  CK(cudaMalloc(&dx, hx.size() * 2)); CK(cudaMemcpy(dx, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&db, N * 2)); CK(cudaMemcpy(db, hb.data(), N * 2, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&dp, M * 4)); CK(cudaMemset(dp, 0, M * 4));
  CK(cudaMalloc(&dq, size_t(M) * Hq * D * 2)); CK(cudaMalloc(&dk, size_t(M) * Hkv * D * 2)); CK(cudaMalloc(&dv, size_t(M) * Hkv * D * 2));
  QkvParams p{};
  p.x = dx; p.w_scales = ds; p.w_zeros = dz; p.bias = db; p.positions = dp; p.q = dq; p.k = dk; p.v = dv;
  p.x_row_stride = K; p.q_row_stride = Hq * D; p.k_row_stride = Hkv * D; p.v_row_stride = Hkv * D;
  p.m = M; p.k_dim = K; p.num_heads = Hq; p.num_kv_heads = Hkv; p.tensor_scale = 1.f; p.rope_log2_theta = std::log2(1e6);
  p.w_evict_first = trace::evict_first();
  const int per_block = C.warps_n * gemv_row_tiles(C);
  dim3 grid((N / 16 + per_block - 1) / per_block * KCS, (M + C.tile_m - 1) / C.tile_m), block(threads(C));
  if (KBAL) {  // as qkv::launch_dims for split_k 0: a 1-D grid, workspace and zeroed counters for the tail pieces
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const GemvBalance bal = gemv_balance((long long)grid.x * grid.y, (K + C.tile_k - 1) / C.tile_k, sms);
    p.gemv_full = bal.full;
    p.gemv_split = bal.split;
    printf("balanced tail: %d SMs, %d whole units, %d tail units x %d pieces\n", sms, bal.full, bal.tail, bal.split);
    CK(cudaMalloc(&p.workspace, size_t(bal.tail) * bal.split * C.tile_n * C.tile_m * 4 + 16));
    CK(cudaMalloc(&p.counters, size_t(bal.tail) * C.warps_n * 4 + 16));
    CK(cudaMemset(p.counters, 0, size_t(bal.tail) * C.warps_n * 4 + 16));
    grid = dim3(unsigned(bal.blocks()), 1);
  }
  w0 = dw;
  wcopy_bytes = wbytes;
#if KS == 2 && KCS == 1
  for (int c = 0; c < copies; ++c) {  // as runtime/qkv.cpp encode_gemv_rows
    kt::qkv::WsParams w{};
    const cuuint64_t rb = cuuint64_t(K) * bits / 8;
#if defined(KKB) && KKB  // the K-blocked packed layout [K bytes / 64][N][64], as runtime/qkv.cpp encode_gemv_blocks
    p.w_k_blocked = 1;
    const cuuint64_t dims[5] = {64, 8, cuuint64_t(D / 16), cuuint64_t(2 * (N / D)), rb / 64};
    const cuuint64_t strides[4] = {64, 512, cuuint64_t(64 * (D / 2)), cuuint64_t(64) * N};
    const cuuint32_t box[5] = {64, 8, 1, 2, 1}, es[5] = {1, 1, 1, 1, 1};
#else
    const cuuint64_t dims[5] = {rb, 8, 2, cuuint64_t(D / 16), cuuint64_t(N / D)};
    const cuuint64_t strides[4] = {rb, rb * (D / 2), rb * 8, rb * D};
    const cuuint32_t box[5] = {64, 8, 2, 1, 1}, es[5] = {1, 1, 1, 1, 1};
#endif
    if (cuTensorMapEncodeTiled(reinterpret_cast<CUtensorMap*>(&w.w_map), CU_TENSOR_MAP_DATA_TYPE_UINT8, 5, dw + c * wbytes, dims,
                               strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                               KT_PROMO, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
      printf("cuTensorMapEncodeTiled failed\n");
      return 1;
    }
    maps.push_back(w);
  }
#endif
  const int smem = gemv_smem_bytes(C, F, K);
  CK(cudaFuncSetAttribute(K_, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  for (int it = 0; it < 200; ++it) { p.w_data = dw + (it % copies) * wbytes; K_<<<grid, block, smem>>>(arg_of(p)); }
  CK(cudaDeviceSynchronize());
  cudaEventRecord(a);
  for (int it = 0; it < 400; ++it) { p.w_data = dw + (it % copies) * wbytes; K_<<<grid, block, smem>>>(arg_of(p)); }
  cudaEventRecord(b); CK(cudaEventSynchronize(b));
  float ms; cudaEventElapsedTime(&ms, a, b);
  // One traced launch after an idle gap (cold start of the launch, as the last of a batch is not).
  std::vector<unsigned long long> tr(size_t(grid.x) * grid.y * threads(C) / 32 * 16);
  std::vector<double> t1s, t2s, t3s, t0s;
  for (int rep = 0; rep < 5; ++rep) {
    p.w_data = dw + ((rep + 7) % copies) * wbytes;
    CK(cudaMemset(dq, 0, 2)); K_<<<grid, block, smem>>>(arg_of(p)); K_<<<grid, block, smem>>>(arg_of(p));  // trace the second, back to back
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpyFromSymbol(tr.data(), kt_gemv_trace, tr.size() * 8));
    unsigned long long t0 = ~0ull, tend = 0;
    for (size_t w = 0; w < tr.size() / 16; ++w) { t0 = std::min(t0, tr[w * 16]); tend = std::max(tend, std::max(tr[w * 16 + 2], tr[w * 16 + 3])); }
    t0s.clear(); t1s.clear(); t2s.clear(); t3s.clear();
    for (size_t w = 0; w < tr.size() / 16; ++w) {
      t0s.push_back((tr[w * 16] - t0) / 1000.0); t1s.push_back((tr[w * 16 + 1] - t0) / 1000.0); t2s.push_back((tr[w * 16 + 2] - t0) / 1000.0);
      if (tr[w * 16 + 3] > t0) t3s.push_back((tr[w * 16 + 3] - t0) / 1000.0);
    }
    auto pct = [](std::vector<double> v, double q) { std::sort(v.begin(), v.end()); return v[std::min(v.size() - 1, size_t(q * v.size()))]; };
    for (int pi : {12, 13, 14, 4, 5, 6, 7}) {  // probe points (0 where the variant does not record them)
      std::vector<double> v;
      for (size_t w = 0; w < tr.size() / 16; ++w)
        if (tr[w * 16 + pi] > t0) v.push_back((tr[w * 16 + pi] - t0) / 1000.0);
      if (!v.empty()) printf("  probe %d: p10 %.2f p50 %.2f p90 %.2f max %.2f\n", pi, pct(v, .1), pct(v, .5), pct(v, .9), pct(v, 1));
    }
    if (rep == 4) {  // per SM: blocks there, last loop end
      std::vector<unsigned> sm(size_t(grid.x) * grid.y);
      CK(cudaMemcpyFromSymbol(sm.data(), kt_gemv_smid, sm.size() * 4));
      const int wpb = threads(C) / 32;
      std::map<unsigned, std::pair<int, double>> per;  // smid -> (blocks, last loop end)
      for (size_t bl = 0; bl < sm.size(); ++bl) {
        auto& e = per[sm[bl]];
        ++e.first;
        for (int w = 0; w < wpb; ++w) e.second = std::max(e.second, (tr[(bl * wpb + w) * 16 + 2] - t0) / 1000.0);
      }
      std::map<int, std::vector<double>> by;  // blocks per SM -> last loop ends
      for (auto& [id, e] : per) by[e.first].push_back(e.second);
      // balanced tail: SMs by (whole blocks, pieces) there (a piece's warp 0 reaches point 8), last whole-block loop end
      std::map<unsigned, std::pair<int, int>> comp;
      std::map<unsigned, double> wend;
      for (size_t bl = 0; bl < sm.size(); ++bl) {
        const bool is_piece = tr[(bl * wpb) * 16 + 8] > t0;
        (is_piece ? comp[sm[bl]].second : comp[sm[bl]].first) += 1;
        if (!is_piece)
          for (int w = 0; w < wpb; ++w) wend[sm[bl]] = std::max(wend[sm[bl]], (tr[(bl * wpb + w) * 16 + 2] - t0) / 1000.0);
      }
      std::map<std::pair<int, int>, std::vector<double>> byc;
      for (auto& [id, c] : comp) byc[c].push_back(wend[id]);
      if (byc.size() > 1 || byc.begin()->first.second > 0) {
        printf("  per SM (whole, pieces):");
        for (auto& [c, v] : byc) { std::sort(v.begin(), v.end()); printf(" | (%d, %d): %zu SMs, whole loop end p50 %.2f max %.2f", c.first, c.second, v.size(), v[v.size() / 2], v.back()); }
        printf("\n");
      }
      printf("  per SM (%zu SMs used):", per.size());
      for (auto& [n, v] : by) { std::sort(v.begin(), v.end()); printf(" | %d blocks: %zu SMs, loop end p50 %.2f max %.2f", n, v.size(), v[v.size() / 2], v.back()); }
      printf("\n");
    }
    {  // balanced tail: the pieces' warps (those that reached point 8)
      std::vector<double> v2, v8, v9, v10, v3, v11;
      for (size_t w = 0; w < tr.size() / 16; ++w)
        if (tr[w * 16 + 8] > t0) {
          v2.push_back((tr[w * 16 + 2] - t0) / 1000.0); v8.push_back((tr[w * 16 + 8] - t0) / 1000.0);
          v11.push_back((tr[w * 16 + 11] - t0) / 1000.0);
          v9.push_back((tr[w * 16 + 9] - t0) / 1000.0);
          if (tr[w * 16 + 10] > t0) { v10.push_back((tr[w * 16 + 10] - t0) / 1000.0); v3.push_back((tr[w * 16 + 3] - t0) / 1000.0); }
        }
      if (!v8.empty() && !v10.empty())
        printf("  pieces (%zu warps): loopend p50 %.2f max %.2f | block sum p50 %.2f max %.2f | stored+fenced p50 %.2f max %.2f | counted p50 %.2f max %.2f | "
               "last (%zu): summed p50 %.2f max %.2f, end p50 %.2f max %.2f\n", v8.size(), pct(v2, .5), pct(v2, 1), pct(v11, .5), pct(v11, 1), pct(v8, .5),
               pct(v8, 1), pct(v9, .5), pct(v9, 1), v10.size(), pct(v10, .5), pct(v10, 1), pct(v3, .5), pct(v3, 1));
    }
    printf("rep %d span %.2f us | start p50 %.2f max %.2f | ready p10 %.2f p50 %.2f p90 %.2f max %.2f | loopend p10 %.2f p50 %.2f p90 %.2f max %.2f | end p50 %.2f max %.2f\n",
           rep, (tend - t0) / 1000.0, pct(t0s, .5), pct(t0s, 1), pct(t1s, .1), pct(t1s, .5), pct(t1s, .9), pct(t1s, 1), pct(t2s, .1), pct(t2s, .5), pct(t2s, .9), pct(t2s, 1), pct(t3s, .5), pct(t3s, 1));
  }
  {  // output summary (compare a build against its base: equal up to the fp32 summation order)
    std::vector<unsigned short> hq(size_t(M) * Hq * D), hk(size_t(M) * Hkv * D);
    CK(cudaMemcpy(hq.data(), dq, hq.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hk.data(), dk, hk.size() * 2, cudaMemcpyDeviceToHost));
    auto to_f = [](unsigned short b) {
      if (kt::DType::KDT == kt::DType::bf16) { unsigned u = unsigned(b) << 16; float f; memcpy(&f, &u, 4); return f; }
      return __half2float(__ushort_as_half(b));
    };
    double sq = 0, sk = 0, aq = 0;
    for (auto b : hq) { sq += to_f(b); aq += std::fabs(to_f(b)); }
    for (auto b : hk) sk += to_f(b);
    printf("output sums: q %.6e (|q| %.6e), k %.6e\n", sq, aq, sk);
  }
  {  // launch-rate probes: an empty kernel with the same grid and parameters; the real kernel inside a CUDA graph
    for (int it = 0; it < 100; ++it) empty_kernel<<<grid, block>>>(p);
    cudaEventRecord(a);
    for (int it = 0; it < 400; ++it) empty_kernel<<<grid, block>>>(p);
    cudaEventRecord(b); CK(cudaEventSynchronize(b));
    float me; cudaEventElapsedTime(&me, a, b);
    cudaStream_t st; cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    cudaGraph_t gr; cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int it = 0; it < 100; ++it) { p.w_data = dw + (it % copies) * wbytes; K_<<<grid, block, smem, st>>>(arg_of(p)); }
    CK(cudaStreamEndCapture(st, &gr));
    CK(cudaGraphInstantiate(&ge, gr, 0));
    CK(cudaGraphLaunch(ge, st)); CK(cudaStreamSynchronize(st));
    cudaEventRecord(a, st);
    for (int r = 0; r < 4; ++r) CK(cudaGraphLaunch(ge, st));
    cudaEventRecord(b, st); CK(cudaEventSynchronize(b));
    float mg; cudaEventElapsedTime(&mg, a, b);
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int it = 0; it < 100; ++it) empty_kernel<<<grid, block, 0, st>>>(p);
    CK(cudaStreamEndCapture(st, &gr));
    CK(cudaGraphInstantiate(&ge, gr, 0));
    CK(cudaGraphLaunch(ge, st)); CK(cudaStreamSynchronize(st));
    cudaEventRecord(a, st);
    for (int r = 0; r < 4; ++r) CK(cudaGraphLaunch(ge, st));
    cudaEventRecord(b, st); CK(cudaEventSynchronize(b));
    float meg; cudaEventElapsedTime(&meg, a, b);
    printf("empty kernel: stream batch %.2f us, graph %.2f us per launch; real kernel in a graph: %.2f us per launch\n", me * 1000 / 400, meg * 1000 / 400, mg * 1000 / 400);
  }
  float flush_med = 0.f, flush_p80 = 0.f;
  if (!trace::flushed_time([&](int i, cudaStream_t s) { p.w_data = dw + (i % copies) * wbytes; K_<<<grid, block, smem, s>>>(arg_of(p)); },
                           flush_med, flush_p80))
    return 1;
  printf("%s M=%d grid %d x %d, %d threads, smem %d: batch timing %.2f us per launch, flushed %.2f (p80 %.2f)\n", argv[0], M, grid.x,
         grid.y, threads(C), smem, ms * 1000 / 400, flush_med, flush_p80);
  return 0;
}
