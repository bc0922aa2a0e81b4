// Thin wrappers over the PTX instructions the tensor-core kernels use (PTX ISA 8.x):
//   cp.async (9.7.9.25), ldmatrix (9.7.14.5.15), mma.sync.m16n8k16 (9.7.14.5.14), cvt packing, ex2.approx.
// Compiled by NVRTC only. No standard headers.
#pragma once
#include "common/kt_types.h"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KT_ARCH_SPECIFIC true
#else
#define KT_ARCH_SPECIFIC false
#endif

namespace kt {
namespace ptx {

/// 32-bit shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ unsigned smem_u32(const void* p) {
  unsigned r;
  asm volatile("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}

/// 16-byte asynchronous global->shared copy; src_bytes < 16 zero-fills the rest (0 = pure zero fill,
/// nothing read). .cg bypasses L1 (data is staged in shared memory anyway).
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, unsigned src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
/// cp_async_16 with an L2 cache policy (createpolicy; PTX ISA "cp.async", .L2::cache_hint).
__device__ __forceinline__ void cp_async_16_hint(unsigned dst, const void* src, unsigned src_bytes,
                                                 unsigned long long policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes), "l"(policy));
}
/// 32-bit load from a 32-bit shared-window address (ld.shared.u32). Volatile so that the compiler keeps it after the
/// barrier that published the data (ptxas still schedules it freely).
__device__ __forceinline__ unsigned lds_u32(unsigned addr) {
  unsigned v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/// Wait until at most N of the most recent cp.async groups are pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/// 4-byte asynchronous global->shared copy (cp.async.ca; PTX ISA 9.7.9.25).
__device__ __forceinline__ void cp_async_4(unsigned dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
}
/// Wait for every cp.async of this thread.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::); }

/// Named barrier `id` (1..15) over `count` threads, a multiple of 32 (PTX ISA "bar.sync"): a block barrier for a
/// subset of its warps.
__device__ __forceinline__ void named_barrier(unsigned id, unsigned count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
/// Arrives on named barrier `id` without waiting (PTX ISA "bar.arrive"): the producer side of a named barrier whose
/// other `count` - 32 k threads wait in bar.sync.
__device__ __forceinline__ void named_barrier_arrive(unsigned id, unsigned count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// ---- sm_80: L2 cache policies (PTX ISA "createpolicy"; the ".L2::cache_hint" qualifier of ld and cp.async.bulk)
/// An optional L2 cache policy for a load: `on` false = no hint (the plain instruction), else `policy`.
struct L2Hint {
  unsigned long long policy;
  bool on;
};
/// evict_first for the whole access (createpolicy.fractional, fraction 1.0: the lines are the first candidates for
/// eviction, so a stream read once replaces its own lines rather than other data) when `first`, else no hint. (An
/// explicit evict_normal policy is not the same as none: on the H100 wgmma_pairs runs markedly slower with it than
/// without a hint.)
__device__ __forceinline__ L2Hint l2_evict_first_if(bool first) {
  L2Hint h{0ull, first};
  if (first) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(h.policy));
  return h;
}
/// A read-only 16-byte global load (ld.global.nc, as __ldg), with the hint's L2 policy when it has one.
__device__ __forceinline__ uint4 ldg_u4(const void* src, L2Hint h) {
  if (!h.on) return __ldg(static_cast<const uint4*>(src));
  uint4 v;
  asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(src), "l"(h.policy));
  return v;
}

// ---- sm_90: mbarrier with transaction counts + bulk (TMA) copies (PTX ISA 9.7.13.15 mbarrier, 9.7.9.25.4 cp.async.bulk)
#if __CUDA_ARCH__ >= 900
/// Initializes a shared-memory mbarrier expecting `count` arrivals per phase.
__device__ __forceinline__ void mbarrier_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
/// Makes this thread's earlier mbarrier.init visible to the asynchronous proxy (the bulk copies' complete_tx) before
/// the following barrier (PTX ISA "fence.mbarrier_init").
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/// Orders this thread's earlier shared-memory accesses through the generic proxy (ld / st.shared, cp.async) before
/// its later ones through the async proxy (TMA, wgmma), and the reverse (PTX ISA "fence.proxy.async"): each accessing
/// thread runs it before the barrier that precedes the async-proxy access, e.g. a TMA write into a slot just read.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/// One arrival that also adds `bytes` to the phase's expected transaction count.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
/// One plain arrival (release semantics at CTA scope: this thread's earlier shared-memory accesses happen before the
/// phase completes).
__device__ __forceinline__ void mbarrier_arrive(unsigned bar) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }\n" ::"r"(bar) : "memory");
}
/// Arrives on the mbarrier once every cp.async this thread issued so far has completed (PTX ISA
/// "cp.async.mbarrier.arrive"; .noinc: the arrival counts against the count the barrier was initialized with).
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
/// Blocks until the phase with the given parity has completed.
__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{ .reg .pred done; WAIT_%=: mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1; @!done bra WAIT_%=; }\n" ::
          "r"(bar),
      "r"(parity)
      : "memory");
}
/// 2-D TMA tile load (PTX ISA "cp.async.bulk.tensor"): the box at coordinates (c0 innermost, c1) of the tensor map at
/// generic address `map` (a __grid_constant__ kernel parameter) into shared memory at dst, completing as transactions
/// on the mbarrier. Out-of-bounds elements are written as zeros and still count as transaction bytes.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const void* map, int c0, int c1, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
          "r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
