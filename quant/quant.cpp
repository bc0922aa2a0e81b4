// Quantizers, exact dequantization and layout validation of kerntune's packed weight formats
// (templates/qkv_proj/quant_format.h).
#include "quant/quant.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "quant/quant_internal.h"
#include "reference/dtype_convert.h"

namespace kt::quant {

namespace {

constexpr float kNf4[16] = KT_NF4_CODE;

void put_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xFF);
  p[1] = static_cast<uint8_t>(v >> 8);
}
uint16_t get_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
void put_f32(uint8_t* p, float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(u >> (8 * i));
}
float get_f32(const uint8_t* p) {
  uint32_t u = 0;
  for (int i = 0; i < 4; ++i) u |= static_cast<uint32_t>(p[i]) << (8 * i);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
void put_nibble(std::vector<uint8_t>& data, size_t row_bytes, int r, int c, uint8_t q) {
  uint8_t& b = data[static_cast<size_t>(r) * row_bytes + static_cast<size_t>(c) / 2];
  b = (c & 1) ? static_cast<uint8_t>((b & 0x0F) | (q << 4)) : static_cast<uint8_t>((b & 0xF0) | (q & 0x0F));
}
uint8_t get_nibble(const std::vector<uint8_t>& data, size_t row_bytes, int r, int c) {
  const uint8_t b = data[static_cast<size_t>(r) * row_bytes + static_cast<size_t>(c) / 2];
  return (c & 1) ? static_cast<uint8_t>(b >> 4) : static_cast<uint8_t>(b & 0x0F);
}

size_t row_bytes(Format f, int k) { return static_cast<size_t>(k) * format_bits(f) / 8; }
/// Byte offset of 16-bit element (r, c) of an n x k weight: r * 2k + 2c (fp16 / bf16) or, K-blocked,
/// ((c / 64) n + r) 128 + 2 (c % 64) (quant_format.h).
size_t u16_offset(Format f, int n, int k, int r, int c) {
  if (format_k_blocked(f)) return ((static_cast<size_t>(c / 64) * n + r) * 64 + static_cast<size_t>(c % 64)) * 2;
  return (static_cast<size_t>(r) * k + c) * 2;
}
int groups_per_row(Format f, int k) {
  const int g = format_group(f);
  return g > 0 ? k / g : g < 0 ? 1 : 0;
}
size_t expected_scale_bytes(Format f, int n, int k) {
  return static_cast<size_t>(n) * groups_per_row(f, k) * scale_bytes(f);
}

std::string fmt_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void check_shape(const char* what, Format f, int n, int k) {
  const std::string pre =
      std::string(what) + "(" + format_name(f) + ", n=" + std::to_string(n) + ", k=" + std::to_string(k) + "): ";
  if (n < 1) throw std::invalid_argument(pre + "n must be >= 1 (got " + std::to_string(n) + ")");
  if (k < 1) throw std::invalid_argument(pre + "k must be >= 1 (got " + std::to_string(k) + ")");
  if (k % 64 != 0)
    throw std::invalid_argument(pre + "k must be a multiple of 64, the kernels' k step (got " + std::to_string(k) +
                                ")");
  const int g = format_group(f);
  if (g > 0 && k % g != 0)
    throw std::invalid_argument(pre + "k must be a multiple of the group size " + std::to_string(g) + " (got " +
                                std::to_string(k) + ")");
  if (const std::string e = k_block_error(f, k); !e.empty()) throw std::invalid_argument(pre + e);
}

}  // namespace

const char* format_name(Format f) {
  switch (f) {
    case Format::fp16: return "fp16";
    case Format::bf16: return "bf16";
    case Format::int8: return "int8";
    case Format::int4: return "int4";
    case Format::nf4: return "nf4";
    case Format::mxfp4: return "mxfp4";
    case Format::nvfp4: return "nvfp4";
    case Format::fp16_kb64: return "fp16_kb64";
    case Format::bf16_kb64: return "bf16_kb64";
    case Format::int8_kb64: return "int8_kb64";
    case Format::int4_kb128: return "int4_kb128";
    case Format::nf4_kb128: return "nf4_kb128";
    case Format::mxfp4_kb128: return "mxfp4_kb128";
    case Format::nvfp4_kb128: return "nvfp4_kb128";
  }
  throw std::invalid_argument("format_name: invalid Format value " + std::to_string(static_cast<int>(f)));
}

