// Shared host parts of the timeline drivers trace_ws.cu and trace_pairs.cu (experiments, not part of the build):
// an output checksum, the per-block trace percentiles, the time per launch back to back in a stream and in a CUDA
// graph (40 launches captured, 5 replays: the benchmark's graph method, cold L2 by the caller's rotated copies), and
// the run that chains warm-up, checksum and timing.
#pragma once
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <map>
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

}  // namespace trace
