// Fused Q/K/V projection, weight-streaming mainloop for decode-sized M ("gemv", Config::mainloop = kMainloopGemv).
//
// At small M the projection is bound by reading the packed weight once (8-9 MB for Qwen2.5-7B in 4-bit), and by
// latency: every serialized round trip to memory (a K step that waits for the previous one, a split-K partial
// written, fenced and re-read) costs about a microsecond against a 3 us weight-read floor. This kernel has one
// round trip to HBM per warp, one block barrier, and no global workspace:
//
//   Swap-AB mma.sync m16n8k16: the weight is the A operand (16 output features per m16 tile), the tokens are the
//   B operand's n8 columns: Y^T[n, m] = sum_k W[n, k] X[m, k].
//
//   RoPE-paired rows: m16 tile T of head h holds features h*D + j0 + g (rows g = 0..7) and h*D + D/2 + j0 + g
//   (rows g + 8), j0 = 8 * (T mod D/16). The rotate-half partners (i, i + D/2) of a head therefore sit in one
//   thread's accumulators (c0/c1 and c2/c3 of the C fragment), and the whole epilogue (bias, RoPE, the split into
//   Q/K/V) runs in registers.
//
//   K order is free inside a dot product, so each lane of an mma quad (q = lane % 4) reads one contiguous 16-byte
//   unit of packed weight per row and step (32 4-bit / 16 int8 / 8 16-bit elements at k = step * tile_k + q *
//   unit) and uses it as its own A-fragment elements: mma u of the unit takes physical elements 4u..4u+3 as the
//   fragment's logical k {2q, 2q+1, 2q+8, 2q+9}. Its B fragment is read from X at the same physical k (lane g =
//   lane / 4 is the token), so A and B agree on every k. Coalesced 64-byte row segments per quad, no shuffles.
//
//   warps_m warps split K inside the block (each keeps `Prefetch` steps of weight and X in flight in a register
//   ring, so with prefetch >= its steps a warp issues all its loads at once); their partial sums meet in shared memory
//   after the single barrier, and the warps of K slice 0 finish the tile. warps_n warps side by side each own
//   tile_n / warps_n / 16 m16 tiles. Bias, positions and RoPE frequencies are loaded before the mainloop.
//
// Dequantization: decode_chunk (qkv_proj.cuh), i.e. quant_format.h's value rules in fp32, rounded to the mma
// operand dtype: the same operand values as the tiled mainloop. RoPE: Su et al., RoFormer (2021), rotate-half
// pairing (i, i + D/2) of Llama/Qwen, angle = pos * theta^(-2i/D) reduced mod 2 pi in double.
#pragma once
#include "qkv_proj/qkv_proj.cuh"