Format parse_format(const std::string& name) {
  for (int i = 0; i < kFormatCount; ++i)
    if (name == format_name(Format(i))) return Format(i);
  throw std::invalid_argument("unknown weight format '" + name +
                              "' (expected fp16, bf16, int8, int4, nf4, mxfp4, nvfp4, fp16_kb64, bf16_kb64, int8_kb64, "
                              "int4_kb128, nf4_kb128, mxfp4_kb128 or nvfp4_kb128)");
}

std::string describe(const PackedWeight& pw) {
  const int fi = static_cast<int>(pw.format);
  const std::string fname = fi >= 0 && fi < kFormatCount ? format_name(pw.format) : "format " + std::to_string(fi);
  return "PackedWeight(" + fname + ", n=" + std::to_string(pw.n) + ", k=" + std::to_string(pw.k) + ")";
}

void validate(const PackedWeight& pw) {
  const std::string pre = describe(pw) + ": ";
  const int fi = static_cast<int>(pw.format);
  if (fi < 0 || fi >= kFormatCount) throw std::invalid_argument(pre + "format is not a valid Format");
  if (pw.n < 1) throw std::invalid_argument(pre + "n must be >= 1");
  if (pw.k < 1) throw std::invalid_argument(pre + "k must be >= 1");
  if (pw.k % 64 != 0) throw std::invalid_argument(pre + "k must be a multiple of 64");
  const Format f = pw.format;
  const int g = format_group(f);
  if (g > 0 && pw.k % g != 0)
    throw std::invalid_argument(pre + "k must be a multiple of the group size " + std::to_string(g));
  const size_t want_data = static_cast<size_t>(pw.n) * row_bytes(f, pw.k);
  if (pw.data.size() != want_data)
    throw std::invalid_argument(pre + "data has " + std::to_string(pw.data.size()) + " bytes, expected " +
                                std::to_string(want_data) + " ([n, k*" + std::to_string(format_bits(f)) + "/8])");
  const size_t want_scales = expected_scale_bytes(f, pw.n, pw.k);
  if (pw.scales.size() != want_scales) {
    const std::string shape = g < 0 ? "[n]" : g == 0 ? "none" : "[n, k/" + std::to_string(g) + "]";
    throw std::invalid_argument(pre + "scales has " + std::to_string(pw.scales.size()) + " bytes, expected " +
                                std::to_string(want_scales) + " (" + shape + " x " + std::to_string(scale_bytes(f)) +
                                " bytes)");
  }
  const Format el = format_element(f);
  if (const std::string e = k_block_error(f, pw.k); !e.empty()) throw std::invalid_argument(pre + e);
  const size_t want_zeros = el == Format::int4 ? static_cast<size_t>(pw.n) * (pw.k / 128) : 0;
  if (pw.zeros.size() != want_zeros)
    throw std::invalid_argument(pre + "zeros has " + std::to_string(pw.zeros.size()) + " bytes, expected " +
                                std::to_string(want_zeros) +
                                (el == Format::int4 ? " ([n, k/128] x 1 byte)" : " (int4 only)"));
  for (size_t i = 0; i < pw.zeros.size(); ++i)
    if (pw.zeros[i] > 15)
      throw std::invalid_argument(pre + "zeros[" + std::to_string(i) + "] = " + std::to_string(pw.zeros[i]) +
                                  " is not a 4-bit zero point (0..15)");
  // 16-bit weights hold finite values (quantize refuses NaN, infinity and fp16 overflow): an fp16 / bf16 NaN or
  // infinity would poison every output row it is multiplied into.
  if (el == Format::fp16 || el == Format::bf16) {
    const uint16_t exp_mask = el == Format::fp16 ? 0x7C00 : 0x7F80;
    const size_t count = pw.data.size() / 2;
    for (size_t i = 0; i < count; ++i) {
      const uint16_t h = get_u16(&pw.data[2 * i]);
      if ((h & exp_mask) != exp_mask) continue;
      size_t r = i / static_cast<size_t>(pw.k), c = i % static_cast<size_t>(pw.k);
      if (format_k_blocked(f)) {  // i = ((c / 64) n + r) 64 + c % 64
        const size_t slab = static_cast<size_t>(pw.n) * 64;
        r = i % slab / 64;
        c = i / slab * 64 + i % 64;
      }
      char bits[8];
      std::snprintf(bits, sizeof bits, "0x%04X", h);
      throw std::invalid_argument(pre + "data element w[" + std::to_string(r) + ", " + std::to_string(c) +
                                  "] = " + bits + " is " + ((h & (exp_mask ^ 0x7FFF)) ? "NaN" : "infinite") +
                                  " (a packed weight holds finite values)");
    }
  }
  const size_t entries = want_scales / (scale_bytes(f) > 0 ? scale_bytes(f) : 1);
  for (size_t i = 0; i < (scale_bytes(f) > 0 ? entries : 0); ++i) {
    const uint8_t* p = pw.scales.data() + i * scale_bytes(f);
    bool bad = false;
    switch (el) {
      case Format::int8:
      case Format::nf4: bad = !std::isfinite(get_f32(p)); break;
      case Format::int4: bad = !std::isfinite(half_to_float(get_u16(p))); break;
      case Format::mxfp4: bad = p[0] == 255; break;
      case Format::nvfp4: bad = (p[0] & 0x7F) == 0x7F; break;
      default: break;
    }
    if (bad) throw std::invalid_argument(pre + "scales entry " + std::to_string(i) + " is NaN or infinite");
    // int8 and nf4 scales are absmax values (absmax / 127 for int8): a negative one would flip the sign of its row or
    // block, which quantize never produces and bitsandbytes never stores.
    if ((el == Format::int8 || el == Format::nf4) && get_f32(p) < 0)
      throw std::invalid_argument(pre + "scales entry " + std::to_string(i) + " is negative (" +
                                  fmt_double(get_f32(p)) + "); " + format_name(el) + " scales are absmax values, >= 0");
  }
  if (el == Format::nvfp4) {
    if (!(std::isfinite(pw.tensor_scale) && pw.tensor_scale >= std::numeric_limits<float>::min()))
      throw std::invalid_argument(pre +
                                  "tensor_scale must be finite and >= 2^-126 (the smallest normal fp32; a "
                                  "kernel that flushes subnormals to zero would zero the weight), got " +
                                  fmt_double(pw.tensor_scale));
  } else if (pw.tensor_scale != 1.f) {
    throw std::invalid_argument(pre + "tensor_scale must be 1 for " + format_name(f) + " (got " +
                                fmt_double(pw.tensor_scale) + ")");
  }
}

