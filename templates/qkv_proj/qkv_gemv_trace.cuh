// Timeline trace points of the gemv kernel (qkv_gemv.cuh and its pieces). Compiled by NVRTC only.
#pragma once

// Timeline experiments only (never defined by the generator): KT_GEMV_TRACE(i) records %globaltimer at point i of
// each warp into kt_gemv_trace[(block * warps + warp) * 16 + i] (a global __device__ array the experiment defines before
// including this header); i < 4: entry, data ready, loop end, end; 4..7: probes inside the prologue; 8..11: a balanced
// tail piece's reduction (11 block sum, 8 partial stored and fenced, 9 counted, 10 the last piece's sum). 16 slots per
// warp. At i = 0 thread 0 also records the block's SM (%smid) into kt_gemv_smid[block] (defined beside kt_gemv_trace).
#ifdef KT_GEMV_TRACE_ON
#define KT_GEMV_TRACE(i)                                                                                              \
  do {                                                                                                                \
    unsigned long long t_;                                                                                            \
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                                                            \
    if (lane == 0) kt_gemv_trace[((blockIdx.y * gridDim.x + blockIdx.x) * (WarpsK * WarpsN) + warp) * 16 + (i)] = t_; \
    if ((i) == 0 && threadIdx.x == 0) {                                                                               \
      unsigned sm_;                                                                                                   \
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm_));                                                                \
      kt_gemv_smid[blockIdx.y * gridDim.x + blockIdx.x] = sm_;                                                        \
    }                                                                                                                 \
  } while (0)
#else
#define KT_GEMV_TRACE(i) \
  do {                   \
  } while (0)
#endif