namespace kt {
namespace qkv {

/// Scales of one 16-byte unit read from the shared-memory copy of the block's rows (stages 1): sc / zp point at
/// the row's scale / zero-point bytes (quant_format.h layouts), k0 is the unit's first element.
template <quant::Format F>
__device__ __forceinline__ UnitScales smem_scales(const unsigned char* sc, const unsigned char* zp, int k0, float tensor_scale) {
  UnitScales s{1.f, 1.f, 0.f};
  if (F == quant::Format::int8) {
    s.s0 = *reinterpret_cast<const float*>(sc);
  } else if (F == quant::Format::int4) {
    s.s0 = ptx::to_float<DType::f16>(reinterpret_cast<const unsigned short*>(sc)[k0 / 128]);
    s.z = float(zp[k0 / 128]);
  } else if (F == quant::Format::nf4) {
    s.s0 = reinterpret_cast<const float*>(sc)[k0 / 64];
  } else if (F == quant::Format::mxfp4) {
    const unsigned e = sc[k0 / 32];
    s.s0 = e == 255u ? __int_as_float(0x7fc00000) : (e == 0u ? 5.877471754111438e-39f : __int_as_float(int(e << 23)));
  } else if (F == quant::Format::nvfp4) {
    s.s0 = e4m3_to_float(sc[k0 / 16]) * tensor_scale;
    s.s1 = e4m3_to_float(sc[k0 / 16 + 1]) * tensor_scale;
  }
  return s;
}

template <DType DT, int F_, int D, bool HasBias, bool Rope, int TileM, int TileN, int WarpsK, int WarpsN, int Prefetch,
          int Stages>
__global__ void __launch_bounds__(WarpsK * WarpsN * 32, 1) qkv_gemv(const QkvParams p) {
  constexpr quant::Format F = static_cast<quant::Format>(F_);
  constexpr Config C{TileM, TileN, gemv_step_k(F), WarpsK, WarpsN, Stages, 1, Prefetch, kMainloopGemv};
  constexpr bool kBulk = Stages == 1;
  static_assert(invalid_reason(DT, F, D, Rope, C, ArchId{__CUDA_ARCH__ / 10, KT_ARCH_SPECIFIC}) == nullptr,
                "invalid qkv_gemv variant: see invalid_reason() in qkv_proj_config.h");
  constexpr int R = gemv_row_tiles(C);               // m16 tiles per warp
  constexpr int NT = TileM / 8;                      // n8 token tiles
  constexpr int kBits = quant::format_bits(F);
  constexpr int kUnitElems = 128 / kBits;            // elements per 16-byte unit
  constexpr int kStepK = 4 * kUnitElems;             // K per warp step
  constexpr int kWords = kUnitElems / 2;             // dtype pairs per unit
  constexpr int kTilesPerHead = D / 16;

  // Dynamic shared memory: [WarpsK - 1][WarpsN][R][NT][32 lanes] float4 partials, then (stages 1) the block's rows:
  // data [WarpsN * R tiles][16 rows][row bytes], scales [..][16][scale bytes], zero points [..][16][zero bytes]; row
  // 8 h + g of a tile is its RoPE-paired row (g, h).
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float s_lut[16];
  __shared__ __align__(8) unsigned long long s_bar;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, q = lane % 4;
  const int wn = warp % WarpsN, wk = warp / WarpsN;
  const int m0 = blockIdx.y * TileM;
  const int heads = p.num_heads + 2 * p.num_kv_heads;
  const int tiles_total = heads * kTilesPerHead;

  // K steps of this warp's slice.
  const int steps_total = (p.k_dim + kStepK - 1) / kStepK;
  const int s_begin = steps_total * wk / WarpsK, s_end = steps_total * (wk + 1) / WarpsK;
  const int nsteps = s_end - s_begin;

  if (tid < 16) s_lut[tid] = lut_value<F>(tid);

  // ---- rows: m16 tile T = (blockIdx.x * WarpsN + wn) * R + r, RoPE-paired (see the top of the file) ----
  int head[R], pair[R];  // head index in [Q | K | V], pair index i in [0, D/2) of row g (row g + 8: i + D/2)
  bool tile_in[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int T = (blockIdx.x * WarpsN + wn) * R + r;
    tile_in[r] = T < tiles_total;
    head[r] = T / kTilesPerHead;
    pair[r] = (T % kTilesPerHead) * 8 + g;
  }
  auto row_of = [&](int r, int h) { return head[r] * D + pair[r] + h * (D / 2); };

  // ---- stages 1: request the block's rows (data by bulk copy, scales / zero points by 4-byte cp.async) ----
  const unsigned char* wdata = static_cast<const unsigned char*>(p.w_data);
  const long long w_row_bytes = (long long)p.k_dim * kBits / 8;
  const int row_bytes = row_data_bytes(F, p.k_dim), srow_bytes = row_scale_bytes(F, p.k_dim),
            zrow_bytes = row_zero_bytes(F, p.k_dim);
  constexpr int kBlockTiles = WarpsN * R;
  constexpr int kPartialBytes = (WarpsK - 1) * WarpsN * R * NT * 32 * 16;
  unsigned char* s_data = smem + kPartialBytes;
  unsigned char* s_scale = s_data + kBlockTiles * 16 * row_bytes;
  unsigned char* s_zero = s_scale + kBlockTiles * 16 * srow_bytes;
  const unsigned bar = ptx::smem_u32(&s_bar);
  if (kBulk) {
#if __CUDA_ARCH__ >= 900
    if (tid == 0) ptx::mbarrier_init(bar, 1);
    __syncthreads();  // the barrier is initialized before anyone waits on it
    const int tile0 = blockIdx.x * kBlockTiles;
    const int tiles_here = tiles_total - tile0 < kBlockTiles ? tiles_total - tile0 : kBlockTiles;
    if (tid == 0) {
      ptx::mbarrier_arrive_expect_tx(bar, unsigned(tiles_here * 16 * row_bytes));
      for (int bt = 0; bt < tiles_here; ++bt)
        for (int h = 0; h < 2; ++h) {  // 8 consecutive weight rows per (tile, half): one bulk copy each
          const int T = tile0 + bt;
          const int row0 = (T / kTilesPerHead) * D + (T % kTilesPerHead) * 8 + h * (D / 2);
          ptx::bulk_copy_g2s(ptx::smem_u32(s_data + (bt * 16 + 8 * h) * row_bytes), wdata + row0 * w_row_bytes,
                             unsigned(8 * row_bytes), bar);
        }
    }
    // Scales and zero points: 8 rows are contiguous in global memory too; 4-byte words (K is a multiple of 64).
    const unsigned char* gsc = static_cast<const unsigned char*>(p.w_scales);
    const unsigned char* gzp = static_cast<const unsigned char*>(p.w_zeros);
    for (int part = 0; part < 2; ++part) {
      const int rb = part == 0 ? srow_bytes : zrow_bytes;
      if (rb == 0) continue;
      const unsigned char* src = part == 0 ? gsc : gzp;
      unsigned char* dst = part == 0 ? s_scale : s_zero;
      const int words = tiles_here * 2 * (8 * rb / 4);
      for (int w = tid; w < words; w += WarpsK * WarpsN * 32) {
        const int grp = w / (8 * rb / 4), off = (w % (8 * rb / 4)) * 4;  // group = (tile, half) of 8 rows
        const int bt = grp / 2, h = grp % 2, T = tile0 + bt;
        const int row0 = (T / kTilesPerHead) * D + (T % kTilesPerHead) * 8 + h * (D / 2);
        ptx::cp_async_4(ptx::smem_u32(dst + (bt * 16 + 8 * h) * rb + off), src + (long long)row0 * rb + off);
      }
    }
#endif
  }

  // ---- register ring: Prefetch steps of X (token m0 + 8 t + g, the lane's kUnitElems elements of the step; zero
  //      past M or K) and, for stages 0, of weight (R tiles x rows (g, g + 8)) ----
  const unsigned short* x = static_cast<const unsigned short*>(p.x);
  uint4 wreg[kBulk ? 1 : Prefetch][R][2];
  UnitScales sreg[kBulk ? 1 : Prefetch][R][2];
  uint4 xreg[Prefetch][NT][kWords / 4];
  auto load_w = [&](int slot, int step) {
    const int k0 = step * kStepK + q * kUnitElems;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const int m = m0 + 8 * t + g;
      const uint4* src = reinterpret_cast<const uint4*>(x + (long long)m * p.x_row_stride + k0);
#pragma unroll
      for (int c = 0; c < kWords / 4; ++c)
        xreg[slot][t][c] = (m < p.m && k0 < p.k_dim) ? __ldg(src + c) : make_uint4(0, 0, 0, 0);
    }
    if (!kBulk) {
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row_of(r, h);
          if (k0 < p.k_dim && tile_in[r]) {
            wreg[kBulk ? 0 : slot][r][h] =
                __ldg(reinterpret_cast<const uint4*>(wdata + row * w_row_bytes + (long long)k0 * kBits / 8));
            sreg[kBulk ? 0 : slot][r][h] = load_scales<F>(p, row, k0);
          } else {
            wreg[kBulk ? 0 : slot][r][h] = make_uint4(0, 0, 0, 0);
            sreg[kBulk ? 0 : slot][r][h] = UnitScales{0.f, 0.f, 0.f};
          }
        }
    }
  };
#pragma unroll
  for (int pp = 0; pp < Prefetch; ++pp)
    if (pp < nsteps) load_w(pp, s_begin + pp);

