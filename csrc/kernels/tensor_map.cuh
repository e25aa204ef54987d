// Host side of the Hopper tensor copies: a CUtensorMap describing a batch of contiguous 2-D
// planes, encoded through the driver's cuTensorMapEncodeTiled, looked up from the runtime (no
// link against libcuda). The map travels to the kernel as a __grid_constant__ parameter.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/launch_utils.cuh"
#include "kernels/params.h"

namespace cupipe {

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiledFn encode_tiled_fn() {
  static EncodeTiledFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CUPIPE_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || p == nullptr)
      throw std::runtime_error("the CUDA driver has no cuTensorMapEncodeTiled (tma tensor copies need CUDA 12+)");
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  return fn;
}

inline CUtensorMapDataType tensor_map_dtype(DType t) {
  switch (t) {
    case DType::F32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case DType::F16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case DType::BF16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case DType::F64: return CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
  }
  return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
}

// The map of `batch` planes of ny x nx elements `lead` bytes (0 or 8) after `base` (16-byte
// aligned, nx * esz a multiple of 16; its rows begin with those lead bytes), read in boxes of
// box_bytes x box_h x 1 (box_bytes a multiple of 16, at most 256 units of tensor_map_unit(esz);
// box_h at most 256). Elements of a box outside the map are delivered as zeros. Box coordinates
// along x count units, not elements. `promotion`: how much the L2 fetches from DRAM around a
// missed sector of a box (the caller's measured choice: stencil_l2_promotion).
inline CUtensorMap make_plane_map(const void* base, DType dt, int esz, int64_t batch, int64_t ny, int64_t nx,
                                  int64_t row_stride, int64_t plane_stride, int box_bytes, int box_h,
                                  CUtensorMapL2promotion promotion, int lead = 0) {
  CUtensorMap m{};
  const int unit = tensor_map_unit(esz);
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>((nx * esz + lead) / unit), static_cast<cuuint64_t>(ny),
                              static_cast<cuuint64_t>(batch)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(row_stride * esz), static_cast<cuuint64_t>(plane_stride * esz)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(box_bytes / unit), static_cast<cuuint32_t>(box_h), 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUtensorMapDataType type = unit == esz ? tensor_map_dtype(dt) : CU_TENSOR_MAP_DATA_TYPE_UINT64;
  const CUresult r = encode_tiled_fn()(&m, type, 3, const_cast<void*>(base), dims, strides, box,
                                       elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                       promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("cuTensorMapEncodeTiled failed (error " + std::to_string(static_cast<int>(r)) +
                             ") for a " + std::to_string(batch) + " x " + std::to_string(ny) + " x " +
                             std::to_string(nx) + " tensor in " + std::to_string(box_h) + " x " +
                             std::to_string(box_bytes) + "-byte boxes");
  return m;
}

}  // namespace cupipe