PackedWeight quantize(Format f, const float* w, int n, int k) {
  const int fi = static_cast<int>(f);
  if (fi < 0 || fi >= kFormatCount) throw std::invalid_argument("quantize: invalid Format value " + std::to_string(fi));
  check_shape("quantize", f, n, k);
  if (format_packed_k_blocked(f)) return to_k_blocked(quantize(format_element(f), w, n, k));  // (k checked above)
  const std::string pre =
      std::string("quantize(") + format_name(f) + ", n=" + std::to_string(n) + ", k=" + std::to_string(k) + "): ";
  if (!w) throw std::invalid_argument(pre + "w is null");
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < k; ++c)
      if (!std::isfinite(w[static_cast<size_t>(r) * k + c]))
        throw std::invalid_argument(pre + "w[" + std::to_string(r) + ", " + std::to_string(c) + "] is not finite (" +
                                    fmt_double(w[static_cast<size_t>(r) * k + c]) + ")");

  PackedWeight pw;
  pw.format = f;
  pw.n = n;
  pw.k = k;
  const size_t rb = row_bytes(f, k);
  pw.data.assign(static_cast<size_t>(n) * rb, 0);
  pw.scales.assign(expected_scale_bytes(f, n, k), 0);
  if (f == Format::int4) pw.zeros.assign(static_cast<size_t>(n) * (k / 128), 0);
  const int g = format_group(f);
  const int gpr = groups_per_row(f, k);
  auto W = [&](int r, int c) { return w[static_cast<size_t>(r) * k + c]; };
  auto block_absmax = [&](int r, int c0, int len) {
    float a = 0;
    for (int c = c0; c < c0 + len; ++c) a = std::max(a, std::fabs(W(r, c)));
    return a;
  };

  switch (f) {
    case Format::fp16:
    case Format::bf16:
    case Format::fp16_kb64:
    case Format::bf16_kb64: {
      const bool half = format_element(f) == Format::fp16;
      for (int r = 0; r < n; ++r)
        for (int c = 0; c < k; ++c) {
          const uint16_t h = half ? float_to_half(W(r, c)) : float_to_bf16(W(r, c));
          const float back = half ? half_to_float(h) : bf16_to_float(h);
          if (!std::isfinite(back))
            throw std::invalid_argument(pre + "w[" + std::to_string(r) + ", " + std::to_string(c) +
                                        "] = " + fmt_double(W(r, c)) + " overflows " + format_name(f));
          put_u16(&pw.data[u16_offset(f, n, k, r, c)], h);
        }
      break;
    }
    case Format::int8:
      for (int r = 0; r < n; ++r) {
        const float s = block_absmax(r, 0, k) / 127.f;
        put_f32(&pw.scales[static_cast<size_t>(r) * 4], s);
        for (int c = 0; c < k; ++c) {
          double q = s > 0 ? std::nearbyint(static_cast<double>(W(r, c)) / s) : 0.0;
          q = std::min(127.0, std::max(-127.0, q));
          pw.data[static_cast<size_t>(r) * rb + c] = static_cast<uint8_t>(static_cast<int8_t>(q));
        }
      }
      break;
    case Format::int4:
      for (int r = 0; r < n; ++r)
        for (int gi = 0; gi < gpr; ++gi) {
          float lo = 0, hi = 0;  // widened to include 0 (GPTQ quantizer)
          for (int c = gi * g; c < (gi + 1) * g; ++c) {
            lo = std::min(lo, W(r, c));
            hi = std::max(hi, W(r, c));
          }
          const double range = static_cast<double>(hi) - lo;
          uint16_t sh;
          double s;
          if (range == 0) {
            sh = float_to_half(1.f);
            s = 1.0;
          } else {
            const float s32 = static_cast<float>(range / 15.0);
            sh = float_to_half(s32);
            if (half_to_float(sh) * 15.0 < range) ++sh;  // next fp16 up (positive values: bits are monotonic)
            s = half_to_float(sh);
            if (!std::isfinite(s) || s == 0)
              throw std::invalid_argument(pre + "row " + std::to_string(r) + " group " + std::to_string(gi) +
                                          ": scale " + fmt_double(range / 15.0) + " is not representable in fp16");
          }
          const int z = static_cast<int>(std::min(15.0, std::max(0.0, std::nearbyint(-lo / s))));
          put_u16(&pw.scales[(static_cast<size_t>(r) * gpr + gi) * 2], sh);
          pw.zeros[static_cast<size_t>(r) * gpr + gi] = static_cast<uint8_t>(z);
          for (int c = gi * g; c < (gi + 1) * g; ++c) {
            const double q = std::min(15.0, std::max(0.0, std::nearbyint(W(r, c) / s) + z));
            put_nibble(pw.data, rb, r, c, static_cast<uint8_t>(q));
          }
        }
      break;
    case Format::nf4:
      for (int r = 0; r < n; ++r)
        for (int gi = 0; gi < gpr; ++gi) {
          const float a = block_absmax(r, gi * g, g);
          put_f32(&pw.scales[(static_cast<size_t>(r) * gpr + gi) * 4], a);
          for (int c = gi * g; c < (gi + 1) * g; ++c) {
            uint8_t best = 7;
            if (a > 0) {
              const float x = W(r, c) / a;
              float best_d = std::fabs(x - kNf4[7]);
              for (int i = 0; i < 16; ++i) {
                const float d = std::fabs(x - kNf4[i]);
                if (d < best_d) {
                  best_d = d;
                  best = static_cast<uint8_t>(i);
                }
              }
            }
            put_nibble(pw.data, rb, r, c, best);
          }
        }
      break;
    case Format::mxfp4:
      for (int r = 0; r < n; ++r)
        for (int gi = 0; gi < gpr; ++gi) {
          const float a = block_absmax(r, gi * g, g);
          int e = 0;
          if (a > 0) {
            int e2;
            std::frexp(a, &e2);  // a in [2^(e2-1), 2^e2)
            e = std::min(127, std::max(-127, (e2 - 1) - 2));
          }
          pw.scales[static_cast<size_t>(r) * gpr + gi] = static_cast<uint8_t>(e + 127);
          for (int c = gi * g; c < (gi + 1) * g; ++c)
            put_nibble(pw.data, rb, r, c, e2m1_nearest(std::ldexp(static_cast<double>(W(r, c)), -e)));
        }
      break;
    case Format::nvfp4: {
      float amax = 0;
      for (size_t i = 0; i < static_cast<size_t>(n) * k; ++i) amax = std::max(amax, std::fabs(w[i]));
      // Never a subnormal (validate refuses one, and flush-to-zero arithmetic would zero the weight): a tensor whose
      // absmax / 2688 is below 2^-126 takes 2^-126, and its blocks are quantized on that grid.
      const float ts = amax > 0 ? std::max(static_cast<float>(static_cast<double>(amax) / (448.0 * 6.0)),
                                           std::numeric_limits<float>::min())
                                : 1.f;
      pw.tensor_scale = ts;
      for (int r = 0; r < n; ++r)
        for (int gi = 0; gi < gpr; ++gi) {
          const float a = block_absmax(r, gi * g, g);
          const uint8_t sc = e4m3_nearest(static_cast<double>(a) / (6.0 * ts));
          pw.scales[static_cast<size_t>(r) * gpr + gi] = sc;
          const double block_scale = static_cast<double>(e4m3_to_float(sc)) * ts;
          for (int c = gi * g; c < (gi + 1) * g; ++c)
            put_nibble(pw.data, rb, r, c, block_scale > 0 ? e2m1_nearest(W(r, c) / block_scale) : 0);
        }
      break;
    }
    case Format::int8_kb64:  // returned above through to_k_blocked
    case Format::int4_kb128:
    case Format::nf4_kb128:
    case Format::mxfp4_kb128:
    case Format::nvfp4_kb128: throw std::logic_error("quantize: K-blocked packed format reached the row-major packer");
  }
  return pw;
}

