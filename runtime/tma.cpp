#include "runtime/tma.h"

#include "cuda/driver.h"

namespace kt {

static_assert(sizeof(TmaDescriptor) == sizeof(CUtensorMap) && alignof(TmaDescriptor) == alignof(CUtensorMap),
              "TmaDescriptor must mirror CUtensorMap");

TmaDescriptor encode_tiled(const void* base, CUtensorMapDataType type, int rank, const cuuint64_t* dims,
                           const cuuint64_t* strides, const cuuint32_t* box, bool swizzle128, const char* what) {
  TmaDescriptor d;
  const cuuint32_t estrides[5] = {1, 1, 1, 1, 1};
  cuda::check(cuda::api().cuTensorMapEncodeTiled(reinterpret_cast<CUtensorMap*>(&d), type, cuuint32_t(rank),
                                                 const_cast<void*>(base), dims, strides, box, estrides,
                                                 CU_TENSOR_MAP_INTERLEAVE_NONE,
                                                 swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
              what);
  return d;
}

}  // namespace kt
