// Checks that a byte string is a CUDA cubin for an expected SM before it is trusted: a cubin from the
// cache or a database is executable content, and a wrong or forged one must never be loaded. No CUDA.
//
// A cubin is a little-endian ELF64 image (ELF specification, "ELF Header") with e_machine EM_CUDA (190).
// The SM number it was built for (major * 10 + minor, e.g. 90 for sm_90 and sm_90a) is in e_flags, at a
// place that depends on e_ident[EI_ABIVERSION] (LLVM llvm/BinaryFormat/ELF.h, ELFABIVERSION_CUDA_V1/V2):
//   ABI version 7: e_flags & 0xff          (EF_CUDA_SM; NVRTC before CUDA 12.8 and every SM up to 90)
//   ABI version 8: (e_flags >> 8) & 0xff  (EF_CUDA_SM_MASK; NVRTC 12.8+ for Blackwell, 13.x for every SM)
// The "a" (arch-specific) suffix is not reliably recorded in e_flags, so only the number is compared.
#pragma once

#include <string>
#include <string_view>

namespace kt {

/// The SM number recorded in a cubin's ELF header (e.g. 90), or -1 if `image` is not a well-formed
/// CUDA ELF64 header (see cubin_image_problem for why).
int cubin_sm(std::string_view image);

/// Why `image` is not a cubin for SM `expected_sm` (e.g. 90 for sm_90 or sm_90a), or "" if it is one:
/// too short for an ELF64 header, no ELF magic, not 64-bit little-endian, e_machine not EM_CUDA (190),
/// an unknown CUDA ELF ABI version, a section header table outside the image, or another SM number.
/// Never throws (except std::bad_alloc).
std::string cubin_image_problem(std::string_view image, int expected_sm);

}  // namespace kt
