// Building blocks of an attention mainloop on Hopper warpgroups (sm_90a), shared by the attention prefill's
// warp-specialized kernel (attention/flash_fwd_ws.cuh) and the decode family's wgmma mainloop
// (attention_decode/attention_decode.cuh): S = Q K^T by wgmma from shared memory, the online softmax on the
// accumulator (exp2, the softmax scale folded into log2 space; FlashAttention-2's online softmax, Dao 2023), and
// O += P V with P as wgmma's register A operand and V read MN-major. Operands in shared memory are in the 128-byte
// swizzle: a [rows, D] tile is D / 64 column blocks of [rows][64] 16-bit elements (128-byte rows, 16-byte chunk c of
// row r at chunk c ^ (r % 8)), each block 1024-byte aligned. Compiled by NVRTC only.
#pragma once
#include "common/kt_types.h"
#include "common/ptx.cuh"
#if __CUDA_ARCH__ >= 900
#include "common/wgmma.cuh"  // wgmma and its fences exist from sm_90 on
#endif

namespace kt {
namespace attn {

/// One consumer warpgroup's running state: O [64 rows, D] in the wgmma accumulator layout (a thread holds rows
/// r = 16 warp + lane / 4 and r + 8: o[4 i + 2 h + e] = O[r + 8 h][8 i + 2 (lane % 4) + e]), and per held row the
/// raw-score maximum and the thread-partial sum of exp2.
template <int D>
struct WsRows {
  float o[D / 2];
  float row_max[2], row_sum[2];

  /// The state before any key: O = 0, no maximum (-inf), sum 0.
  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    row_max[0] = row_max[1] = ptx::neg_inf();
    row_sum[0] = row_sum[1] = 0.f;
  }
};

#if __CUDA_ARCH__ >= 900

/// Issues S = Q K^T for the warpgroup's 64 rows against TileN keys of a K tile (one commit group; the caller waits):
/// D / 16 wgmma k-steps, Q and K both K-major through 128-byte-swizzle descriptors (a k-step is 32 bytes into a column
/// block, a column block every 4 steps). The Q tile's column blocks hold TileM rows, the K tile's KRows (the keys
/// start at sK, KRows >= TileN: a slice of a taller tile).
template <DType DT, int D, int TileM, int TileN, int KRows = TileN>
__device__ __forceinline__ void ws_scores(float (&s)[TileN / 2], unsigned sQ_rows, unsigned sK) {
  wgmma::fence();
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    const unsigned long long a = wgmma::make_desc_sw128(sQ_rows + (ks / 4) * TileM * 128 + (ks % 4) * 32);
    const unsigned long long b = wgmma::make_desc_sw128(sK + (ks / 4) * KRows * 128 + (ks % 4) * 32);
    if (ks == 0) wgmma::Mma<DT, TileN>::template run<0>(s, a, b);  // S = Q K^T from the first k-step: no zeroing
    else wgmma::Mma<DT, TileN>::run(s, a, b);
  }
  wgmma::commit_group();
  wgmma::fence_operands(s);
}

/// Masks (keys at or past seqlen_k; causal: right of the bottom-right aligned diagonal of the query positions pos) and
/// runs the online softmax step on the two rows the thread holds (a row spread over a quad of lanes): leaves P =
/// exp2(S scale_log2 - max scale_log2) in s, updates the row maxima and sums, and returns in corr the factor that O's
/// rows take (ws_rescale).
template <bool Causal, int D, int TileN>
__device__ __forceinline__ void ws_softmax(float (&s)[TileN / 2], WsRows<D>& st, float (&corr)[2], const int (&pos)[2],
                                           int n0, int seqlen_k, int shift, float scale_log2, bool need_mask) {
  const int t = threadIdx.x % 4;
  if (need_mask) {
#pragma unroll
    for (int i = 0; i < TileN / 8; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = n0 + 8 * i + 2 * t + e;
          if (col >= seqlen_k || (Causal && col > pos[h] + shift)) s[4 * i + 2 * h + e] = ptx::neg_inf();
        }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = st.row_max[h];
#pragma unroll
    for (int i = 0; i < TileN / 8; ++i) mx = fmaxf(mx, fmaxf(s[4 * i + 2 * h], s[4 * i + 2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float base = mx == ptx::neg_inf() ? 0.f : mx * scale_log2;  // a row with no visible key yet: base 0
    const float prev = st.row_max[h] == ptx::neg_inf() ? ptx::neg_inf() : st.row_max[h] * scale_log2;
    corr[h] = ptx::exp2_approx(prev - base);
    st.row_max[h] = mx;
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < TileN / 8; ++i)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& v = s[4 * i + 2 * h + e];
        v = ptx::exp2_approx(fmaf(v, scale_log2, -base));
        sum += v;
      }
    st.row_sum[h] = st.row_sum[h] * corr[h] + sum;
  }
}

/// O's rows times the softmax step's correction (the P V product that accumulates into O has completed).
template <int D>
__device__ __forceinline__ void ws_rescale(WsRows<D>& st, const float (&corr)[2]) {
#pragma unroll
  for (int i = 0; i < D / 8; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      st.o[4 * i + 2 * h] *= corr[h];
      st.o[4 * i + 2 * h + 1] *= corr[h];
    }
}

/// P packed to 16 bits as wgmma A fragments: the m64nNk16 accumulator layout of keys [16 kk, 16 kk + 16) is the A
/// register fragment of k-step kk.
template <DType DT, int TileN>
__device__ __forceinline__ void ws_pack_p(unsigned (&pa)[TileN / 16][4], const float (&s)[TileN / 2]) {
#pragma unroll
  for (int kk = 0; kk < TileN / 16; ++kk)
#pragma unroll
    for (int q = 0; q < 4; ++q) pa[kk][q] = ptx::pack2<DT>(s[8 * kk + 2 * q], s[8 * kk + 2 * q + 1]);
}

/// Issues O += P V (one commit group; the caller waits): TileN keys of a V tile MN-major (head_dim contiguous) through
/// make_desc_sw128_mn: a k-step is 16 key rows (2048 bytes) further, the second 64-wide column block VRows x 128 bytes
/// (the keys start at sV, VRows >= TileN: a slice of a taller tile).
template <DType DT, int D, int TileN, int VRows = TileN>
__device__ __forceinline__ void ws_pv(WsRows<D>& st, unsigned (&pa)[TileN / 16][4], unsigned sV) {
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < TileN / 16; ++kk)
    wgmma::MmaRSTransB<DT, D>::run(st.o, pa[kk], wgmma::make_desc_sw128_mn(sV + kk * 2048, VRows * 128));
  wgmma::commit_group();
  wgmma::fence_operands(st.o);
#pragma unroll
  for (int kk = 0; kk < TileN / 16; ++kk) wgmma::fence_operands(pa[kk]);
}

#endif  // __CUDA_ARCH__ >= 900

}  // namespace attn
}  // namespace kt
