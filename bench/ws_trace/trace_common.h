// Shared host parts of the timeline drivers trace_ws.cu and trace_pairs.cu (experiments, not part of the build):
// an output checksum, the per-block trace percentiles, the time per launch back to back in a stream and in a CUDA
// graph (40 launches captured, 5 replays: the benchmark's graph method, cold L2 by the caller's rotated copies), the
// run that chains warm-up, checksum and timing, the do_bench-style time of single launches after an L2 flush, and the
// 16-bit weight layouts (KT_TRACE_KB) with their byte strides.
#pragma once
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace trace {

/// FNV-1a over the 16-bit outputs q [nq], k [nkv], v [nkv] (device pointers), printed as "output checksum <hex>", so
/// two builds of one variant (an experiment against its base) can be compared. false (and a message) on a CUDA error.
inline bool print_checksum(const unsigned short* dq, const unsigned short* dk, const unsigned short* dv, size_t nq, size_t nkv) {
  std::vector<unsigned short> hq(nq), hk(nkv), hv(nkv);
  for (auto [h, d] : {std::pair{&hq, dq}, {&hk, dk}, {&hv, dv}})
    if (cudaError_t e = cudaMemcpy(h->data(), d, h->size() * 2, cudaMemcpyDeviceToHost); e != cudaSuccess) {
      printf("checksum copy: %s\n", cudaGetErrorString(e));
      return false;
    }
  unsigned long long h = 1469598103934665603ull;
  for (auto* v : {&hq, &hk, &hv})
    for (unsigned short e : *v) h = (h ^ e) * 1099511628211ull;
  printf("output checksum %016llx\n", h);
  return true;
}

/// Percentiles over blocks of trace points: tr[block * 16 + idx[i]] holds %globaltimer (ns) of point i, 0 if not
/// recorded; tr[block * 16 + sm_slot] the block's SM id. Prints "| name nN p10 .. p50 .. p90 .. max .." per point (us
/// from the first block's entry, point idx[0]) and the SMs used, on one line.
inline void print_trace(const std::vector<unsigned long long>& tr, int nblocks, const char* const* names, const int* idx, int points,
                        int sm_slot) {
  auto pct = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v.empty() ? -1.0 : v[std::min(v.size() - 1, size_t(q * v.size()))];
  };
  unsigned long long t0 = ~0ull;
  for (int b = 0; b < nblocks; ++b) t0 = std::min(t0, tr[b * 16 + idx[0]]);
  for (int pi = 0; pi < points; ++pi) {
    std::vector<double> v;
    for (int b = 0; b < nblocks; ++b)
      if (tr[b * 16 + idx[pi]] >= t0) v.push_back((tr[b * 16 + idx[pi]] - t0) / 1000.0);
    if (!v.empty())
      printf(" | %s n%zu p10 %.2f p50 %.2f p90 %.2f max %.2f", names[pi], v.size(), pct(v, .1), pct(v, .5), pct(v, .9), pct(v, 1));
  }
  std::map<int, int> per_sm;
  for (int b = 0; b < nblocks; ++b) per_sm[int(tr[b * 16 + sm_slot])]++;
  int most = 0;
  for (auto& kv : per_sm) most = std::max(most, kv.second);
  printf(" | SMs used %zu, most blocks on one SM %d\n", per_sm.size(), most);
}

/// Microseconds per launch of launch(i, stream) (i = 0, 1, ..: the caller rotates its copies): 200 launches back to
/// back in the default stream, and 40 launches captured in a CUDA graph, replayed 5 times. false on a CUDA error.
template <class Launch>
bool time_launches(Launch launch, float& stream_us, float& graph_us) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  for (int i = 0; i < 200; ++i) launch(i, cudaStream_t(0));
  cudaEventRecord(b);
  if (cudaEventSynchronize(b) != cudaSuccess) return false;
  float ms = 0.f;
  cudaEventElapsedTime(&ms, a, b);
  stream_us = ms * 1000 / 200;
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  cudaGraph_t gr;
  cudaGraphExec_t ge;
  if (cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal) != cudaSuccess) return false;
  for (int i = 0; i < 40; ++i) launch(i, st);
  if (cudaStreamEndCapture(st, &gr) != cudaSuccess || cudaGraphInstantiate(&ge, gr, 0) != cudaSuccess) return false;
  if (cudaGraphLaunch(ge, st) != cudaSuccess || cudaStreamSynchronize(st) != cudaSuccess) return false;
  cudaEventRecord(a, st);
  for (int r = 0; r < 5; ++r) cudaGraphLaunch(ge, st);
  cudaEventRecord(b, st);
  if (cudaEventSynchronize(b) != cudaSuccess) return false;
  cudaEventElapsedTime(&ms, a, b);
  graph_us = ms * 1000 / 200;
  return true;
}

