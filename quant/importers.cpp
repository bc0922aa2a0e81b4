// Importers of third-party 4-bit checkpoints into kerntune's packed layout.
#include <cstring>
#include <stdexcept>
#include <string>

#include "quant/quant.h"

namespace kt::quant {

namespace {

/// Argument checks shared by the packed-int32 int4 importers (GPTQ, AWQ); `pre` names the call.
void check_int4_import(const std::string& pre, const int32_t* qweight, const int32_t* qzeros, const uint16_t* scales,
                       int n, int k, int group) {
  if (group != 128)
    throw std::invalid_argument(pre + "group must be 128, the int4 kernels' group (got " + std::to_string(group) + ")");
  if (n < 1 || n % 8 != 0)
    throw std::invalid_argument(pre + "n must be a positive multiple of 8 (8 columns per int32)");
  if (k < 1 || k % 128 != 0) throw std::invalid_argument(pre + "k must be a positive multiple of 128");
  if (!qweight) throw std::invalid_argument(pre + "qweight is null");
  if (!qzeros) throw std::invalid_argument(pre + "qzeros is null");
  if (!scales) throw std::invalid_argument(pre + "scales is null");
}

}  // namespace

PackedWeight import_gptq_int4(const int32_t* qweight, const int32_t* qzeros, const uint16_t* scales_fp16, int n, int k,
                              int group, GptqZeros zeros) {
  const std::string pre = "import_gptq_int4(n=" + std::to_string(n) + ", k=" + std::to_string(k) +
                          ", group=" + std::to_string(group) + "): ";
  check_int4_import(pre, qweight, qzeros, scales_fp16, n, k, group);
  PackedWeight pw;
  pw.format = Format::int4;
  pw.n = n;
  pw.k = k;
  const int gpr = k / 128;
  const size_t rb = static_cast<size_t>(k) / 2;
  pw.data.assign(static_cast<size_t>(n) * rb, 0);
  pw.scales.assign(static_cast<size_t>(n) * gpr * 2, 0);
  pw.zeros.assign(static_cast<size_t>(n) * gpr, 0);
  auto word = [](int32_t v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return u;
  };
  for (int kk = 0; kk < k; ++kk)
    for (int nn = 0; nn < n; ++nn) {
      const uint32_t wv = word(qweight[static_cast<size_t>(kk / 8) * n + nn]);
      const uint8_t q = static_cast<uint8_t>((wv >> (4 * (kk % 8))) & 0xF);
      uint8_t& b = pw.data[static_cast<size_t>(nn) * rb + kk / 2];
      b = (kk & 1) ? static_cast<uint8_t>(b | (q << 4)) : static_cast<uint8_t>(b | q);
    }
  for (int gi = 0; gi < gpr; ++gi)
    for (int nn = 0; nn < n; ++nn) {
      const uint32_t zw = word(qzeros[static_cast<size_t>(gi) * (n / 8) + nn / 8]);
      uint32_t z = (zw >> (4 * (nn % 8))) & 0xF;
      if (zeros == GptqZeros::v1_minus_one) z = (z + 1) & 0xF;
      pw.zeros[static_cast<size_t>(nn) * gpr + gi] = static_cast<uint8_t>(z);
      const uint16_t s = scales_fp16[static_cast<size_t>(gi) * n + nn];
      pw.scales[(static_cast<size_t>(nn) * gpr + gi) * 2] = static_cast<uint8_t>(s & 0xFF);
      pw.scales[(static_cast<size_t>(nn) * gpr + gi) * 2 + 1] = static_cast<uint8_t>(s >> 8);
    }
  validate(pw);
  return pw;
}

PackedWeight import_awq_int4(const int32_t* qweight, const int32_t* qzeros, const uint16_t* scales_fp16, int n, int k,
                             int group) {
  const std::string pre = "import_awq_int4(n=" + std::to_string(n) + ", k=" + std::to_string(k) +
                          ", group=" + std::to_string(group) + "): ";
  check_int4_import(pre, qweight, qzeros, scales_fp16, n, k, group);
  // Nibble position of column j (0..7) inside a word: the inverse of AWQ's packing order {0,2,4,6,1,3,5,7}.
  static const int kPos[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  PackedWeight pw;
  pw.format = Format::int4;
  pw.n = n;
  pw.k = k;
  const int gpr = k / 128;
  const size_t rb = static_cast<size_t>(k) / 2;
  pw.data.assign(static_cast<size_t>(n) * rb, 0);
  pw.scales.assign(static_cast<size_t>(n) * gpr * 2, 0);
  pw.zeros.assign(static_cast<size_t>(n) * gpr, 0);
  auto nibble = [](int32_t v, int pos) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return static_cast<uint8_t>((u >> (4 * pos)) & 0xF);
  };
  for (int kk = 0; kk < k; ++kk)
    for (int nn = 0; nn < n; ++nn) {
      const uint8_t q = nibble(qweight[static_cast<size_t>(kk) * (n / 8) + nn / 8], kPos[nn % 8]);
      uint8_t& b = pw.data[static_cast<size_t>(nn) * rb + kk / 2];
      b = (kk & 1) ? static_cast<uint8_t>(b | (q << 4)) : static_cast<uint8_t>(b | q);
    }
  for (int gi = 0; gi < gpr; ++gi)
    for (int nn = 0; nn < n; ++nn) {
      pw.zeros[static_cast<size_t>(nn) * gpr + gi] =
          nibble(qzeros[static_cast<size_t>(gi) * (n / 8) + nn / 8], kPos[nn % 8]);
      const uint16_t s = scales_fp16[static_cast<size_t>(gi) * n + nn];
      pw.scales[(static_cast<size_t>(nn) * gpr + gi) * 2] = static_cast<uint8_t>(s & 0xFF);
      pw.scales[(static_cast<size_t>(nn) * gpr + gi) * 2 + 1] = static_cast<uint8_t>(s >> 8);
    }
  validate(pw);
  return pw;
}

PackedWeight import_bnb_nf4(const uint8_t* packed, const float* absmax, int n, int k) {
  const std::string pre = "import_bnb_nf4(n=" + std::to_string(n) + ", k=" + std::to_string(k) + "): ";
  if (n < 1) throw std::invalid_argument(pre + "n must be >= 1");
  if (k < 1 || k % 64 != 0) throw std::invalid_argument(pre + "k must be a positive multiple of 64");
  if (!packed) throw std::invalid_argument(pre + "packed is null");
  if (!absmax) throw std::invalid_argument(pre + "absmax is null");
  PackedWeight pw;
  pw.format = Format::nf4;
  pw.n = n;
  pw.k = k;
  const size_t total = static_cast<size_t>(n) * k;
  pw.data.resize(total / 2);
  // Same flattened order (row-major, k even so rows start on byte boundaries); swap the nibbles.
  for (size_t j = 0; j < total / 2; ++j) pw.data[j] = static_cast<uint8_t>((packed[j] >> 4) | (packed[j] << 4));
  pw.scales.resize(total / 64 * 4);
  for (size_t b = 0; b < total / 64; ++b) {  // fp32 little-endian, whatever the host's byte order
    uint32_t u;
    std::memcpy(&u, &absmax[b], 4);
    for (int i = 0; i < 4; ++i) pw.scales[b * 4 + i] = static_cast<uint8_t>(u >> (8 * i));
  }
  validate(pw);
  return pw;
}

}  // namespace kt::quant
