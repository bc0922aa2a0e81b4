// Shared host/device definitions (compiled by the host compiler and by NVRTC).
// No standard headers: NVRTC compiles this without a C++ standard library.
#pragma once

// Functions shared by host and device code are marked KT_HD.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define KT_HD __host__ __device__
#else
#define KT_HD
#endif

namespace kt {

/// Element type of activations (Q/K/V/O, X). Accumulation is always fp32.
///  f16  = IEEE 754 binary16;  bf16 = bfloat16 (8-bit exponent, 7-bit mantissa).
enum class DType : int { f16 = 0, bf16 = 1 };

/// Bytes per element of a DType.
KT_HD constexpr int dtype_bytes(DType) { return 2; }

/// Architecture as an integer: 80, 86, 89, 90 (compute capability major*10+minor) and whether the
/// architecture-specific feature set ("a" suffix, e.g. sm_90a: wgmma, setmaxnreg) is targeted.
struct ArchId {
  int sm;
  bool arch_specific;
};

/// Largest dynamic shared memory one block may request on an architecture, in bytes
/// (CUDA C++ Programming Guide, "Technical Specifications per Compute Capability").
KT_HD constexpr int max_smem_per_block(int sm) {
  return sm >= 90 ? 227 * 1024 : sm == 80 || sm == 87 ? 163 * 1024 : sm >= 86 ? 99 * 1024 : 48 * 1024;
}

/// A TMA tensor map (CUDA Driver API CUtensorMap: 128 opaque bytes, 128-byte aligned as in CUDA 13), encoded on the
/// host by cuTensorMapEncodeTiled and read by cp.async.bulk.tensor from the kernel's parameter space.
struct alignas(128) TmaDescriptor {
  unsigned long long opaque[16];
};

}  // namespace kt
