#include "cache/cubin_image.h"

#include <cstdint>

namespace kt {
namespace {

constexpr size_t kEhdrSize = 64;    // sizeof(Elf64_Ehdr)
constexpr size_t kShdrSize = 64;    // sizeof(Elf64_Shdr)
constexpr size_t kPhdrSize = 56;    // sizeof(Elf64_Phdr)
constexpr unsigned kEmCuda = 190;   // EM_CUDA
constexpr unsigned kCudaAbiV1 = 7;  // ELFABIVERSION_CUDA_V1: SM in e_flags bits 0-7
constexpr unsigned kCudaAbiV2 = 8;  // ELFABIVERSION_CUDA_V2: SM in e_flags bits 8-15

uint64_t le(std::string_view s, size_t off, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(static_cast<unsigned char>(s[off + i])) << (8 * i);
  return v;
}

// Whether [off, off + count * entsize) lies inside an image of `size` bytes, without overflow.
bool table_fits(uint64_t off, uint64_t count, uint64_t entsize, uint64_t size) {
  if (count == 0) return true;
  if (off > size || entsize == 0) return false;
  return count <= (size - off) / entsize;
}

// "" and the SM number, or the reason the header is not a CUDA ELF64 header.
std::string parse(std::string_view s, int& sm) {
  sm = -1;
  if (s.size() < kEhdrSize)
    return "not a cubin: " + std::to_string(s.size()) + " bytes, shorter than an ELF64 header (64)";
  if (!(s[0] == '\x7f' && s[1] == 'E' && s[2] == 'L' && s[3] == 'F')) return "not a cubin: no ELF magic";
  if (s[4] != 2) return "not a cubin: not a 64-bit ELF image (EI_CLASS " + std::to_string(int(s[4])) + ")";
  if (s[5] != 1) return "not a cubin: not a little-endian ELF image (EI_DATA " + std::to_string(int(s[5])) + ")";
  const unsigned machine = unsigned(le(s, 18, 2));
  if (machine != kEmCuda) return "not a cubin: ELF e_machine " + std::to_string(machine) + ", expected EM_CUDA (190)";
  const unsigned abi = static_cast<unsigned char>(s[8]);
  const uint64_t flags = le(s, 48, 4);
  if (abi == kCudaAbiV1) sm = int(flags & 0xff);
  else if (abi == kCudaAbiV2) sm = int((flags >> 8) & 0xff);
  else return "not a cubin: unknown CUDA ELF ABI version " + std::to_string(abi) + " (expected 7 or 8)";
  const uint64_t size = s.size();
  if (!table_fits(le(s, 40, 8), le(s, 60, 2), le(s, 58, 2), size) || (le(s, 60, 2) && le(s, 58, 2) != kShdrSize))
    return "not a cubin: its ELF section header table lies outside the image (truncated or forged)";
  if (!table_fits(le(s, 32, 8), le(s, 56, 2), le(s, 54, 2), size) || (le(s, 56, 2) && le(s, 54, 2) != kPhdrSize))
    return "not a cubin: its ELF program header table lies outside the image (truncated or forged)";
  return "";
}

}  // namespace

int cubin_sm(std::string_view image) {
  int sm = -1;
  return parse(image, sm).empty() ? sm : -1;
}

std::string cubin_image_problem(std::string_view image, int expected_sm) {
  int sm = -1;
  std::string why = parse(image, sm);
  if (!why.empty()) return why;
  if (sm != expected_sm)
    return "cubin built for sm_" + std::to_string(sm) + ", expected sm_" + std::to_string(expected_sm);
  return "";
}

}  // namespace kt