  // ---- epilogue inputs, loaded while the weight is in flight (K slice 0 only) ----
  float bias_v[R][2] = {};
  double inv_freq[R] = {};
  int pos[NT][2] = {};
  if (wk == 0) {
    const unsigned short* bias = static_cast<const unsigned short*>(p.bias);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (HasBias && tile_in[r]) {
        bias_v[r][0] = ptx::to_float<DT>(bias[row_of(r, 0)]);
        bias_v[r][1] = ptx::to_float<DT>(bias[row_of(r, 1)]);
      }
      if (Rope) inv_freq[r] = exp2(-double(2 * pair[r]) / double(D) * p.rope_log2_theta);
    }
    if (Rope) {
#pragma unroll
      for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int m = m0 + 8 * t + 2 * q + i;
          pos[t][i] = m < p.m ? p.positions[m] : 0;
        }
    }
  }

  float acc[R][NT][4];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[r][t][e] = 0.f;

  if (kBulk) {
#if __CUDA_ARCH__ >= 900
    ptx::cp_async_wait_all();
    __syncthreads();            // s_lut, scales and zero points visible to the block
    ptx::mbarrier_wait(bar, 0);  // the rows' bulk copies have landed
#endif
  } else {
    __syncthreads();  // s_lut
  }

  // The loop is unrolled by Prefetch so that every register-ring slot index is a compile-time constant.
  for (int j0 = 0; j0 < nsteps; j0 += Prefetch) {
#pragma unroll
    for (int pp = 0; pp < Prefetch; ++pp) {
      const int j = j0 + pp;
      if (j < nsteps) {
        const int step = s_begin + j;
        if (kBulk) {  // this step's units and scales from the shared-memory copy of rows (g, h) of tiles wn * R + r
          const int k0 = step * kStepK + q * kUnitElems;
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int lr = (wn * R + r) * 16 + 8 * h + g;
              const bool in = k0 < p.k_dim && tile_in[r];
              wreg[0][r][h] = in ? *reinterpret_cast<const uint4*>(s_data + lr * row_bytes + k0 * kBits / 8) : make_uint4(0, 0, 0, 0);
              sreg[0][r][h] = in ? smem_scales<F>(s_scale + lr * srow_bytes, s_zero + lr * zrow_bytes, k0, p.tensor_scale)
                                 : UnitScales{0.f, 0.f, 0.f};
            }
        }
        // Per chunk of the unit (4 dtype pairs = 2 mma k16 steps): dequantize both rows of every m16 tile and multiply
        // with the matching X words.
#pragma unroll
        for (int c = 0; c < kWords / 4; ++c) {
          unsigned wa[R][2][4];
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h) decode_chunk<DT, F>(wreg[kBulk ? 0 : pp][r][h], sreg[kBulk ? 0 : pp][r][h], s_lut, c, wa[r][h]);
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            const uint4 xv = xreg[pp][t][c];
#pragma unroll
            for (int r = 0; r < R; ++r) {
              const unsigned a0[4] = {wa[r][0][0], wa[r][1][0], wa[r][0][1], wa[r][1][1]};
              const unsigned a1[4] = {wa[r][0][2], wa[r][1][2], wa[r][0][3], wa[r][1][3]};
              ptx::mma_16816<DT>(acc[r][t], a0, xv.x, xv.y);
              ptx::mma_16816<DT>(acc[r][t], a1, xv.z, xv.w);
            }
          }
        }
        if (j + Prefetch < nsteps) load_w(pp, step + Prefetch);  // refill the slot just consumed
      }
    }
  }

  // ---- K slices meet in shared memory (same fragment layout, one float4 per lane: conflict-free) ----
  float4* part = reinterpret_cast<float4*>(smem);
  auto slot = [&](int k_slice, int r, int t) { return (((k_slice - 1) * WarpsN + wn) * R * NT + r * NT + t) * 32 + lane; };
  if (WarpsK > 1) {
    if (wk > 0) {
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < NT; ++t) part[slot(wk, r, t)] = make_float4(acc[r][t][0], acc[r][t][1], acc[r][t][2], acc[r][t][3]);
    }
    __syncthreads();
    if (wk > 0) return;
