// Column reductions read straight into registers: reduce_cols_direct_kernel, what the sync
// mechanism runs on 16-byte aligned columns (x and every row start on a 16-byte boundary). The
// ring of reduce_cols_kernel would only stage in shared memory what each thread folds alone: here
// a thread keeps U plain 16-byte loads in flight (its registers are the stages) and the block
// holds no ring, so more blocks fit an SM and each costs fewer instructions per element.
#pragma once

#include <cstdint>

#include "kernels/dependent_launch.cuh"
#include "kernels/fast_div.cuh"
#include "kernels/reduce/combine.cuh"

namespace cupipe {
namespace kernels {

// A block per (slices outer slices, column chunk, part of r). A chunk is up to kReduceThreads
// 16-byte column vectors (wider rows split into equal chunks); a block's threads split into
// `slices` equal runs of threads, one outer slice each (slices > 1 only for one chunk of a
// power-of-two vector count up to a warp; a run is whole warps or a power-of-two part of one, at
// least chunk_vecs lanes), and thread t of a run owns the chunk's vector
// t % chunk_vecs of the rows t / chunk_vecs, + groups, ... of its part. r is split only where the
// items (outer / slices x chunks) leave resident blocks idle; the parts' partials go to the
// workspace, [part][out], for the columns' partials pass.
// Folded (reduce over r and the innermost `width` elements of each row, kept `mid` between them: x
// is (outer / mid, r, mid, width)): a slice is one (outer, mid) pair, its columns fold to one output
// (a thread's vector's values, then the slice's threads: fold_block, fixed trees); chunks
// and parts write partials, [part * chunks + chunk][out]. The sum and the state kernels fold
// (argmax / argmin never: one dim or all).
// Folds whose blocks walk run reduce_cols_fold_kernel: a block's chunk is `walk` sweeps of chunk_vecs
// vectors, a thread adding its vector of each sweep to the same totals (they fold to one output
// anyway); the plain kernel takes the other folds.
struct ColsDirectPlan {
  int64_t outer, r, inner;  // outer: slices (x's outer extent x mid); inner: elements between rows
  int64_t mid;        // slices side by side in a row (1 unless folded)
  int64_t width;      // a slice's columns in a row: inner / mid
  bool fold;          // a slice's columns reduce to one output
  int64_t chunks;     // column chunks per outer slice
  int chunk_vecs;     // 16-byte vectors per chunk (a sweep of it), 1..kReduceThreads
  int slices;         // outer slices a block (a power of two)
  int groups;         // row groups a slice: kReduceThreads / slices / chunk_vecs (threads past them idle)
  int64_t parts;      // parts of r
  int64_t part_rows;  // rows per part (the last may have fewer)
  int64_t grid;       // ceil(outer / slices) * chunks * parts
  FastDiv parts_div, chunks_div;  // blockIdx.x -> (item, part); item -> (outer, chunk)
  // Sweeps a chunk: 1 unless a fold's blocks walk (reduce_cols_fold_kernel), then a power of two. Last,
  // so that the fields the other kernels read keep their offsets (docs/design.md §5).
  int walk;
  // Wrapped narrow columns (reduce_cols_wrap_kernel's, > 1): a row is one vector of 16 / (wrap x element size)
  // of the step's rows, `wrap` columns each, so lanes j, j + wrap, ... are one column (cols_direct_wrap).
  int wrap;
};

// The blocks an SM of reduce_cols_fold_kernel<U, T> and reduce_cols_wrap_kernel<U, T> (their launch
// bounds): the plan decides whether a fold walks at this residency, before it picks the kernel.
constexpr int cols_own_blocks_per_sm(int U) { return U >= 16 ? 2 : 3; }

// A 16-byte load that bypasses L1 (each byte is read once): ld.global.nc with no L1 allocation.
__device__ __forceinline__ uint4 load_once16(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// A narrow vector's VB bytes (8 or 4; 16: load_once16) in the low words of a uint4 (the rest zero), read
// as load_once16 does: unpack16 then yields its VB / sizeof(T) elements first.
template <int VB>
__device__ __forceinline__ uint4 load_once(const void* p) {
  static_assert(VB == 16 || VB == 8 || VB == 4, "16-, 8- or 4-byte vectors");
  if constexpr (VB == 16) {
    return load_once16(p);
  } else {
    uint4 v{0u, 0u, 0u, 0u};
    if constexpr (VB == 8)
      asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    else
      asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v.x) : "l"(p));
    return v;
  }
}

// What a thread of a direct column kernel reads: block blockIdx.x's (outer slice o, part of r
// [r0, r1)), and the thread's 16-byte vector of columns from col (of row group grp).
struct DirectColumn {
  int64_t o, part, r0, r1, col;
  int64_t base;  // the slice's first element: row 0, column 0
  int vec, grp, slice, chunk;
  bool active;  // the thread's slice, group and vector hold columns (threads past them idle)
};
template <typename T, bool Walk = false, int VB = 16>  // Walk: reduce_cols_fold_kernel (the others see walk 1)
__device__ __forceinline__ DirectColumn direct_column(const ColsDirectPlan& pl) {
  constexpr int VE = VB / sizeof(T);
  uint32_t item, part, ob, chunk;
  pl.parts_div.divmod(blockIdx.x, item, part);
  pl.chunks_div.divmod(item, ob, chunk);
  DirectColumn d;
  const int t = static_cast<int>(threadIdx.x);
  const int slice = t / (kReduceThreads / pl.slices), lane = t % (kReduceThreads / pl.slices);
  d.o = static_cast<int64_t>(ob) * pl.slices + slice, d.part = part;
  d.slice = slice, d.chunk = static_cast<int>(chunk);
  d.base = pl.mid == 1 ? d.o * pl.r * pl.inner : (d.o / pl.mid) * pl.r * pl.inner + (d.o % pl.mid) * pl.width;
  d.vec = lane % pl.chunk_vecs, d.grp = lane / pl.chunk_vecs;
  d.col = (static_cast<int64_t>(chunk) * (Walk ? pl.walk : 1) * pl.chunk_vecs + d.vec) * VE;
  d.active = d.grp < pl.groups && d.col < pl.width && d.o < pl.outer;
  d.r0 = static_cast<int64_t>(part) * pl.part_rows;
  d.r1 = min(pl.r, d.r0 + pl.part_rows);
  return d;
}

// A thread's VE totals of a folded slice's columns combined into acc[0] (a fixed tree).
template <int VE, typename A>
__device__ __forceinline__ void fold_vector(A (&acc)[VE], const Combine<A>& comb) {
#pragma unroll
  for (int s = VE / 2; s > 0; s /= 2)
#pragma unroll
    for (int j = 0; j < s; ++j) acc[j] = comb(acc[j], acc[j + s]);
}

// A folded slice's values to its output, one a thread (its vector's total; idle threads hold the
// identity): the slice's threads combine by shuffles (a fixed xor tree over a warp, or over the
// slice's part of one), then its warps' totals in order through shared memory: one barrier, where
// trees over the row groups and then the vectors took one a level. The slice's first thread
// stores the output, or the chunk's partial.
template <typename A>
__device__ __forceinline__ void fold_block(A v, const Combine<A>& comb, A* scratch, const DirectColumn& dc,
                                           const ColsDirectPlan& pl, void* out, DType od, A* partials,
                                           ReduceOp op) {
  const int t = static_cast<int>(threadIdx.x);
  const int lanes = kReduceThreads / pl.slices, width = min(32, lanes);
  for (int off = width >> 1; off > 0; off >>= 1) v = comb(v, __shfl_xor_sync(0xffffffffu, v, off));
  if (lanes > 32) {  // (uniform across the block)
    if ((t & 31) == 0) scratch[t >> 5] = v;
    __syncthreads();
    if (t % lanes != 0) return;
    for (int w = 1; w < lanes / 32; ++w) v = comb(v, scratch[(t >> 5) + w]);
  } else if (t % lanes != 0) {
    return;
  }
  if (dc.o >= pl.outer) return;
  if (pl.parts == 1 && pl.chunks == 1) store_out(out, od, dc.o, finalize(op, v, pl.r * pl.width));
  else partials[(dc.part * pl.chunks + dc.chunk) * pl.outer + dc.o] = v;
}

// The body of reduce_cols_direct_kernel, with Walk of reduce_cols_fold_kernel (a folded plan whose
// blocks walk) and with Wrap of reduce_cols_wrap_kernel (wrapped narrow columns): kernels of their
// own, as the walk's loop or the wrap's epilogue take the plain kernel's registers past four blocks
// an SM, which the other folds keep (docs/design.md §5).
template <int U, typename T, bool Walk, bool Wrap = false, int VB = 16>
__device__ __forceinline__ void cols_direct_body(const T* __restrict__ x, void* out, DType od, acc_t<T>* partials,
                                                 const ColsDirectPlan& pl, ReduceOp op) {
  using A = acc_t<T>;
  constexpr int VE = VB / sizeof(T), VE16 = 16 / sizeof(T);  // a vector's elements; a uint4's (unpack16)
  // [group][chunk vector][element]; a walking fold only its warps' totals (fold_block)
  __shared__ A scratch[Walk ? kReduceThreads / 32 : kReduceThreads * VE];
  const Combine<A> comb{op};
  allow_dependent_launch();  // the partials pass, when there is one, may start waiting

  const DirectColumn dc = direct_column<T, Walk, VB>(pl);
  const int t = static_cast<int>(threadIdx.x);
  const int vec = dc.vec, grp = dc.grp;
  const int64_t o = dc.o, part = dc.part, col = dc.col, r0 = dc.r0, r1 = dc.r1;
  const bool active = dc.active;

  A acc[VE];
#pragma unroll
  for (int j = 0; j < VE; ++j) acc[j] = comb.init();
  // A walking fold's sweeps: the thread's vector of each, while it lies in the row.
  const int64_t sweep = Walk ? int64_t(pl.chunk_vecs) * VE : 0;
  for (int w = 0; w < (Walk ? pl.walk : 1) && active && col + w * sweep < pl.width; ++w) {
    with_static_combine<A>(op, [&](auto sc) {
      const int64_t step = static_cast<int64_t>(pl.groups) * pl.inner;  // elements between the thread's rows
      const T* p = x + dc.base + (r0 + grp) * pl.inner + col + w * sweep;
      int64_t i = r0 + grp;
      // Whole batches of U rows: every load issued before the first is folded.
      for (; i + (U - 1) * static_cast<int64_t>(pl.groups) < r1; i += U * static_cast<int64_t>(pl.groups)) {
        uint4 v[U];
#pragma unroll
        for (int k = 0; k < U; ++k) v[k] = load_once<VB>(p + k * step);
#pragma unroll
        for (int k = 0; k < U; ++k) {
          A e[VE16];
          unpack16<T>(v[k], e);
#pragma unroll
          for (int j = 0; j < VE; ++j) acc[j] = sc(acc[j], e[j]);
        }
        p += U * step;
      }
      // The last, partial batch: its loads in flight together too, the rows past r1 not read.
      if (i < r1) {
        uint4 v[U];
#pragma unroll
        for (int k = 0; k < U; ++k)
          if (i + k * static_cast<int64_t>(pl.groups) < r1) v[k] = load_once<VB>(p + k * step);
#pragma unroll
        for (int k = 0; k < U; ++k) {
          if (i + k * static_cast<int64_t>(pl.groups) >= r1) break;
          A e[VE16];
          unpack16<T>(v[k], e);
#pragma unroll
          for (int j = 0; j < VE; ++j) acc[j] = sc(acc[j], e[j]);
        }
      }
    });
  }

  // A fold's columns all reach one output: the thread's VE totals combine, then the slice's threads
  // one value each (fold_block); no combine of row groups.
  if constexpr (!Wrap) {
    if (Walk || pl.fold) {  // (uniform across the block: every thread reaches the barriers)
      fold_vector<VE>(acc, comb);
      fold_block(acc[0], comb, scratch, dc, pl, out, od, partials, op);
      return;
    }
  }
  // Wrapped: the thread's lanes fold onto its wrap columns now (a fixed tree), acc[0, wrap) its totals.
  if constexpr (Wrap) {
#pragma unroll
    for (int s = VE / 2; s > 0; s /= 2)
      if (s >= pl.wrap)
#pragma unroll
        for (int j = 0; j < s; ++j) acc[j] = comb(acc[j], acc[j + s]);
  }

  // A slice's group totals combine in a fixed order: where chunk_vecs is a power of two under a
  // warp, the lanes of the same vector within a warp's part of the slice first (shuffles), then
  // those totals as a tree in shared memory (each slice its own part of it).
  int g = grp, ng = pl.groups;
  if (ng > 1 && pl.chunk_vecs < 32 && (pl.chunk_vecs & (pl.chunk_vecs - 1)) == 0) {
    const int lanes = kReduceThreads / pl.slices, width = min(32, lanes);
#pragma unroll
    for (int j = 0; j < VE; ++j)
      for (int off = pl.chunk_vecs; off < width; off <<= 1)
        acc[j] = comb(acc[j], __shfl_xor_sync(0xffffffffu, acc[j], off));
    // the warp part's index in its slice; lanes past its first vector row hold no total
    g = t % width < pl.chunk_vecs ? (t % lanes) / width : kReduceThreads;
    ng = lanes / width;
  }
  const bool holder = active && g < ng;
  if (ng > 1) {
    const int slice = dc.slice;
    A* mine = scratch + ((slice * ng + g) * pl.chunk_vecs + vec) * VE;
    if (holder) {
#pragma unroll
      for (int j = 0; j < VE; ++j) mine[j] = acc[j];
    }
    __syncthreads();
    int span = 1;
    while (span < ng) span <<= 1;
    for (int s = span >> 1; s > 0; s >>= 1) {
      if (holder && g < s && g + s < ng) {
#pragma unroll
        for (int j = 0; j < VE; ++j) mine[j] = comb(mine[j], mine[s * pl.chunk_vecs * VE + j]);
      }
      __syncthreads();
    }
    if (holder && g == 0) {
#pragma unroll
      for (int j = 0; j < VE; ++j) acc[j] = mine[j];
    }
  }
  if (!holder || g != 0) return;
  if constexpr (Wrap) {  // acc[0, wrap) are the slice's outputs
    const int64_t oi = o * pl.wrap;
#pragma unroll
    for (int j = 0; j < VE; ++j) {
      if (j >= pl.wrap) break;
      if (pl.parts == 1) store_out(out, od, oi + j, finalize(op, acc[j], pl.r * VE / pl.wrap));
      else partials[static_cast<int64_t>(part) * pl.outer * pl.wrap + oi + j] = acc[j];
    }
    return;
  }
  const int64_t oi = o * pl.width + col;
  if (pl.parts == 1) {
    A v[VE];
#pragma unroll
    for (int j = 0; j < VE; ++j) v[j] = finalize(op, acc[j], pl.r);
    store_outs<VE>(out, od, oi, VE, v);  // (inner is a multiple of VE: whole vectors)
  } else {
    A* dst = partials + static_cast<int64_t>(part) * pl.outer * pl.inner + oi;
#pragma unroll
    for (int j = 0; j < VE; ++j) dst[j] = acc[j];
  }
}

template <int U, typename T>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_cols_direct_kernel(const T* __restrict__ x, void* out, DType od, acc_t<T>* partials,
                              ColsDirectPlan pl, ReduceOp op) {
  cols_direct_body<U, T, false>(x, out, od, partials, pl, op);
}
// Narrow columns that do not wrap (rows of 4 or 8 bytes, each slice's start off a 16-byte boundary:
// odd r, or x aligned to 8 or 4 only): the direct body reading one VB-byte vector a row (VB: the row's bytes).
template <int U, typename T, int VB>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_cols_narrow_kernel(const T* __restrict__ x, void* out, DType od, acc_t<T>* partials,
                              ColsDirectPlan pl, ReduceOp op) {
  cols_direct_body<U, T, false, false, VB>(x, out, od, partials, pl, op);
}
template <int U, typename T>
__global__ void __launch_bounds__(kReduceThreads, cols_own_blocks_per_sm(U))
    reduce_cols_wrap_kernel(const T* __restrict__ x, void* out, DType od, acc_t<T>* partials,
                            ColsDirectPlan pl, ReduceOp op) {
  cols_direct_body<U, T, false, true>(x, out, od, partials, pl, op);
}
template <int U, typename T>
__global__ void __launch_bounds__(kReduceThreads, cols_own_blocks_per_sm(U))
    reduce_cols_fold_kernel(const T* __restrict__ x, void* out, DType od, acc_t<T>* partials,
                            ColsDirectPlan pl, ReduceOp op) {
  cols_direct_body<U, T, true>(x, out, od, partials, pl, op);
}

}  // namespace kernels
}  // namespace cupipe