void dequantize(const PackedWeight& pw, double* out) {
  validate(pw);
  if (!out) throw std::invalid_argument(describe(pw) + ": dequantize: out is null");
  if (format_packed_k_blocked(pw.format)) return dequantize(from_k_blocked(pw), out);
  const Format f = pw.format;
  const int n = pw.n, k = pw.k, g = format_group(f), gpr = groups_per_row(f, k);
  const size_t rb = row_bytes(f, k);
  for (int r = 0; r < n; ++r) {
    double* o = out + static_cast<size_t>(r) * k;
    const uint8_t* d = pw.data.data() + static_cast<size_t>(r) * rb;
    for (int c = 0; c < k; ++c) {
      const size_t si = static_cast<size_t>(r) * gpr + (g > 0 ? c / g : 0);
      switch (f) {
        case Format::fp16: o[c] = half_to_float(get_u16(d + 2 * c)); break;
        case Format::bf16: o[c] = bf16_to_float(get_u16(d + 2 * c)); break;
        case Format::fp16_kb64: o[c] = half_to_float(get_u16(&pw.data[u16_offset(f, n, k, r, c)])); break;
        case Format::bf16_kb64: o[c] = bf16_to_float(get_u16(&pw.data[u16_offset(f, n, k, r, c)])); break;
        case Format::int8: o[c] = static_cast<int8_t>(d[c]) * static_cast<double>(get_f32(&pw.scales[si * 4])); break;
        case Format::int4:
          o[c] = (static_cast<int>(get_nibble(pw.data, rb, r, c)) - static_cast<int>(pw.zeros[si])) *
                 static_cast<double>(half_to_float(get_u16(&pw.scales[si * 2])));
          break;
        case Format::nf4:
          o[c] = static_cast<double>(kNf4[get_nibble(pw.data, rb, r, c)]) * get_f32(&pw.scales[si * 4]);
          break;
        case Format::mxfp4:
          o[c] = static_cast<double>(e2m1_to_float(get_nibble(pw.data, rb, r, c))) *
                 std::ldexp(1.0, static_cast<int>(pw.scales[si]) - 127);
          break;
        case Format::nvfp4:
          o[c] = static_cast<double>(e2m1_to_float(get_nibble(pw.data, rb, r, c))) * e4m3_to_float(pw.scales[si]) *
                 static_cast<double>(pw.tensor_scale);
          break;
        case Format::int8_kb64:  // returned above through from_k_blocked
        case Format::int4_kb128:
        case Format::nf4_kb128:
        case Format::mxfp4_kb128:
        case Format::nvfp4_kb128:
          throw std::logic_error("dequantize: K-blocked packed data reached the row-major decode");
      }
    }
  }
}

