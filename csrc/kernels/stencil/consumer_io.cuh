// A work item's shared-memory reads and global stores, shared by every CUDA-core consumer: window
// rows unpacked from 32-bit words into the accumulation type, loaded with the widest vectors
// their alignment allows, and outputs stored as one vector where aligned and in range.
#pragma once

#include <type_traits>
#include <utility>

#include "engine/engine.cuh"
#include "kernels/numeric.cuh"
#include "kernels/stencil/geometry.cuh"

namespace cupipe {
namespace kernels {

// Element E of the shared-memory words w[], in the accumulation type.
template <typename T, int E, int NW>
__device__ __forceinline__ acc_t<T> word_elem(const uint32_t (&w)[NW]) {
  constexpr int kByte = E * static_cast<int>(sizeof(T)), kW = kByte / 4;
  if constexpr (sizeof(T) == 8) {
    return __hiloint2double(static_cast<int>(w[kW + 1]), static_cast<int>(w[kW]));
  } else if constexpr (sizeof(T) == 4) {
    return __uint_as_float(w[kW]);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __uint_as_float(kByte % 4 == 0 ? w[kW] << 16 : w[kW] & 0xffff0000u);  // fp32's top half
  } else {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(kByte % 4 == 0 ? w[kW] : w[kW] >> 16)));
  }
}

template <typename T, int N, int NW, int... K>
__device__ __forceinline__ void unpack(const uint32_t (&w)[NW], acc_t<T> (&x)[N], std::integer_sequence<int, K...>) {
  ((x[K] = word_elem<T, K>(w)), ...);
}

// x[k] = element Off + k of the words w[].
template <typename T, int Off, int N, int NW, int... K>
__device__ __forceinline__ void unpack_from(const uint32_t (&w)[NW], acc_t<T> (&x)[N], std::integer_sequence<int, K...>) {
  ((x[K] = word_elem<T, Off + K>(w)), ...);
}

// x[k] = element k from p on, read with V-byte vectors (p is V-aligned; reads round up to whole
// vectors, which the row pitch leaves room for).
template <typename T, int V, int N>
__device__ __forceinline__ void load_vectors(const char* p, acc_t<T> (&x)[N]) {
  if constexpr (V == 2) {
#pragma unroll
    for (int k = 0; k < N; ++k) x[k] = to_acc<acc_t<T>>(reinterpret_cast<const T*>(p)[k]);
  } else {
    constexpr int kNv = (N * static_cast<int>(sizeof(T)) + V - 1) / V, kPer = V / 4;
    uint32_t w[kNv * kPer];
#pragma unroll
    for (int i = 0; i < kNv; ++i) {
      const engine::vec_t<V> u = reinterpret_cast<const engine::vec_t<V>*>(p)[i];
      if constexpr (V == 16) {
        w[4 * i] = u.x; w[4 * i + 1] = u.y; w[4 * i + 2] = u.z; w[4 * i + 3] = u.w;
      } else if constexpr (V == 8) {
        w[2 * i] = u.x; w[2 * i + 1] = u.y;
      } else {
        w[i] = u;
      }
    }
    unpack<T>(w, x, std::make_integer_sequence<int, N>{});
  }
}

// Loads N consecutive elements of a smem row from p on with the widest vectors p's alignment
// allows: a warp-uniform branch (the row's shift decides), each path writing x directly. A row
// whose data is not vector-aligned (odd radii, unaligned planes) pays with narrower loads
// rather than with register moves: registers can not be indexed at run time.
template <typename T, int V, int N>
__device__ __forceinline__ void load_window(const char* p, acc_t<T> (&x)[N]) {
  if constexpr (V > static_cast<int>(sizeof(T))) {
    if ((reinterpret_cast<uintptr_t>(p) & (V - 1)) != 0) return load_window<T, V / 2>(p, x);
  }
  load_vectors<T, V>(p, x);
}

// One vector store to global memory. In PTX: NVVM splits a plain vector store whose lanes arrive
// through different paths into scalar stores (four times the instructions, partial sectors).
__device__ __forceinline__ void st_global_v(void* p, float a, float b, float c, float d) {
  asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d));
}
__device__ __forceinline__ void st_global_v(void* p, double a, double b) {
  asm volatile("st.global.v2.f64 [%0], {%1, %2};" ::"l"(p), "d"(a), "d"(b));
}
__device__ __forceinline__ void st_global_v(void* p, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d));
}
__device__ __forceinline__ void st_global_v(void* p, uint32_t a, uint32_t b) {
  asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(a), "r"(b));
}

// Stores TW outputs as one vector (dst in global memory, aligned to TW elements).
template <typename T, int TW>
__device__ __forceinline__ void store_vector(T* dst, const acc_t<T> (&v)[TW]) {
  if constexpr (sizeof(T) == 8) {
    st_global_v(dst, v[0], v[1]);
  } else if constexpr (sizeof(T) == 4) {
    st_global_v(dst, v[0], v[1], v[2], v[3]);
  } else {
    uint32_t u[TW / 2];
#pragma unroll
    for (int i = 0; i < TW / 2; ++i) {
      if constexpr (std::is_same_v<T, __half>) {
        const __half2 h = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
        u[i] = *reinterpret_cast<const uint32_t*>(&h);
      } else {
        const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
        u[i] = *reinterpret_cast<const uint32_t*>(&h);
      }
    }
    if constexpr (TW == 8) st_global_v(dst, u[0], u[1], u[2], u[3]);
    else st_global_v(dst, u[0], u[1]);
  }
}

// Stores TW outputs: one vector store when dst is aligned and all of them are in the plane.
template <typename T, int TW>
__device__ __forceinline__ void store_outputs(T* dst, int64_t n_in_range, const acc_t<T> (&v)[TW]) {
  constexpr int kVB = TW * static_cast<int>(sizeof(T));
  if (n_in_range >= TW && (reinterpret_cast<uintptr_t>(dst) & (kVB - 1)) == 0) {
    store_vector<T>(dst, v);
  } else {
#pragma unroll
    for (int t = 0; t < TW; ++t)
      if (t < n_in_range) dst[t] = from_acc<T>(v[t]);
  }
}

// What the consumer needs of the geometry, by value (the out-of-line Box consumers take it as an
// argument; a kernel parameter's address can not be passed on).
struct ConsumerGeom {
  int64_t ny, nx;
  int kh, kw, kw_pad;
  int pitch, hdr_bytes;
  int items, cols_log2;
  int step = 1;  // elements between x taps (StencilGeom::step; the general consumer's only)
};

}  // namespace kernels
}  // namespace cupipe
