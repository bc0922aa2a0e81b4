// [gpu] the Hopper prefill mainloop (flash_fwd_ws.cuh: TMA + mbarrier ring, wgmma, warp-specialized) against the
// float64 reference, every output and LSE element poisoned before each launch: every dtype, head_dim, causal mode,
// tile_n and consumer count on the edge-case problems of the mma.sync tests. The kernel is launched directly (the
// family's configs do not list it yet): Q, K and V as 4-D tensor maps {head_dim, seqlen, heads, batch}, box
// {64, 64, 1, 1}, 128-byte swizzle.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "cuda/driver.h"
#include "generator/arch.h"
#include "generator/attention_family.h"
#include "generator/compiler.h"
#include "runtime/loaded_kernel.h"
#include "tests/support.h"
#include "tuner/attention_harness.h"

using namespace kt;
using namespace kt::attn;

namespace {

TmaDescriptor encode_4d(const void* base, const Problem& p, bool is_q, long long row, long long head, long long batch) {
  TmaDescriptor d;
  const cuuint64_t dims[4] = {cuuint64_t(p.head_dim), cuuint64_t(is_q ? p.seqlen_q : p.seqlen_k),
                              cuuint64_t(is_q ? p.num_heads : p.num_kv_heads), cuuint64_t(p.batch)};
  const cuuint64_t strides[3] = {cuuint64_t(row * 2), cuuint64_t(head * 2), cuuint64_t(batch * 2)};
  const cuuint32_t box[4] = {64, 64, 1, 1};
  const cuuint32_t estrides[4] = {1, 1, 1, 1};
  cuda::check(cuda::api().cuTensorMapEncodeTiled(reinterpret_cast<CUtensorMap*>(&d), CU_TENSOR_MAP_DATA_TYPE_UINT16, 4,
                                                 const_cast<void*>(base), dims, strides, box, estrides,
                                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
              "cuTensorMapEncodeTiled (attention 4-D)");
  return d;
}

Problem make(DType dt, int b, int sq, int sk, int h, int hkv, int d, bool causal) {
  Problem p;
  p.dtype = dt;
  p.batch = b;
  p.seqlen_q = sq;
  p.seqlen_k = sk;
  p.num_heads = h;
  p.num_kv_heads = hkv;
  p.head_dim = d;
  p.causal = causal;
  return p;
}

}  // namespace

TEST_CASE("flash_fwd_ws: every tile_n and consumer count matches the float64 reference on edge-case problems",
          "[gpu][attention]") {
  cuda::Context ctx(0);
  cuda::Stream stream;
  const auto info = cuda::device_info(0);
  const ArchId arch{info.cc_major * 10 + info.cc_minor, info.cc_major == 9};
  if (!(arch.sm == 90 && arch.arch_specific)) {
    kt_test::skip("the wgmma mainloop needs sm_90a; this GPU is sm_" + std::to_string(arch.sm));
    return;
  }
  Compiler compiler(nullptr);
  for (DType dt : {DType::f16, DType::bf16})
    for (int d : {64, 128})
      for (bool causal : {false, true})
        for (int tile_n : {64, 128})
          for (int consumers : {1, 2}) {
            KernelSource k;
            k.family = kFamily;
            k.variant_name = std::string("flash_fwd_ws_") + (dt == DType::f16 ? "f16" : "bf16") + "_d" +
                             std::to_string(d) + (causal ? "_causal" : "") + "_n" + std::to_string(tile_n) + "_c" +
                             std::to_string(consumers);
            k.name_expression = std::string("kt::attn::flash_fwd_ws<kt::DType::") +
                                (dt == DType::f16 ? "f16" : "bf16") + ", " + std::to_string(d) + ", " +
                                (causal ? "true" : "false") + ", " + std::to_string(tile_n) + ", " +
                                std::to_string(consumers) + ", 2>";
            k.source = "#include \"attention/flash_fwd_ws.cuh\"\n";
            k.arch = arch;
            const int tile_m = 64 * consumers;
            k.dynamic_smem_bytes = unsigned(1024 + tile_m * d * 2 + 2 * 2 * tile_n * d * 2);
            const CompileResult r = compiler.compile(k);
            INFO(k.variant_name << "\n" << r.error);
            REQUIRE(r.ok);
            const LoadedKernel kernel(r.cubin, r.report.lowered_name, k.dynamic_smem_bytes);
            for (const Problem& p : {make(dt, 1, 37, 37, 7, 1, d, causal), make(dt, 2, 1, 577, 8, 1, d, causal),
                                     make(dt, 1, 577, 37, 4, 1, d, causal), make(dt, 1, 100, 1000, 7, 1, d, causal),
                                     make(dt, 2, 129, 255, 14, 2, d, causal)}) {
              INFO(p.key() << " with " << k.variant_name);
              const HostInputs in = make_inputs(p, 17);
              const float scale = contiguous_params(p, nullptr, nullptr, nullptr, nullptr, nullptr).softmax_scale;
              const RefRows ref = reference_rows(in, scale, 1 << 14, 18);
              DeviceProblem dev(in, 1, true);
              dev.poison();
              FwdTmaParams tp{};
              tp.p = dev.params(0, 0.f);
              tp.q_map = encode_4d(tp.p.q, p, true, tp.p.q_row_stride, tp.p.q_head_stride, tp.p.q_batch_stride);
              tp.k_map = encode_4d(tp.p.k, p, false, tp.p.k_row_stride, tp.p.k_head_stride, tp.p.k_batch_stride);
              tp.v_map = encode_4d(tp.p.v, p, false, tp.p.v_row_stride, tp.p.v_head_stride, tp.p.v_batch_stride);
              kernel.launch(unsigned((p.seqlen_q + tile_m - 1) / tile_m), unsigned(p.num_heads), unsigned(p.batch),
                            unsigned(128 * (consumers + 1)), k.dynamic_smem_bytes, stream.get(), &tp);
              stream.synchronize();
              std::vector<uint16_t> out;
              std::vector<float> lse;
              dev.download(0, out, lse);
              const Verdict v = verify(in, ref, out, lse);
              INFO("rel_l2 " << v.rel_l2 << ", lse err " << v.lse_max_err << ": " << v.message);
              CHECK(v.pass);
            }
          }
}