PackedWeight to_k_blocked(const PackedWeight& pw) {
  validate(pw);
  const Format f = pw.format;
  const Format twin = packed_k_blocked_twin(f);
  if (twin == f)
    throw std::invalid_argument(describe(pw) +
                                ": to_k_blocked: expected a row-major packed format (int8, int4, nf4, "
                                "mxfp4 or nvfp4)");
  const size_t rb = row_bytes(f, pw.k), n = static_cast<size_t>(pw.n);
  if (const std::string e = k_block_error(twin, pw.k); !e.empty())
    throw std::invalid_argument(describe(pw) + ": to_k_blocked: " + e);
  PackedWeight out = pw;
  out.format = twin;
  for (size_t r = 0; r < n; ++r)
    for (size_t b = 0; b < rb; ++b) out.data[(b / 64 * n + r) * 64 + b % 64] = pw.data[r * rb + b];
  return out;
}

PackedWeight from_k_blocked(const PackedWeight& pw) {
  validate(pw);
  const Format f = pw.format;
  if (!format_packed_k_blocked(f))
    throw std::invalid_argument(describe(pw) +
                                ": from_k_blocked: expected a K-blocked packed format (int8_kb64, "
                                "int4_kb128, nf4_kb128, mxfp4_kb128 or nvfp4_kb128)");
  const size_t rb = row_bytes(f, pw.k), n = static_cast<size_t>(pw.n);
  PackedWeight out = pw;
  out.format = format_element(f);
  for (size_t r = 0; r < n; ++r)
    for (size_t b = 0; b < rb; ++b) out.data[r * rb + b] = pw.data[(b / 64 * n + r) * 64 + b % 64];
  return out;
}