/// Starts fetching a tensor map (a __grid_constant__ kernel parameter, generic address) into the TMA unit's
/// descriptor cache, so the first copy that uses it does not wait for it (PTX ISA, prefetch.tensormap).
__device__ __forceinline__ void prefetch_tensormap(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}
/// tma_load_2d with the hint's L2 policy when it has one; and the 3-D and 5-D tile loads (coordinates c0 innermost),
/// likewise.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const void* map, int c0, int c1, unsigned bar, L2Hint h) {
  if (!h.on) return tma_load_2d(dst, map, c0, c1, bar);
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;\n" ::
          "r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar), "l"(h.policy)
      : "memory");
}
__device__ __forceinline__ void tma_load_3d(unsigned dst, const void* map, int c0, int c1, int c2, unsigned bar,
                                            L2Hint h) {
  if (h.on)
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::
            "r"(dst),
        "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "l"(h.policy)
        : "memory");
  else
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::
            "r"(dst),
        "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
        : "memory");
}
/// 4-D tile load (coordinates c0 innermost) into dst on mbarrier bar.
__device__ __forceinline__ void tma_load_4d(unsigned dst, const void* map, int c0, int c1, int c2, int c3,
                                            unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::
          "r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
/// 4-D TMA tile store (PTX ISA "cp.async.bulk.tensor", shared::cta to global, bulk_group completion): the box at
/// coordinates (c0 innermost) of the tensor map from shared memory at src; elements outside the tensor are not
/// written. The writing threads' st.shared of src must be ordered before it by fence_proxy_async_shared and a barrier.
__device__ __forceinline__ void tma_store_4d(const void* map, unsigned src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(map),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(src)
               : "memory");
}
/// Closes this thread's bulk-group of TMA stores issued since the last commit.
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/// Waits until at most N of this thread's committed bulk groups still read their shared-memory source (the source
/// may then be written again).
template <int N>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
/// 4-byte shared-memory store at a shared-window address.
__device__ __forceinline__ void sts_u32(unsigned addr, unsigned v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void tma_load_5d(unsigned dst, const void* map, int c0, int c1, int c2, int c3, int c4,
                                            unsigned bar, L2Hint h) {
  if (h.on)
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3, %4, %5, %6}], [%7], %8;\n" ::
            "r"(dst),
        "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(bar), "l"(h.policy)
        : "memory");
  else
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n" ::
            "r"(dst),
        "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(bar)
        : "memory");
}
/// Bulk copy of `bytes` (a multiple of 16; 16-byte aligned addresses) global -> shared, completing as transactions
/// on the mbarrier, with the hint's L2 policy when it has one.
__device__ __forceinline__ void bulk_copy_g2s(unsigned dst, const void* src, unsigned bytes, unsigned bar, L2Hint h) {
  if (h.on)
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::
            "r"(dst),
        "l"(src), "r"(bytes), "r"(bar), "l"(h.policy)
        : "memory");
  else
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

