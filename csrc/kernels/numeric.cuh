// Element types of the kernels and their accumulation types.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/params.h"

namespace cupipe {
namespace kernels {

template <typename T> struct AccOf { using type = float; };
template <> struct AccOf<double> { using type = double; };
template <typename T> using acc_t = typename AccOf<T>::type;

template <typename A, typename T>
__device__ __forceinline__ A to_acc(T v) { return static_cast<A>(v); }
template <> __device__ __forceinline__ float to_acc<float, __half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_acc<float, __nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ double to_acc<double, __half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ double to_acc<double, __nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T, typename A>
__device__ __forceinline__ T from_acc(A v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __half from_acc<__half, float>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16, float>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_acc<__half, double>(double v) { return __double2half(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16, double>(double v) { return __double2bfloat16(v); }

// The 16 / sizeof(T) elements of a 16-byte vector, converted to the accumulation type with bit
// operations (no per-element loads from a reinterpreted register array).
template <typename T, typename A>
__device__ __forceinline__ void unpack16(const uint4& q, A* out) {
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
  if constexpr (sizeof(T) == 8) {
    out[0] = static_cast<A>(__hiloint2double(static_cast<int>(w[1]), static_cast<int>(w[0])));
    out[1] = static_cast<A>(__hiloint2double(static_cast<int>(w[3]), static_cast<int>(w[2])));
  } else if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = static_cast<A>(__uint_as_float(w[i]));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // a bf16 is the high half of the float it widens to
      out[2 * i] = static_cast<A>(__uint_as_float(w[i] << 16));
      out[2 * i + 1] = static_cast<A>(__uint_as_float(w[i] & 0xffff0000u));
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = static_cast<A>(__half2float(__ushort_as_half(static_cast<unsigned short>(w[i] & 0xffffu))));
      out[2 * i + 1] = static_cast<A>(__half2float(__ushort_as_half(static_cast<unsigned short>(w[i] >> 16))));
    }
  }
}

// Calls f(T{}) with the element type of `t`.
template <class F>
void dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); break;
    case DType::F16: f(__half{}); break;
    case DType::BF16: f(__nv_bfloat16{}); break;
    case DType::F64: f(double{}); break;
  }
}

// Weight i of `w` (dtype t) in the accumulation type A (round to nearest for fp64 -> fp32, exact
// otherwise), once per block as a stencil stages its weights.
template <typename A>
__device__ __forceinline__ A weight_as(const void* w, DType t, int i) {
  switch (t) {
    case DType::F16: return static_cast<A>(__half2float(static_cast<const __half*>(w)[i]));
    case DType::BF16: return static_cast<A>(__bfloat162float(static_cast<const __nv_bfloat16*>(w)[i]));
    case DType::F64: return static_cast<A>(static_cast<const double*>(w)[i]);
    case DType::F32: break;
  }
  return static_cast<A>(static_cast<const float*>(w)[i]);
}

}  // namespace kernels
}  // namespace cupipe
