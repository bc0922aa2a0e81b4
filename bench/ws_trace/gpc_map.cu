// Which SMs share a GPC (timeline experiments only; not part of the build). A thread-block cluster runs on one GPC,
// so SMs that ever hold blocks of one cluster share a GPC: launches of clusters of 16 (non-portable), 8, 4 and 2 with
// many clusters, union-find over the SM ids of each cluster. Prints "gpc g: n SMs: ids".
// Build: nvcc -std=c++17 -O2 -gencode arch=compute_90a,code=sm_90a -o gpc_map gpc_map.cu
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <numeric>
#include <vector>
namespace cg = cooperative_groups;
__global__ void who(unsigned* out) {
  unsigned smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  if (threadIdx.x == 0) out[blockIdx.x] = smid;
  long long t0 = clock64();
  while (clock64() - t0 < 200000) {}  // hold the SM so the clusters spread over the GPU
  cg::this_cluster().sync();
}
static int find(std::vector<int>& p, int x) { return p[x] == x ? x : p[x] = find(p, p[x]); }
int main() {
  int nsm = 0;
  cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0);
  std::vector<int> parent(nsm);
  std::iota(parent.begin(), parent.end(), 0);
  cudaFuncSetAttribute(who, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  unsigned* d;
  cudaMalloc(&d, 4096 * 4);
  for (int cs : {16, 8, 4, 2}) {
    for (int rep = 0; rep < 4; ++rep) {
      const int blocks = cs * (nsm / cs);
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(blocks);
      cfg.blockDim = dim3(32);
      cudaLaunchAttribute a[1];
      a[0].id = cudaLaunchAttributeClusterDimension;
      a[0].val.clusterDim.x = cs, a[0].val.clusterDim.y = 1, a[0].val.clusterDim.z = 1;
      cfg.attrs = a, cfg.numAttrs = 1;
      if (cudaLaunchKernelEx(&cfg, who, d) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
        printf("cluster %d: launch failed: %s\n", cs, cudaGetErrorString(cudaGetLastError()));
        break;
      }
      std::vector<unsigned> h(blocks);
      cudaMemcpy(h.data(), d, blocks * 4, cudaMemcpyDeviceToHost);
      for (int c = 0; c < blocks / cs; ++c)
        for (int i = 1; i < cs; ++i) parent[find(parent, h[c * cs + i])] = find(parent, h[c * cs]);
    }
  }
  std::vector<std::vector<int>> groups(nsm);
  for (int s = 0; s < nsm; ++s) groups[find(parent, s)].push_back(s);
  int g = 0;
  for (auto& v : groups)
    if (!v.empty()) {
      printf("gpc %d: %zu SMs:", g++, v.size());
      for (int s : v) printf(" %d", s);
      printf("\n");
    }
  return 0;
}