// ---- sm_90: thread-block clusters and distributed shared memory (PTX ISA "barrier.cluster", "mapa", state space
//      .shared::cluster; CUDA Programming Guide, "Thread Block Clusters")
/// This block's rank in its cluster (%cluster_ctarank).
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
/// Arrival on the cluster barrier with no ordering (every thread of every block of the cluster must execute it).
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
/// Arrival that releases this thread's earlier (distributed) shared-memory writes to the threads that wait.
__device__ __forceinline__ void cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
/// Waits for every thread of the cluster to arrive (acquire: the released writes are visible afterwards).
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }
/// The .shared::cluster address of the variable at shared-memory address `addr` of this block in block `rank`.
__device__ __forceinline__ unsigned cluster_map(unsigned addr, unsigned rank) {
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
/// A float4 store into another block's shared memory (address from cluster_map).
__device__ __forceinline__ void st_cluster_f4(unsigned addr, float4 v) {
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}
/// A float store into another block's shared memory (address from cluster_map).
__device__ __forceinline__ void st_cluster_f32(unsigned addr, float v) {
  asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(addr), "f"(v) : "memory");
}
/// An asynchronous float4 store into another block's shared memory that completes as 16 bytes of transactions on
/// that block's mbarrier `bar` (both addresses from cluster_map; PTX ISA, st.async), issued where `send` holds: the
/// receiver waits on its own mbarrier, the sender needs no barrier after it. The predicate is inside the asm, so an
/// unrolled sequence of such stores needs no branch of the caller's (ptxas may still jump over each store it skips).
__device__ __forceinline__ void st_async_f4(unsigned addr, float4 v, unsigned bar, bool send) {
  asm volatile(
      "{ .reg .pred p; setp.ne.b32 p, %6, 0;\n"
      "@p st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5]; }\n" ::"r"(addr),
      "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(bar), "r"(int(send))
      : "memory");
}
#endif

/// Atomic add at GPU scope with acquire-release semantics (PTX ISA "atom", memory consistency model): returns the
/// old value. After a block barrier, one thread's release publishes the whole block's earlier writes (cumulativity);
/// its acquire, followed by a block barrier, makes the writes released by other blocks visible to the whole block.
__device__ __forceinline__ unsigned atomic_add_acq_rel_gpu(unsigned* addr, unsigned v) {
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;\n" : "=r"(old) : "l"(addr), "r"(v) : "memory");
  return old;
}

/// Load and store of a 32-bit flag at GPU scope (PTX ISA memory consistency model): relaxed (no ordering, never a
/// stale L1 line), acquire (later reads see what the releasing writer published) and release (earlier writes, and
/// after a block barrier the whole block's, published with it).
__device__ __forceinline__ unsigned ld_relaxed_gpu(const unsigned* addr) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(addr) : "memory");
  return v;
}
__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* addr) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(addr) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(unsigned* addr, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(addr), "r"(v) : "memory");
}

/// Four 8x8 b16 matrices; lane l supplies the address of row (l % 8) of matrix (l / 8).
__device__ __forceinline__ void ldmatrix_x4(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
/// As ldmatrix_x4, each 8x8 matrix transposed.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2,
                                                  unsigned& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

/// D = A * B + D, m16n8k16, A row-major 16x16 (4 regs of 2 elements), B column-major 16x8 (2 regs),
/// D fp32 16x8 (4 regs). Fragment layouts: PTX ISA "Matrix Fragments for mma.m16n8k16".
template <DType DT>
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1);

template <>
__device__ __forceinline__ void mma_16816<DType::f16>(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<DType::bf16>(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                                       unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Packs two fp32 into a 16-bit pair (round to nearest even): lo in bits 0-15, hi in bits 16-31.
template <DType DT>
__device__ __forceinline__ unsigned pack2(float lo, float hi);
template <>
__device__ __forceinline__ unsigned pack2<DType::f16>(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
template <>
__device__ __forceinline__ unsigned pack2<DType::bf16>(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

/// d = a * b + c on 16-bit pairs, one rounding (round to nearest even): fma.rn.f16x2 / fma.rn.bf16x2 (PTX ISA,
/// "Half Precision Floating Point Instructions: fma"; bf16x2 needs sm_80). a * b alone is fma(a, b, -0.0).
template <DType DT>
__device__ __forceinline__ unsigned fma2(unsigned a, unsigned b, unsigned c);
template <>
__device__ __forceinline__ unsigned fma2<DType::f16>(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
template <>
__device__ __forceinline__ unsigned fma2<DType::bf16>(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

/// Byte permute (PTX prmt.b32, default mode): result byte i = byte (sel >> 4i) & 7 of the 8-byte value {b, a}
/// (a holds bytes 0-3); selector bit 4i + 3 replicates that byte's sign bit instead.
__device__ __forceinline__ unsigned prmt(unsigned a, unsigned b, unsigned sel) {
  unsigned d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

/// One fp16 / bf16 element (raw bits) to float.
template <DType DT>
__device__ __forceinline__ float to_float(unsigned short bits);
template <>
__device__ __forceinline__ float to_float<DType::f16>(unsigned short bits) {
  float f;
  asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(bits));
  return f;
}
template <>
__device__ __forceinline__ float to_float<DType::bf16>(unsigned short bits) {
  return __int_as_float(int(unsigned(bits) << 16));
}

/// 2^x (ex2.approx.ftz: max relative error 2^-22 over the full range).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

}  // namespace ptx
}  // namespace kt
