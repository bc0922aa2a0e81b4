// The TMA + mbarrier producer/consumer ring (sm_90): Stages shared-memory slots, each guarded by a full and an empty
// mbarrier (ThunderKittens' lcf "inputs_arrived" / "inputs_finished" semaphores). The producer thread fills slot
// j % Stages for ring step j: it waits until the slot's previous use was released (acquire), arms the full barrier
// with the bytes its TMA copies will deliver (arm) and issues the copies on that barrier. Consumers wait for the full
// barrier (wait), read the slot, and release it with one arrival per consumer warp (release). Ring step j uses phase
// (j / Stages) & 1 of its slot's barriers; a producer's first pass over the ring waits on the phase before the first
// (parity 1), which a fresh mbarrier reports complete.
//
// StepBarriers is the ring's variant for a warp that is its own producer: one single-use mbarrier per step (parity 0);
// the warp requests its steps a window ahead and reuses a data slot only after it decoded the step that held it, so no
// empty barriers are needed (gemv stages 2 / 3).
// The mbarrier operations exist on sm_90 only: elsewhere the calls compile to nothing (a mainloop that uses the ring
// is sm_90-only; the types may appear in code shared with older architectures).
// Compiled by NVRTC only. No standard headers.
#pragma once
#include "common/ptx.cuh"

namespace kt {
namespace pipe {

/// Stages slots' full and empty mbarriers in shared memory: full[0 .. Stages) then empty[0 .. Stages), 8 bytes each.
/// Declare the storage as `__shared__ __align__(8) unsigned long long bars[2 * Stages]` and construct the ring over it
/// in every thread that uses it.
template <int Stages>
struct TmaRing {
  static_assert(Stages >= 1, "a ring has at least one slot");
  unsigned full;   ///< shared-window address of full[0]
  unsigned empty;  ///< shared-window address of empty[0]

  __device__ __forceinline__ explicit TmaRing(const unsigned long long* bars)
      : full(ptx::smem_u32(bars)), empty(full + 8 * Stages) {}  // (one cvta: smem_u32 is an asm volatile)

  /// The slot and phase of ring step j (j >= 0).
  __device__ __forceinline__ static int slot(int j) { return j % Stages; }
  __device__ __forceinline__ static unsigned phase(int j) { return unsigned((j / Stages) & 1); }
  /// Slot s's full barrier: the TMA copies' complete_tx target.
  __device__ __forceinline__ unsigned full_bar(int s) const { return full + 8 * s; }

  /// One thread, before anyone uses the ring: full barriers expect the producer's one arrival (plus the bytes),
  /// empty barriers `consumer_arrivals` releases. The caller then runs ptx::mbarrier_init_fence() and a barrier that
  /// the consumers pass before their first wait.
  __device__ __forceinline__ void init(unsigned consumer_arrivals) const {
#pragma unroll
    for (int s = 0; s < Stages; ++s) {
#if __CUDA_ARCH__ >= 900
      ptx::mbarrier_init(full + 8 * s, 1);
      ptx::mbarrier_init(empty + 8 * s, consumer_arrivals);
#endif
    }
  }
  /// Producer: waits until step j's slot is free (its use by step j - Stages released; immediate on the first pass).
  __device__ __forceinline__ void acquire(int j) const {
#if __CUDA_ARCH__ >= 900
    ptx::mbarrier_wait(empty + 8 * (j % Stages), ((j / Stages) & 1) ^ 1);
#endif
  }
  /// Producer: arms slot s's full barrier for `bytes` of TMA transactions (the producer's arrival); returns the barrier.
  __device__ __forceinline__ unsigned arm(int s, unsigned bytes) const {
#if __CUDA_ARCH__ >= 900
    ptx::mbarrier_arrive_expect_tx(full + 8 * s, bytes);
#endif
    return full + 8 * s;
  }
  /// Consumer: waits until step j's copies have landed.
  __device__ __forceinline__ void wait(int j) const {
#if __CUDA_ARCH__ >= 900
    ptx::mbarrier_wait(full + 8 * (j % Stages), unsigned((j / Stages) & 1));
#endif
  }
  /// Consumer: one arrival on step j's empty barrier (one lane per consumer warp, after the reads of the slot retired).
  __device__ __forceinline__ void release(int j) const {
#if __CUDA_ARCH__ >= 900
    ptx::mbarrier_arrive(empty + 8 * (j % Stages));
#endif
  }
};

/// One single-use mbarrier per step, 8 bytes each from `base` (a shared-window address): step i's barrier is
/// base + 8 i. Each is armed once and waited on with parity 0.
struct StepBarriers {
  unsigned base;
  __device__ __forceinline__ unsigned bar(int i) const { return base + 8 * i; }
  /// One thread: barrier i expects one arrival (plus the bytes).
  __device__ __forceinline__ void init(int i) const {
#if __CUDA_ARCH__ >= 900
    ptx::mbarrier_init(base + 8 * i, 1);
#endif
  }
  /// Arms barrier i for `bytes` of TMA transactions; returns it.
  __device__ __forceinline__ unsigned arm(int i, unsigned bytes) const {
#if __CUDA_ARCH__ >= 900
    ptx::mbarrier_arrive_expect_tx(base + 8 * i, bytes);
#endif
    return base + 8 * i;
  }
  /// Waits until barrier i's copies have landed.
  __device__ __forceinline__ void wait(int i) const {
#if __CUDA_ARCH__ >= 900
    ptx::mbarrier_wait(base + 8 * i, 0);
#endif
  }
};

}  // namespace pipe
}  // namespace kt
