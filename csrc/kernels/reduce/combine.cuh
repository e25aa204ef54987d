// The element-level pieces every reduce kernel shares: the combine of an op (run-time, and fixed
// at compile time for the innermost loops), the output store and the mean's finalize, the folds of
// 16-byte vectors and element spans out of shared memory, and the fixed-order team combine.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "engine/engine.cuh"
#include "kernels/numeric.cuh"
#include "kernels/reduce/states.h"

namespace cupipe {
namespace kernels {

// Threads per block of the main passes; kMaxBlocksPerSm of them fill an SM's 2048 threads.
constexpr int kReduceThreads = 256;
constexpr int kMaxBlocksPerSm = 2048 / kReduceThreads;

// The combine of a run-time op (mean combines as a sum). The op is uniform across the grid, so
// its branches cost a few uniform instructions per element; compiling the loops once per op
// would triple the reduce kernels' compile time for no measurable gain in a memory-bound loop.
template <typename A>
struct Combine {
  ReduceOp op;
  __device__ __forceinline__ A init() const {
    if (op == ReduceOp::Amax) return -INFINITY;
    if (op == ReduceOp::Amin) return INFINITY;
    return A(0);
  }
  // NaN propagates through amax/amin, as in torch.
  __device__ __forceinline__ A operator()(A a, A v) const {
    if (op == ReduceOp::Amax) return nan_max(a, v);
    if (op == ReduceOp::Amin) return nan_min(a, v);
    return a + v;
  }
};

// The same combine with the op fixed at compile time, for the innermost loops only (a run-time
// op there costs several instructions per element in kernels that issue ~25 per element).
template <typename A, ReduceOp Op>
struct StaticCombine {
  __device__ __forceinline__ A init() const { return Combine<A>{Op}.init(); }
  __device__ __forceinline__ A operator()(A a, A v) const { return Combine<A>{Op}(a, v); }
};

// Runs f(StaticCombine<A, op>{}) for the run-time op (mean folds as a sum).
template <typename A, class F>
__device__ __forceinline__ void with_static_combine(ReduceOp op, F&& f) {
  if (op == ReduceOp::Amax) f(StaticCombine<A, ReduceOp::Amax>{});
  else if (op == ReduceOp::Amin) f(StaticCombine<A, ReduceOp::Amin>{});
  else f(StaticCombine<A, ReduceOp::Sum>{});
}

template <typename A>
__device__ __forceinline__ void store_out(void* out, DType od, int64_t i, A v) {
  switch (od) {
    case DType::F32: static_cast<float*>(out)[i] = static_cast<float>(v); break;
    case DType::F64: static_cast<double*>(out)[i] = static_cast<double>(v); break;
    case DType::F16: static_cast<__half*>(out)[i] = from_acc<__half>(v); break;
    case DType::BF16: static_cast<__nv_bfloat16*>(out)[i] = from_acc<__nv_bfloat16>(v); break;
  }
}

template <typename A>
__device__ __forceinline__ A finalize(ReduceOp op, A v, int64_t r) {
  return op == ReduceOp::Mean ? v / static_cast<A>(r) : v;  // mean of nothing: 0/0 = nan
}

// Stores the finalized v[0, n) at out[i, i + n), n <= N: as 16-byte vectors when all N are there
// and they fill whole aligned vectors, else one at a time.
template <int N, typename A>
__device__ __forceinline__ void store_outs(void* out, DType od, int64_t i, int n, const A* v) {
  auto put = [&](auto* dst, auto cvt) {
    using O = std::remove_pointer_t<decltype(dst)>;
    constexpr int OV = 16 / sizeof(O);  // outputs a vector
    O* p = dst + i;
    if constexpr (N % OV == 0) {
      if (n == N && (reinterpret_cast<uintptr_t>(p) & 15u) == 0) {
#pragma unroll
        for (int q = 0; q < N / OV; ++q) {
          uint64_t half[2] = {0, 0};  // the vector's bits, packed in registers
#pragma unroll
          for (int k = 0; k < OV; ++k) {
            const O o = cvt(v[q * OV + k]);
            uint64_t b = 0;
            memcpy(&b, &o, sizeof(O));
            constexpr int kBits = 8 * static_cast<int>(sizeof(O));
            half[k * kBits / 64] |= b << (k * kBits % 64);
          }
          reinterpret_cast<uint4*>(p)[q] = make_uint4(static_cast<uint32_t>(half[0]), static_cast<uint32_t>(half[0] >> 32),
                                                      static_cast<uint32_t>(half[1]), static_cast<uint32_t>(half[1] >> 32));
        }
        return;
      }
    }
#pragma unroll
    for (int k = 0; k < N; ++k)  // (compile-time indices: v stays in registers)
      if (k < n) p[k] = cvt(v[k]);
  };
  switch (od) {
    case DType::F32: put(static_cast<float*>(out), [](A a) { return static_cast<float>(a); }); break;
    case DType::F64: put(static_cast<double*>(out), [](A a) { return static_cast<double>(a); }); break;
    case DType::F16: put(static_cast<__half*>(out), [](A a) { return from_acc<__half>(a); }); break;
    case DType::BF16: put(static_cast<__nv_bfloat16*>(out), [](A a) { return from_acc<__nv_bfloat16>(a); }); break;
  }
}

// Loads of UB bytes (2, 4 or 8: with_unit_bytes) from shared memory at a multiple of UB, for rows
// that agree only modulo UB: the UB bytes at p in the leading bytes of a vector (the rest zero), and
// the 16 bytes at p as 16 / UB such loads.
template <int UB>
__device__ __forceinline__ uint4 load_unit(const char* p) {
  static_assert(UB == 2 || UB == 4 || UB == 8, "units under a vector");
  if constexpr (UB == 8) {
    const uint2 a = *reinterpret_cast<const uint2*>(p);
    return make_uint4(a.x, a.y, 0u, 0u);
  } else if constexpr (UB == 4) return make_uint4(*reinterpret_cast<const uint32_t*>(p), 0u, 0u, 0u);
  else return make_uint4(*reinterpret_cast<const uint16_t*>(p), 0u, 0u, 0u);
}
template <int UB>
__device__ __forceinline__ uint4 load16_in_units(const char* p) {
  if constexpr (UB == 8) {
    const uint4 a = load_unit<8>(p), b = load_unit<8>(p + 8);
    return make_uint4(a.x, a.y, b.x, b.y);
  } else {
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      w[k] = UB == 4 ? load_unit<4>(p + 4 * k).x : load_unit<2>(p + 4 * k).x | load_unit<2>(p + 4 * k + 2).x << 16;
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}
// Runs f(std::integral_constant<int, UB>{}) for a run-time unit of ub bytes, ESZ <= ub <= 8.
template <int ESZ, class F>
__device__ __forceinline__ void with_unit_bytes(int ub, F&& f) {
  if constexpr (ESZ <= 2) {
    if (ub == 2) return f(std::integral_constant<int, 2>{});
  }
  if constexpr (ESZ <= 4) {
    if (ub == 4) return f(std::integral_constant<int, 4>{});
  }
  f(std::integral_constant<int, 8>{});
}

// Folds nvec 16-byte vectors at v (shared memory) into acc with the static combine sc, thread
// `rank` of `size` taking every size-th vector, in index order.
template <typename T, typename A, typename SC>
__device__ __forceinline__ void fold_vectors(const void* v, int nvec, int rank, int size, A& acc, SC sc) {
  constexpr int VE = 16 / sizeof(T);
  const uint4* u = static_cast<const uint4*>(v);
  for (int i = rank; i < nvec; i += size) {
    A e[VE];
    unpack16<T>(u[i], e);
#pragma unroll
    for (int j = 0; j < VE; ++j) acc = sc(acc, e[j]);
  }
}

// Folds the `steps` 16-byte vectors at v (a whole row, one thread) starting at vector
// rot mod steps and wrapping around: rows folded side by side by a warp start at different
// vectors, so its loads of neighbouring rows (256 bytes apart, the same banks) spread over the
// banks. The order is fixed by (steps, rot).
template <typename T, typename A, class SC>
__device__ __forceinline__ void fold_vectors_rotated(const void* v, int steps, int rot, A& acc, SC sc) {
  constexpr int VE = 16 / sizeof(T);
  const uint4* u = static_cast<const uint4*>(v);
  int j = steps > 0 ? rot % steps : 0;  // (empty rows: steps = 0)
  for (int i = 0; i < steps; ++i) {
    A e[VE];
    unpack16<T>(u[j], e);
#pragma unroll
    for (int q = 0; q < VE; ++q) acc = sc(acc, e[q]);
    j = j + 1 == steps ? 0 : j + 1;
  }
}

// Folds the n elements at p (shared memory, any element-aligned address), one thread, as the
// 16-byte vectors that cover them: the first and last masked to [p, p + n), the ones between
// rotated as in fold_vectors_rotated. It reads up to 15 bytes either side of the span: the caller's
// stage must hold them (a tile starts at its stage's aligned base plus the source's shift, and
// the stages have slack past the tile); what they hold is never combined. The order is fixed by
// (n, p mod 16, rot).
template <typename T, typename A, class SC>
__device__ __forceinline__ void fold_span_rotated(const T* p, int n, int rot, A& acc, SC sc) {
  constexpr int VE = 16 / sizeof(T);
  if (n <= 0) return;
  const int mis = static_cast<int>((reinterpret_cast<uintptr_t>(p) & 15u) / sizeof(T));
  const uint4* u = reinterpret_cast<const uint4*>(p - mis);
  const int end = mis + n, nv = (end + VE - 1) / VE;  // elements from u, vectors
  A e[VE];
  unpack16<T>(u[0], e);
#pragma unroll
  for (int j = 0; j < VE; ++j)
    if (j >= mis && j < end) acc = sc(acc, e[j]);
  if (nv == 1) return;
  unpack16<T>(u[nv - 1], e);
#pragma unroll
  for (int j = 0; j < VE; ++j)
    if ((nv - 1) * VE + j < end) acc = sc(acc, e[j]);
  fold_vectors_rotated<T>(u + 1, nv - 2, rot, acc, sc);
}

// Folds 16 / sizeof(T) rows of R elements each (R under a vector's elements), which lie from v
// (shared memory, 16-byte aligned) as R whole vectors, into acc[row]: every index a compile-time
// constant, each element combined once, each row in order.
template <typename T, int R, typename A, class SC>
__device__ __forceinline__ void fold_short_rows(const void* v, A (&acc)[16 / sizeof(T)], SC sc) {
  constexpr int VE = 16 / sizeof(T);
  static_assert(R >= 1 && R < VE, "rows under a vector");
  const uint4* u = static_cast<const uint4*>(v);
#pragma unroll
  for (int k = 0; k < VE; ++k) acc[k] = sc.init();
#pragma unroll
  for (int q = 0; q < R; ++q) {
    A e[VE];
    unpack16<T>(u[q], e);
#pragma unroll
    for (int j = 0; j < VE; ++j) acc[(q * VE + j) / R] = sc(acc[(q * VE + j) / R], e[j]);
  }
}
// Runs f(std::integral_constant<int, R>{}) for a run-time row length 1 <= r < 16 / sizeof(T).
template <typename T, int R = 1, class F>
__device__ __forceinline__ void with_short_rows(int r, F&& f) {
  if constexpr (R + 1 < 16 / static_cast<int>(sizeof(T))) {
    if (r != R) return with_short_rows<T, R + 1>(r, f);
  }
  f(std::integral_constant<int, R>{});
}

// Folds the n elements at p (shared memory, any element-aligned address) into acc, thread
// `rank` of `size` taking every size-th 16-byte vector; the elements before the first 16-byte
// boundary and after the last one are taken one each. The order is fixed by (rank, size, n, p).
template <typename T, typename A>
__device__ __forceinline__ void fold_span(const T* p, int n, int rank, int size, A& acc, Combine<A> comb) {
  constexpr int VE = 16 / sizeof(T);
  const int mis = static_cast<int>((reinterpret_cast<uintptr_t>(p) & 15u) / sizeof(T));
  const int head = min(n, mis == 0 ? 0 : VE - mis);
  for (int i = rank; i < head; i += size) acc = comb(acc, to_acc<A>(p[i]));
  const int nvec = (n - head) / VE;
  with_static_combine<A>(comb.op, [&](auto sc) { fold_vectors<T>(p + head, nvec, rank, size, acc, sc); });
  for (int i = head + nvec * VE + rank; i < n; i += size) acc = comb(acc, to_acc<A>(p[i]));
}

// Reduces `v` over the `size` threads of the team in a fixed order; the result is valid in the
// team's rank 0. `size` is a multiple of 32 (the whole block or its consumer warps), and every
// thread of the team calls this. scratch holds one value per warp.
template <typename A>
__device__ A team_combine(A v, Combine<A> comb, engine::Team team, A* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = comb(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = team.rank / 32, lane = team.rank % 32, nwarps = team.size / 32;
  if (lane == 0) scratch[warp] = v;
  engine::team_sync(team);
  A r = comb.init();
  if (team.rank == 0)
    for (int w = 0; w < nwarps; ++w) r = comb(r, scratch[w]);
  return r;
}

}  // namespace kernels
}  // namespace cupipe
