#include "runtime/decode.h"

#include <string>

namespace kt {
namespace decode {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw ProblemError(std::string(kFamily) + ": " + msg); }

}  // namespace

void check_call(const Problem& p, const DecodeParams& a) {
  check_args(p, a);
  if (p.kv_len > a.kv_capacity)
    fail("kv_len (max_seqlen_k) " + std::to_string(p.kv_len) + " exceeds the cache's capacity of " +
         std::to_string(a.kv_capacity) + " tokens" +
         (p.kv_layout == KvLayout::paged ? " (max_pages_per_seq " + std::to_string(a.kv_capacity / p.page_size) +
                                               " x page_size " + std::to_string(p.page_size) + ")"
                                         : std::string(" (S_max)")));
}

void check_tables(const Problem& p, const int* seqlens_k, const int* block_table, int max_pages_per_seq, int num_pages,
                  int kv_capacity) {
  if (!seqlens_k) fail("seqlens_k is null");
  const bool paged = p.kv_layout == KvLayout::paged;
  if (paged && !block_table) fail("block_table is null for a paged cache");
  if (paged && static_cast<long long>(max_pages_per_seq) * p.page_size < kv_capacity)
    fail("kv_capacity " + std::to_string(kv_capacity) + " exceeds the block table's max_pages_per_seq " +
         std::to_string(max_pages_per_seq) + " x page_size " + std::to_string(p.page_size));
  for (int b = 0; b < p.batch; ++b) {
    const int len = seqlens_k[b];
    if (len < 0 || len > kv_capacity)
      fail("seqlens_k[" + std::to_string(b) + "] = " + std::to_string(len) + " is outside [0, " +
           std::to_string(kv_capacity) + "], the cache's capacity");
    if (!paged) continue;
    const int pages = (len + p.page_size - 1) / p.page_size;
    for (int j = 0; j < pages; ++j) {
      const int e = block_table[static_cast<long long>(b) * max_pages_per_seq + j];
      if (e < 0 || e >= num_pages)
        fail("block_table[" + std::to_string(b) + "][" + std::to_string(j) + "] = " + std::to_string(e) +
             (e < 0 ? " is negative" : " addresses past num_pages " + std::to_string(num_pages)) + " (sequence " +
             std::to_string(b) + " holds " + std::to_string(len) + " tokens)");
    }
  }
}

bool cooperative_launch(const LoadedKernel& kernel, const Problem& problem, const Config& config) {
  if (!config.cooperative || !uses_workspace(problem, config)) return false;
  // The split blocks wait on each other, so the grid must be resident at once: where it is not (a longer kv_len than
  // the config was tuned for, a smaller GPU), the same binary merges in the last block instead.
  const LaunchDims d = launch_dims(problem, config);
  return static_cast<long long>(d.grid_x) * d.grid_y * d.grid_z <= kernel.resident_blocks(d.block_x, d.smem_bytes);
}

void launch(const LoadedKernel& kernel, const Problem& problem, const Config& config, const DecodeParams& params,
            float* workspace, unsigned* counters, CUstream stream) {
  check_call(problem, params);
  const LaunchDims d = launch_dims(problem, config);
  Config c = config;
  c.cooperative = cooperative_launch(kernel, problem, config) ? 1 : 0;
  DecodeParams a = params;
  bind_config(a, problem, c, workspace, counters);
  check_params(problem, c, a);
  if (!a.cooperative) {
    kernel.launch(d.grid_x, d.grid_y, d.grid_z, d.block_x, d.smem_bytes, stream, &a);
    return;
  }
  try {
    kernel.launch(d.grid_x, d.grid_y, d.grid_z, d.block_x, d.smem_bytes, stream, &a, 1, true);
  } catch (const cuda::CudaError& e) {
    // The driver holds fewer blocks at once than the occupancy said (e.g. an MPS client's share of the SMs): the
    // same binary with the last-block merge.
    if (e.code != CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE) throw;
    a.cooperative = 0;
    kernel.launch(d.grid_x, d.grid_y, d.grid_z, d.block_x, d.smem_bytes, stream, &a);
  }
}

}  // namespace decode
}  // namespace kt