/// The drivers' common run: 100 launches of launch(i, stream) (warm-up, the caller rotating its copies), the output
/// checksum of the last, then time_launches. Prints a message and returns false on a CUDA error.
template <class Launch>
bool warm_check_time(Launch launch, const unsigned short* dq, const unsigned short* dk, const unsigned short* dv, size_t nq,
                     size_t nkv, float& stream_us, float& graph_us) {
  for (int it = 0; it < 100; ++it) launch(it, cudaStream_t(0));
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    printf("warm-up launches: %s\n", cudaGetErrorString(e));
    return false;
  }
  if (!print_checksum(dq, dk, dv, nq, nkv)) return false;
  if (!time_launches(launch, stream_us, graph_us)) {
    printf("timing failed\n");
    return false;
  }
  return true;
}

/// The 16-bit weight layout of KT_TRACE_KB: 0 row-major [N][K] (fp16), 1 K-blocked [K/64][N][64] (fp16_kb64), 2 in
/// 64 x 64 tiles [N/64][K/64][64][64], 3 [N/128][K/64][128][64] (N a multiple of 128); 2 and 3 were measured against 1
/// and not kept (NOTES.md qkv_proj 28).
inline int wide_layout() { return std::getenv("KT_TRACE_KB") ? std::atoi(std::getenv("KT_TRACE_KB")) : 0; }
/// KT_TRACE_EVICT=1: QkvParams::w_evict_first (the weight loaded with the L2 policy evict_first; qkv::launch sets it by
/// weight_evict_first), default 0.
inline int evict_first() { return std::getenv("KT_TRACE_EVICT") ? std::atoi(std::getenv("KT_TRACE_EVICT")) : 0; }
/// hw (row-major [n][k]) rearranged into `layout`; the same values, so outputs (checksums) must not change.
inline void permute_wide(std::vector<unsigned short>& hw, size_t n, size_t k, int layout) {
  if (layout == 0) return;
  std::vector<unsigned short> t(hw.size());
  for (size_t r = 0; r < n; ++r)
    for (size_t c = 0; c < k; ++c)
      t[layout == 1   ? ((c / 64) * n + r) * 64 + c % 64
        : layout == 2 ? ((r / 64) * (k / 64) + c / 64) * 4096 + (r % 64) * 64 + c % 64
                      : ((r / 128) * (k / 64) + c / 64) * 8192 + (r % 128) * 64 + c % 64] = hw[r * k + c];
  hw.swap(t);
}
/// Bytes between rows r and r + rows of a 16-bit weight in `layout` (rows 1, a divisor of the layout's row block that
/// keeps both rows in one block, or a multiple of the block), and between K steps.
inline long long wide_row_span(int layout, long long n, long long k, long long rows) {
  const long long blk = layout == 2 ? 64 : layout == 3 ? 128 : 0;
  if (layout == 0) return rows * 2 * k;
  if (layout == 1) return rows * 128;
  return rows < blk ? rows * 128 : rows / blk * (k / 64) * blk * 128;
}
inline long long wide_step_span(int layout, long long n) {
  return layout == 0 ? 128 : layout == 1 ? 128 * n : layout == 2 ? 8192 : 16384;
}

__global__ void flush_read_kernel(const uint4* p, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) acc ^= p[i].x;
  if (acc == 0x9e3779b9u) *sink = acc;
}

/// do_bench-style (the anchors' method) microseconds of single launches: before each, a 256 MB flush of the L2 --
/// KT_TRACE_FLUSH=read reads the buffer (the L2 left clean), otherwise cudaMemset writes it (left dirty, as torch's
/// do_bench cache.zero_() does) --, then launch(i, stream 0) between two events; median and p80 of 50 (after 5).
template <class Launch>
bool flushed_time(Launch launch, float& med, float& p80) {
  const bool read = std::getenv("KT_TRACE_FLUSH") && std::string(std::getenv("KT_TRACE_FLUSH")) == "read";
  const size_t bytes = size_t(256) << 20;
  void* fb = nullptr;
  unsigned* sink = nullptr;
  if (cudaMalloc(&fb, bytes) != cudaSuccess || cudaMalloc(&sink, 4) != cudaSuccess) return false;
  cudaMemset(fb, 1, bytes);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> t;
  for (int i = 0; i < 55; ++i) {
    if (read) flush_read_kernel<<<132 * 8, 256>>>(static_cast<const uint4*>(fb), bytes / 16, sink);
    else cudaMemsetAsync(fb, i & 0xff, bytes, 0);
    cudaEventRecord(e0, 0);
    launch(i, cudaStream_t(0));
    cudaEventRecord(e1, 0);
    if (cudaEventSynchronize(e1) != cudaSuccess) return false;
    float ms = 0.f;
    cudaEventElapsedTime(&ms, e0, e1);
    if (i >= 5) t.push_back(ms * 1000.f);
  }
  std::sort(t.begin(), t.end());
  med = t[t.size() / 2], p80 = t[t.size() * 4 / 5];
  cudaFree(fb);
  cudaFree(sink);
  return true;
}

}  // namespace trace
