// XOR swizzle of the 16-byte chunks of a shared-memory tile of 16-bit elements: chunk c of row r is stored at
// chunk c ^ (r % 8). Eight consecutive rows then spread one logical chunk column over all 32 banks, so that
// cp.async stores of whole rows and ldmatrix reads of 8x8 sub-tiles are bank-conflict free (the layout
// CUTLASS calls Swizzle<3, 3, 3>). Compiled by NVRTC only.
#pragma once

namespace kt {

/// Element offset of 16-byte chunk `chunk` of row `row` in a swizzled [rows, RowElems] tile of 16-bit
/// elements. RowElems is a multiple of 64 (8 chunks), so a row's swizzle stays inside the row.
template <int RowElems>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * RowElems + ((chunk ^ (row & 7)) << 3);
}

}  // namespace kt
