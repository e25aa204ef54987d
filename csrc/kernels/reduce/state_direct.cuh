// The state reductions (reduce/states.h) over 16-byte aligned columns read straight into
// registers: reduce_state_cols_direct_kernel, what the sync mechanism runs there, on the direct
// column kernel's plan (columns_direct.cuh). A thread holds the states of its vector's columns (4
// fp32, 8 of a 2-byte type, 2 fp64) and keeps U rows of loads in flight, each column's rows added
// four at a time (add_block) in ascending index order, as Arg's add assumes.
#pragma once

#include <cstdint>

#include "kernels/reduce/columns_direct.cuh"
#include "kernels/reduce/stateful.cuh"

namespace cupipe {
namespace kernels {

template <int U, typename T, StateKind K>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_state_cols_direct_kernel(const T* __restrict__ x, void* out, DType od, State<acc_t<T>, K>* partials,
                                    ColsDirectPlan pl, StateCtx c) {
  static_assert(U % 4 == 0, "rows are added four at a time");
  using A = acc_t<T>;
  using St = State<A, K>;
  constexpr int VE = 16 / sizeof(T);
  __shared__ St scratch[kReduceThreads];
  allow_dependent_launch();  // the partials pass, when there is one, may start waiting

  const DirectColumn dc = direct_column<T>(pl);
  const int t = static_cast<int>(threadIdx.x);
  St acc[VE];
#pragma unroll
  for (int j = 0; j < VE; ++j) acc[j] = St::init(c);
  if (dc.active) {
    const T* first = x + dc.o * pl.r * pl.inner + dc.col;  // the columns' row 0: Moments' shifts
    A k0[VE];
#pragma unroll
    for (int j = 0; j < VE; ++j) k0[j] = A(0);
    if constexpr (K == StateKind::Moments) unpack16<T>(load_once16(first), k0);
    const int64_t step = static_cast<int64_t>(pl.groups) * pl.inner;
    const int64_t gstep = pl.groups;
    const T* p = first + (dc.r0 + dc.grp) * pl.inner;
    int64_t i = dc.r0 + dc.grp;
    for (; i + (U - 1) * gstep < dc.r1; i += U * gstep, p += U * step) {
      uint4 v[U];  // raw: unpacked a column at a time (all of them at once would not fit registers)
#pragma unroll
      for (int k = 0; k < U; ++k) v[k] = load_once16(p + k * step);
#pragma unroll
      for (int j = 0; j < VE; ++j) {
#pragma unroll
        for (int q = 0; q < U; q += 4) {
          A b[4];
#pragma unroll
          for (int m = 0; m < 4; ++m) {
            A e[VE];
            unpack16<T>(v[q + m], e);  // (only element j is kept)
            b[m] = e[j] - k0[j];
          }
          acc[j].add_block(b, i + q * gstep, gstep, c);
        }
      }
    }
    // The last, partial batch: its loads in flight together, each row added alone.
    if (i < dc.r1) {
      uint4 v[U];
#pragma unroll
      for (int k = 0; k < U; ++k)
        if (i + k * gstep < dc.r1) v[k] = load_once16(p + k * step);
#pragma unroll
      for (int k = 0; k < U; ++k) {
        if (i + k * gstep >= dc.r1) break;
        A e[VE];
        unpack16<T>(v[k], e);
#pragma unroll
        for (int j = 0; j < VE; ++j) acc[j].add(e[j] - k0[j], i + k * gstep, c);
      }
    }
  }

  // The groups' states merge in a fixed order: where chunk_vecs is a power of two under a warp, a
  // warp's lanes of the same vector first (shuffles), then the totals as a tree through shared
  // memory, as many columns a pass as it holds; group 0 ends with them and stores the result or
  // the part's partial ([part][out]).
  int g = dc.grp, ng = pl.groups;
  if (ng > 1 && pl.chunk_vecs < 32 && (pl.chunk_vecs & (pl.chunk_vecs - 1)) == 0) {
#pragma unroll
    for (int j = 0; j < VE; ++j)
      for (int off = pl.chunk_vecs; off < 32; off <<= 1) acc[j].merge(shfl_state(acc[j], off, 32), c);
    g = (t & 31) < pl.chunk_vecs ? t >> 5 : kReduceThreads;  // lanes past the first vector row: no total
    ng = kReduceThreads / 32;
  }
  const bool holder = dc.active && g < ng;
  if (ng > 1) {
    const int slots = ng * pl.chunk_vecs;            // a column's states
    const int per = max(1, kReduceThreads / slots);  // columns a pass
    int span = 1;
    while (span < ng) span <<= 1;
    St* mine = scratch + g * pl.chunk_vecs + dc.vec;  // (only holders touch it)
    for (int j0 = 0; j0 < VE; j0 += per) {
      if (holder) {
#pragma unroll
        for (int j = 0; j < VE; ++j)
          if (j >= j0 && j < j0 + per) mine[(j - j0) * slots] = acc[j];
      }
      __syncthreads();
      for (int s = span >> 1; s > 0; s >>= 1) {
        if (holder && g < s && g + s < ng) {
#pragma unroll
          for (int j = 0; j < VE; ++j)
            if (j >= j0 && j < j0 + per) mine[(j - j0) * slots].merge(mine[(j - j0) * slots + s * pl.chunk_vecs], c);
        }
        __syncthreads();
      }
      if (holder && g == 0) {
#pragma unroll
        for (int j = 0; j < VE; ++j)
          if (j >= j0 && j < j0 + per) acc[j] = mine[(j - j0) * slots];
      }
      if (j0 + per < VE) __syncthreads();  // the scratch is free for the next pass
    }
  }
  if (!holder || g != 0) return;
  const int64_t oi = dc.o * pl.inner + dc.col;
#pragma unroll
  for (int j = 0; j < VE; ++j) {
    if (pl.parts == 1) store_state(out, od, oi + j, acc[j], c);
    else partials[dc.part * pl.outer * pl.inner + oi + j] = acc[j];
  }
}

}  // namespace kernels
}  // namespace cupipe