Nf4DoubleQuant double_quantize_absmax(const std::vector<float>& absmax) {
  Nf4DoubleQuant dq;
  double sum = 0;
  for (size_t i = 0; i < absmax.size(); ++i) {
    if (!std::isfinite(absmax[i]))
      throw std::invalid_argument("double_quantize_absmax: absmax[" + std::to_string(i) + "] is not finite");
    sum += absmax[i];
  }
  dq.offset = absmax.empty() ? 0.f : static_cast<float>(sum / absmax.size());
  const size_t blocks = (absmax.size() + 255) / 256;
  dq.block_scale.assign(blocks, 0.f);
  dq.q.assign(absmax.size(), 0);
  for (size_t b = 0; b < blocks; ++b) {
    const size_t lo = b * 256, hi = std::min(absmax.size(), lo + 256);
    double m = 0;
    for (size_t i = lo; i < hi; ++i) m = std::max(m, std::fabs(static_cast<double>(absmax[i]) - dq.offset));
    const float s = static_cast<float>(m / 127.0);
    dq.block_scale[b] = s;
    for (size_t i = lo; i < hi; ++i) {
      double q = s > 0 ? std::nearbyint((static_cast<double>(absmax[i]) - dq.offset) / s) : 0.0;
      dq.q[i] = static_cast<int8_t>(std::min(127.0, std::max(-127.0, q)));
    }
  }
  return dq;
}

std::vector<float> expand_absmax(const Nf4DoubleQuant& dq) {
  if (dq.block_scale.size() != (dq.q.size() + 255) / 256)
    throw std::invalid_argument("expand_absmax: block_scale has " + std::to_string(dq.block_scale.size()) +
                                " entries, expected " + std::to_string((dq.q.size() + 255) / 256) +
                                " (one per 256 values of q)");
  std::vector<float> out(dq.q.size());
  for (size_t i = 0; i < dq.q.size(); ++i)
    out[i] = static_cast<float>(dq.q[i] * static_cast<double>(dq.block_scale[i / 256]) + dq.offset);
  return out;
}

}  // namespace kt::quant