#pragma unroll 1
    for (int s = 1; s < WarpsK; ++s)
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          const float4 v = part[slot(s, r, t)];
          acc[r][t][0] += v.x;
          acc[r][t][1] += v.y;
          acc[r][t][2] += v.z;
          acc[r][t][3] += v.w;
        }
  }

  // ---- epilogue in registers: C fragment e = 2 h + i -> feature row g + 8 h (pair partner h = 1), token 2 q + i ----
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (!tile_in[r]) continue;
    const bool is_q = head[r] < p.num_heads, is_k = !is_q && head[r] < p.num_heads + p.num_kv_heads;
    const bool rotate = Rope && (is_q || is_k);
    unsigned short* out;
    long long stride;
    int local_head;
    if (is_q) {
      out = static_cast<unsigned short*>(p.q);
      stride = p.q_row_stride;
      local_head = head[r];
    } else if (is_k) {
      out = static_cast<unsigned short*>(p.k);
      stride = p.k_row_stride;
      local_head = head[r] - p.num_heads;
    } else {
      out = static_cast<unsigned short*>(p.v);
      stride = p.v_row_stride;
      local_head = head[r] - p.num_heads - p.num_kv_heads;
    }
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int m = m0 + 8 * t + 2 * q + i;
        if (m >= p.m) continue;
        float y1 = acc[r][t][i] + bias_v[r][0], y2 = acc[r][t][2 + i] + bias_v[r][1];
        if (rotate) {
          double ang = double(pos[t][i]) * inv_freq[r];
          ang -= 6.283185307179586 * rint(ang * 0.15915494309189535);  // exact reduction to [-pi, pi] in double
          float sn, cs;
          __sincosf(float(ang), &sn, &cs);  // |error| < 2^-21 on [-pi, pi]
          const float o1 = y1 * cs - y2 * sn, o2 = y2 * cs + y1 * sn;
          y1 = o1;
          y2 = o2;
        }
        const unsigned pr = ptx::pack2<DT>(y1, y2);
        unsigned short* dst = out + (long long)m * stride + (long long)local_head * D + pair[r];
        dst[0] = (unsigned short)(pr & 0xffffu);
        dst[D / 2] = (unsigned short)(pr >> 16);
      }
  }
}

}  // namespace qkv
}  // namespace kt
