// TMA tensor maps for the kernels' parameter space (CUDA Driver API cuTensorMapEncodeTiled), shared by the families
// whose mainloops load by TMA (qkv_proj's wgmma and gemv TMA paths, attention_prefill's Hopper mainloop).
#pragma once
#include <cuda.h>

#include "common/kt_types.h"

namespace kt {

/// Encodes a tiled tensor map of `rank` dimensions: dims[0] innermost, strides[i] = bytes between consecutive indices
/// of dimension i + 1, box = the elements copied per dimension, element strides 1, no interleave, L2 promotion 256 B;
/// out-of-bounds elements read as zeros; swizzle 128 B or none. Throws cuda::CudaError naming `what` when the driver
/// refuses (e.g. a stride that is not a multiple of 16 bytes).
TmaDescriptor encode_tiled(const void* base, CUtensorMapDataType type, int rank, const cuuint64_t* dims,
                           const cuuint64_t* strides, const cuuint32_t* box, bool swizzle128, const char* what);

}  // namespace kt
