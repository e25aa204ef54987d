// The state reductions (reduce/states.h) read straight into registers, where the sync mechanism
// runs them: reduce_state_cols_direct_kernel over 16-byte aligned columns, on the direct column
// kernel's plan (columns_direct.cuh): a thread holds the states of its vector's columns (4 fp32, 8
// of a 2-byte type, 2 fp64) and keeps U rows of loads in flight, each column's U rows added as one
// block (add_block) in ascending index order, as Arg's add assumes; and
// reduce_state_rows_direct_kernel along 16-byte aligned rows (RowsDirectPlan, below).
#pragma once

#include <cstdint>

#include "kernels/reduce/columns_direct.cuh"
#include "kernels/reduce/stateful.cuh"

namespace cupipe {
namespace kernels {

// Rows (inner == 1) of whole 16-byte vectors from a 16-byte aligned x (or one row, whose elements
// past its last whole vector are its tail), read with U loads a thread in flight and no ring.
// Packed (group > 0): `group` lanes a row (a power of two up to a warp, enough that a lane's vectors
// are one batch of loads where that fits), so a warp item is 32 / group adjacent rows; a block's
// warps take adjacent items, items_per_warp each, and merge by shuffles alone; rows shorter than a
// line in that layout's loads are read interleaved (rows_a_lane, below). Long rows (group ==
// 0): a block per (row, part of part_vecs vectors), its threads striding the part a vector apart,
// the warps' states merged in warp order through shared memory; the parts' partials ([out][part])
// go to the partials pass.
struct RowsDirectPlan {
  int64_t outer, r;
  int64_t row_vecs;  // whole vectors a row
  int group, group_log2;
  int rows_a_lane;   // packed: 1, or U: a lane reads one vector of each of U rows (rows of `group` vectors)
  int64_t items;     // packed: warp items (ceil(outer / (rows_a_lane * 32 / group)))
  int items_per_warp;
  int64_t parts, part_vecs;
  int64_t grid;
  FastDiv parts_div;  // long rows: blockIdx.x -> (row, part)
};

// The kinds read interleaved (rows_a_lane == U): var / std, the norms, and logsumexp of 4- and
// 8-byte elements. Argmax / argmin (the index pass) and 2-byte logsumexp (its exponentials) ran
// slower interleaved than with G lanes a row (design.md §5.1).
constexpr bool state_rows_interleave(StateKind k, int esz) {
  return k == StateKind::Moments || k == StateKind::Norm || (k == StateKind::Lse && esz >= 4);
}

// A folded slice's column states to its output, as fold_block (columns_direct.cuh) with merges: one
// state a thread (its vector's columns merged already; idle threads hold the empty state), merged
// by shuffles over the slice's lanes, then its warps' states in order through shared memory; the
// slice's first thread stores the result, or the chunk's partial state ([part * chunks + chunk][out]).
template <typename St>
__device__ __forceinline__ void fold_state_block(St s, St* scratch, const DirectColumn& dc, const ColsDirectPlan& pl,
                                                 void* out, DType od, St* partials, const StateCtx& c) {
  const int t = static_cast<int>(threadIdx.x);
  const int lanes = kReduceThreads / pl.slices, width = min(32, lanes);
  for (int off = width >> 1; off > 0; off >>= 1) s.merge(shfl_state(s, off, 32), c);
  if (lanes > 32) {  // (uniform across the block)
    if ((t & 31) == 0) scratch[t >> 5] = s;
    __syncthreads();
    if (t % lanes != 0) return;
    for (int w = 1; w < lanes / 32; ++w) s.merge(scratch[(t >> 5) + w], c);
  } else if (t % lanes != 0) {
    return;
  }
  if (dc.o >= pl.outer) return;
  if (pl.parts == 1 && pl.chunks == 1) store_state(out, od, dc.o, s, c);
  else partials[(dc.part * pl.chunks + dc.chunk) * pl.outer + dc.o] = s;
}

// The body of reduce_state_cols_direct_kernel and, with Fold, of reduce_state_cols_fold_kernel (a
// folded plan: ColsDirectPlan::fold). The fold is a kernel of its own, not a run-time branch, so
// that the plain kernel's registers never pay for the fold's epilogue (docs/design.md §5). With
// Wrap, of reduce_state_cols_wrap_kernel: wrapped narrow columns (ColsDirectPlan::wrap, as the sum
// kinds' reduce_cols_wrap_kernel), a row one vector whose lanes j, j + wrap, ... are column j % wrap
// of rows j / wrap, ... of the vector's VE / wrap: each lane's state takes its rows' own indices and
// its column's shift, and the lanes merge onto their wrap columns before the row groups.
template <int U, typename T, StateKind K, bool Fold, bool Wrap = false, int VB = 16>
__device__ __forceinline__ void state_cols_direct(const T* __restrict__ x, void* out, DType od,
                                                  State<acc_t<T>, K>* partials, const ColsDirectPlan& pl,
                                                  const StateCtx& c) {
  using A = acc_t<T>;
  using St = State<A, K>;
  constexpr int VE = VB / sizeof(T), VE16 = 16 / sizeof(T);  // a vector's elements; a uint4's (unpack16)
  __shared__ St scratch[Fold ? kReduceThreads / 32 : kReduceThreads];  // (a fold: its warps' states)
  allow_dependent_launch();  // the partials pass, when there is one, may start waiting

  const DirectColumn dc = direct_column<T, false, VB>(pl);
  const int t = static_cast<int>(threadIdx.x);
  St acc[VE];
#pragma unroll
  for (int j = 0; j < VE; ++j) acc[j] = St::init(c);
  if (dc.active) {
    // the columns' row 0 (Moments' shifts); the plain kernel's plans keep mid 1 (dc.base unused there)
    const T* first = x + (Fold ? dc.base : dc.o * pl.r * pl.inner) + dc.col;
    A k0[VE16];
#pragma unroll
    for (int j = 0; j < VE16; ++j) k0[j] = A(0);
    if constexpr (K == StateKind::Moments) {
      unpack16<T>(load_once<VB>(Fold ? x + dc.base : first), k0);
      if constexpr (Fold) {  // one shift for the slice: its columns' states merge into one
#pragma unroll
        for (int j = 1; j < VE; ++j) k0[j] = k0[0];
      }
      if constexpr (Wrap) {  // a column's lanes share its row 0's shift (lanes under wrap keep theirs)
#pragma unroll
        for (int j = 0; j < VE; ++j) {
          A k = k0[j];
#pragma unroll
          for (int w = 1; w < VE; w *= 2)  // (wrap a power of two; indices known at compile time)
            if (pl.wrap == w) k = k0[j & (w - 1)];
          k0[j] = k;
        }
      }
    }
    // A lane's rows: wrapped, row i's lane j is row i x rows_vec + j / wrap of column j % wrap.
    const int rows_vec = Wrap ? VE / pl.wrap : 1, wrap_log2 = Wrap ? 31 - __clz(pl.wrap) : 0;
    const int64_t step = static_cast<int64_t>(pl.groups) * pl.inner;
    const int64_t gstep = pl.groups;
    const T* p = first + (dc.r0 + dc.grp) * pl.inner;
    int64_t i = dc.r0 + dc.grp;
    for (; i + (U - 1) * gstep < dc.r1; i += U * gstep, p += U * step) {
      uint4 v[U];  // raw: unpacked a column at a time (all of them at once would not fit registers)
#pragma unroll
      for (int k = 0; k < U; ++k) v[k] = load_once<VB>(p + k * step);
#pragma unroll
      for (int j = 0; j < VE; ++j) {  // a column's U rows as one block: every load in flight before the first add
        A b[U];
#pragma unroll
        for (int m = 0; m < U; ++m) {
          A e[VE16];
          unpack16<T>(v[m], e);  // (only element j is kept)
          b[m] = e[j] - k0[j];
        }
        acc[j].add_block(b, Wrap ? i * rows_vec + (j >> wrap_log2) : i, gstep * rows_vec, c);
      }
    }
    // The last, partial batch: its loads in flight together, each row added alone.
    if (i < dc.r1) {
      uint4 v[U];
#pragma unroll
      for (int k = 0; k < U; ++k)
        if (i + k * gstep < dc.r1) v[k] = load_once<VB>(p + k * step);
#pragma unroll
      for (int k = 0; k < U; ++k) {
        if (i + k * gstep >= dc.r1) break;
        A e[VE16];
        unpack16<T>(v[k], e);
#pragma unroll
        for (int j = 0; j < VE; ++j)
          acc[j].add(e[j] - k0[j], Wrap ? (i + k * gstep) * rows_vec + (j >> wrap_log2) : i + k * gstep, c);
      }
    }
  }
  // A fold's columns all reach one output: its thread's states merge (a fixed tree), then the
  // slice's threads one state each (fold_state_block); no merge of row groups.
  if constexpr (Fold) {
#pragma unroll
    for (int s = VE / 2; s > 0; s /= 2)
#pragma unroll
      for (int j = 0; j < s; ++j) acc[j].merge(acc[j + s], c);
    fold_state_block(acc[0], scratch, dc, pl, out, od, partials, c);
    return;
  }
  // Wrapped: the lanes of each column merge onto lane j % wrap (a fixed tree); acc[0, wrap) hold
  // the thread's column states, which alone the groups merge and store.
  const int ncols = Wrap ? pl.wrap : VE;
  if constexpr (Wrap) {
#pragma unroll
    for (int s = VE / 2; s > 0; s /= 2)
      if (s >= pl.wrap)
#pragma unroll
        for (int j = 0; j < s; ++j) acc[j].merge(acc[j + s], c);
  }

  // A slice's group states merge in a fixed order: where chunk_vecs is a power of two under a warp,
  // the lanes of the same vector within a warp's part of the slice first (shuffles), then the
  // totals as a tree through shared memory (each slice its own part), as many columns a pass as it
  // holds; a slice's group 0 ends with them and stores the result or the part's partial ([part][out]).
  int g = dc.grp, ng = pl.groups;
  if (ng > 1 && pl.chunk_vecs < 32 && (pl.chunk_vecs & (pl.chunk_vecs - 1)) == 0) {
    const int lanes = kReduceThreads / pl.slices, width = min(32, lanes);
#pragma unroll
    for (int j = 0; j < VE; ++j) {
      if (j >= ncols) break;
      for (int off = pl.chunk_vecs; off < width; off <<= 1) acc[j].merge(shfl_state(acc[j], off, 32), c);
    }
    // the warp part's index in its slice; lanes past its first vector row hold no total
    g = t % width < pl.chunk_vecs ? (t % lanes) / width : kReduceThreads;
    ng = lanes / width;
  }
  const bool holder = dc.active && g < ng;
  if (ng > 1) {
    const int slots = pl.slices * ng * pl.chunk_vecs;  // a column's states, every slice's
    const int per = max(1, kReduceThreads / slots);    // columns a pass
    int span = 1;
    while (span < ng) span <<= 1;
    const int slice = t / (kReduceThreads / pl.slices);
    St* mine = scratch + (slice * ng + g) * pl.chunk_vecs + dc.vec;  // (only holders touch it)
    for (int j0 = 0; j0 < ncols; j0 += per) {
      if (holder) {
#pragma unroll
        for (int j = 0; j < VE; ++j)
          if (j >= j0 && j < j0 + per && j < ncols) mine[(j - j0) * slots] = acc[j];
      }
      __syncthreads();
      for (int s = span >> 1; s > 0; s >>= 1) {
        if (holder && g < s && g + s < ng) {
#pragma unroll
          for (int j = 0; j < VE; ++j)
            if (j >= j0 && j < j0 + per && j < ncols)
              mine[(j - j0) * slots].merge(mine[(j - j0) * slots + s * pl.chunk_vecs], c);
        }
        __syncthreads();
      }
      if (holder && g == 0) {
#pragma unroll
        for (int j = 0; j < VE; ++j)
          if (j >= j0 && j < j0 + per && j < ncols) acc[j] = mine[(j - j0) * slots];
      }
      if (j0 + per < ncols) __syncthreads();  // the scratch is free for the next pass
    }
  }
  if (!holder || g != 0) return;
  const int64_t row_out = Wrap ? pl.wrap : pl.inner;  // outputs a slice
  const int64_t oi = dc.o * row_out + dc.col;
#pragma unroll
  for (int j = 0; j < VE; ++j) {
    if (j >= ncols) break;
    if (pl.parts == 1) store_state(out, od, oi + j, acc[j], c);
    else partials[dc.part * pl.outer * row_out + oi + j] = acc[j];
  }
}

template <int U, typename T, StateKind K>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_state_cols_direct_kernel(const T* __restrict__ x, void* out, DType od, State<acc_t<T>, K>* partials,
                                    ColsDirectPlan pl, StateCtx c) {
  state_cols_direct<U, T, K, false>(x, out, od, partials, pl, c);
}
template <int U, typename T, StateKind K>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_state_cols_fold_kernel(const T* __restrict__ x, void* out, DType od, State<acc_t<T>, K>* partials,
                                  ColsDirectPlan pl, StateCtx c) {
  state_cols_direct<U, T, K, true>(x, out, od, partials, pl, c);
}
// Narrow columns that do not wrap (rows of one 8- or 4-byte vector: odd r, x aligned to the row only), as the
// sum kinds' reduce_cols_narrow_kernel.
template <int U, typename T, StateKind K, int VB>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_state_cols_narrow_kernel(const T* __restrict__ x, void* out, DType od, State<acc_t<T>, K>* partials,
                                    ColsDirectPlan pl, StateCtx c) {
  state_cols_direct<U, T, K, false, false, VB>(x, out, od, partials, pl, c);
}
// Three blocks an SM (two at 16 loads), as the sum kinds' wrap kernel: the lanes' merge is not to cost
// the 2-byte Moments kernel a resident block (docs/design.md §5).
template <int U, typename T, StateKind K>
__global__ void __launch_bounds__(kReduceThreads, cols_own_blocks_per_sm(U))
    reduce_state_cols_wrap_kernel(const T* __restrict__ x, void* out, DType od, State<acc_t<T>, K>* partials,
                                  ColsDirectPlan pl, StateCtx c) {
  state_cols_direct<U, T, K, false, true>(x, out, od, partials, pl, c);
}

// Interleaved rows: a lane holds one value of each of U rows; the G lanes of a lane group (G a power
// of two, at least U) hold the same U rows. Reduces each row's values with op in a fixed order, the
// lower lanes' first: a reduce-scatter (at offset G / 2, G / 4, ... a lane keeps half its rows and
// combines its partner's copy of them), then a butterfly over the G / U lanes left. Returns the
// result of row gl / (G / U); with Gather, v[k] is then row k's result in every lane.
template <int U, bool Gather, typename V, class Op>
__device__ __forceinline__ V interleaved_rows_reduce(V (&v)[U], int G, int gl, int lane, Op op) {
  const int spread = G / U;
#pragma unroll
  for (int h = U / 2; h >= 1; h /= 2) {
    const int o = spread * h;
    const bool hi = (gl & o) != 0;
#pragma unroll
    for (int i = 0; i < h; ++i) {
      const V give = hi ? v[i] : v[i + h], keep = hi ? v[i + h] : v[i];
      const V got = __shfl_xor_sync(0xffffffffu, give, o, G);
      v[i] = hi ? op(got, keep) : op(keep, got);
    }
  }
  for (int o = 1; o < spread; o <<= 1) {
    const V got = __shfl_xor_sync(0xffffffffu, v[0], o, G);
    v[0] = (gl & o) ? op(got, v[0]) : op(v[0], got);
  }
  const V mine = v[0];
  if constexpr (Gather) {
#pragma unroll
    for (int k = 0; k < U; ++k) v[k] = __shfl_sync(0xffffffffu, mine, (lane & ~(G - 1)) + k * spread);
  }
  return mine;
}

// Each thread adds its vectors of a row in ascending index order, U loads in flight, then the tail
// (lane 0 of the row's group, or thread 0 of its last part). Moments add x - x0, x0 the row's first
// element (states.h), so that the parts of a row merge; interleaved rows make a row's state in two
// passes instead (below).
template <int U, typename T, StateKind K>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_state_rows_direct_kernel(const T* __restrict__ x, void* out, DType od, State<acc_t<T>, K>* partials,
                                    RowsDirectPlan pl, StateCtx c) {
  using A = acc_t<T>;
  using St = State<A, K>;
  constexpr int VE = 16 / sizeof(T);
  constexpr int kWarps = kReduceThreads / 32;
  __shared__ St scratch[kWarps];
  allow_dependent_launch();  // the partials pass, when there is one, may start waiting
  const int t = static_cast<int>(threadIdx.x), lane = t & 31, warp = t >> 5;

  // A batch of U vectors at v, v + stride, ... (those below v1; all of them where `full`) added to s
  // in index order; Moments shifted by x0.
  auto add_batch = [&](St& s, const uint4 (&b)[U], int64_t v, int64_t v1, int64_t stride, A x0, bool full) {
    auto add_vec = [&](const uint4& q, int64_t vi) {
      A e[VE];
      unpack16<T>(q, e);
      if constexpr (K == StateKind::Moments) {
#pragma unroll
        for (int j = 0; j < VE; ++j) e[j] -= x0;
      }
      s.add_block(e, vi * VE, 1, c);
    };
    const auto each = [&] {
#pragma unroll
      for (int k = 0; k < U; ++k) {
        if (!full && v + k * stride >= v1) break;
        add_vec(b[k], v + k * stride);
      }
    };
    if constexpr (K == StateKind::Arg) {
      each();  // the index of each vector's best
    } else if (!full && v + (U - 1) * stride >= v1) {
      each();
    } else {
      // The kinds that need no index add a whole batch as one block: one merge a batch, and its
      // loads stay in flight together (ptxas had issued a vector add's load after the previous add).
      A e[U * VE];
#pragma unroll
      for (int k = 0; k < U; ++k) unpack16<T>(b[k], e + k * VE);
      if constexpr (K == StateKind::Moments) {
#pragma unroll
        for (int j = 0; j < U * VE; ++j) e[j] -= x0;
      }
      s.add_block(e, 0, 0, c);
    }
  };
  // Loads the vectors v, v + stride, ... below v1 of u: a batch in flight together.
  auto load_batch = [&](uint4 (&b)[U], const uint4* u, int64_t v, int64_t v1, int64_t stride) {
#pragma unroll
    for (int k = 0; k < U; ++k)
      if (v + k * stride < v1) b[k] = load_once16(u + v + k * stride);
  };

  // Vectors v, v + stride, ... below v1 of `row`, then the row's tail where `tail`.
  auto fold = [&](St& s, const T* row, int64_t v, int64_t v1, int64_t stride, bool tail) {
    A x0 = A(0);
    if constexpr (K == StateKind::Moments) x0 = to_acc<A>(row[0]);
    const uint4* u = reinterpret_cast<const uint4*>(row);
    for (; v + (U - 1) * stride < v1; v += U * stride) {
      uint4 b[U];
#pragma unroll
      for (int k = 0; k < U; ++k) b[k] = load_once16(u + v + k * stride);
      add_batch(s, b, v, v1, stride, x0, true);
    }
    if (v < v1) {  // the last, partial batch: its loads in flight together
      uint4 b[U];
      load_batch(b, u, v, v1, stride);
      add_batch(s, b, v, v1, stride, x0, false);
    }
    if (tail)
      for (int64_t e = pl.row_vecs * VE; e < pl.r; ++e) s.add(to_acc<A>(row[e]) - x0, e, c);  // (x0: 0 but for Moments)
  };

  if (pl.group > 0) {
    const int G = pl.group, sub = lane >> pl.group_log2, gl = lane & (G - 1);
    const int64_t first = static_cast<int64_t>(blockIdx.x) * pl.items_per_warp * kWarps + warp;
    // Rows a lane reads in one batch, no tail (the packed plan's usual case), at 4 loads a thread (a
    // second batch of 8 or 16 costs too many registers): the next item's batch is loaded before this
    // one's is added and merged, so a warp's loads stay in flight through its merges and stores;
    // Moments' shift, the row's first element, comes from the group's lane 0. Norm, one accumulator
    // and no merge to hide, keeps the plain loop (design.md §5.1).
    if (K != StateKind::Norm && U <= 4 && pl.rows_a_lane == 1 && pl.row_vecs <= static_cast<int64_t>(G) * U &&
        pl.row_vecs * VE == pl.r) {
      const auto row_of = [&](int j) {
        return ((first + static_cast<int64_t>(j) * kWarps) << (5 - pl.group_log2)) + sub;
      };
      const auto fetch = [&](uint4 (&b)[U], int j) {
        const int64_t row = row_of(j);
        if (first + static_cast<int64_t>(j) * kWarps < pl.items && row < pl.outer)
          load_batch(b, reinterpret_cast<const uint4*>(x + row * pl.r), gl, pl.row_vecs, G);
      };
      uint4 next[U] = {};
      fetch(next, 0);
      for (int j = 0; j < pl.items_per_warp; ++j) {
        if (first + static_cast<int64_t>(j) * kWarps >= pl.items) break;  // (warp-uniform)
        uint4 b[U];
#pragma unroll
        for (int k = 0; k < U; ++k) b[k] = next[k];
        if (j + 1 < pl.items_per_warp) fetch(next, j + 1);
        const int64_t row = row_of(j);
        A x0 = A(0);
        if constexpr (K == StateKind::Moments) {
          A e[VE];
          unpack16<T>(b[0], e);
          x0 = __shfl_sync(0xffffffffu, e[0], lane & ~(G - 1));
        }
        St s = St::init(c);
        if (row < pl.outer) add_batch(s, b, gl, pl.row_vecs, G, x0, false);
        for (int o = 1; o < G; o <<= 1) {  // a fixed tree: lane 0 of the group ends with the row's state
          const St o_s = shfl_state(s, o, G);
          if ((gl & o) == 0) s.merge(o_s, c);
        }
        if (gl == 0 && row < pl.outer) store_state(out, od, row, s, c);
      }
      return;
    }
    // Interleaved rows (rows_a_lane == U, rows of G vectors): load k of a warp reads 32 / G whole
    // rows, 512 contiguous bytes (with G lanes a row reading a batch each, a row under 64 bytes split
    // each 128-byte line over several L2 requests). A lane holds a vector of each of U rows, so a row's
    // state is made in two passes over registers, each one scalar a row reduced across the row's
    // lanes (interleaved_rows_reduce), where merging U states a lane had cost more than the layout
    // gained: var the sum of the shifted elements (then the mean) and the squares about the mean,
    // logsumexp the largest element and the sum of exponentials, norms one pass. The next item's
    // loads go out before this one's passes.
    if constexpr (U == 4 && state_rows_interleave(K, sizeof(T))) {
      if (pl.rows_a_lane == U) {
        const int per_load = 32 >> pl.group_log2, spread = G / U;  // rows a load; lanes a row at the end
        const auto row_of = [&](int j, int k) {
          return (first + static_cast<int64_t>(j) * kWarps) * (U * per_load) + k * per_load + sub;
        };
        const auto fetch = [&](uint4 (&b)[U], int j) {
          if (first + static_cast<int64_t>(j) * kWarps >= pl.items) return;
#pragma unroll
          for (int k = 0; k < U; ++k) {
            const int64_t row = row_of(j, k);
            if (row < pl.outer) b[k] = load_once16(reinterpret_cast<const uint4*>(x + row * pl.r) + gl);
          }
        };
        uint4 next[U] = {};
        fetch(next, 0);
        for (int j = 0; j < pl.items_per_warp; ++j) {
          if (first + static_cast<int64_t>(j) * kWarps >= pl.items) break;  // (warp-uniform)
          A e[U][VE];
#pragma unroll
          for (int k = 0; k < U; ++k) unpack16<T>(next[k], e[k]);
          if (j + 1 < pl.items_per_warp) fetch(next, j + 1);
          A v[U], w[U];
          St st;
          const auto sum = [](A a, A b) { return a + b; };
          if constexpr (K == StateKind::Moments) {
#pragma unroll
            for (int k = 0; k < U; ++k) {  // shifted by the row's first element, as the other layouts
              const A x0 = __shfl_sync(0xffffffffu, e[k][0], lane & ~(G - 1));
#pragma unroll
              for (int i = 0; i < VE; ++i) e[k][i] -= x0;
              v[k] = e[k][0];
#pragma unroll
              for (int i = 1; i < VE; ++i) v[k] += e[k][i];
            }
            const A inv_n = A(1) / static_cast<A>(pl.r);
            st.mean = interleaved_rows_reduce<U, true>(v, G, gl, lane, sum) * inv_n;
#pragma unroll
            for (int k = 0; k < U; ++k) {
              v[k] *= inv_n;  // the row's mean
              w[k] = A(0);
#pragma unroll
              for (int i = 0; i < VE; ++i) w[k] += (e[k][i] - v[k]) * (e[k][i] - v[k]);
            }
            st.m2 = interleaved_rows_reduce<U, false>(w, G, gl, lane, sum);
            st.n = pl.r;
          } else if constexpr (K == StateKind::Lse) {
            const auto top = [](A a, A b) { return b > a || a != a ? b : a; };  // NaN never wins but alone
#pragma unroll
            for (int k = 0; k < U; ++k) {
              v[k] = e[k][0];
#pragma unroll
              for (int i = 1; i < VE; ++i) v[k] = top(v[k], e[k][i]);
            }
            st.m = interleaved_rows_reduce<U, true>(v, G, gl, lane, top);
#pragma unroll
            for (int k = 0; k < U; ++k) {
              const A m = v[k];
              w[k] = A(0);
              if (m - m == A(0)) {  // finite: an element equal to m adds exp(0) = 1
#pragma unroll
                for (int i = 0; i < VE; ++i) w[k] += st_exp(e[k][i] - m);
              } else {  // (as State::add: exp(inf - inf) would be NaN)
#pragma unroll
                for (int i = 0; i < VE; ++i) w[k] += e[k][i] == m ? A(1) : st_exp(e[k][i] - m);
              }
            }
            st.s = interleaved_rows_reduce<U, false>(w, G, gl, lane, sum);
          } else {
            const auto fold = [&](A a, A b) {
              return c.ord == NormOrd::Inf ? nan_max(a, b) : c.ord == NormOrd::NegInf ? nan_min(a, b) : a + b;
            };
#pragma unroll
            for (int k = 0; k < U; ++k) {
              St t = St::init(c);
              t.add_block(e[k], 0, 0, c);
              v[k] = t.v;
            }
            st.v = interleaved_rows_reduce<U, false>(v, G, gl, lane, fold);
          }
          const int64_t row = row_of(j, gl / spread);
          if ((gl & (spread - 1)) == 0 && row < pl.outer) store_state(out, od, row, st, c);
        }
        return;
      }
    }
    for (int j = 0; j < pl.items_per_warp; ++j) {
      const int64_t item = first + static_cast<int64_t>(j) * kWarps;
      if (item >= pl.items) break;  // (warp-uniform)
      const int64_t row = (item << (5 - pl.group_log2)) + sub;
      St s = St::init(c);
      if (row < pl.outer) fold(s, x + row * pl.r, gl, pl.row_vecs, G, gl == 0);
      for (int o = 1; o < G; o <<= 1) {  // a fixed tree: lane 0 of the group ends with the row's state
        const St o_s = shfl_state(s, o, G);
        if ((gl & o) == 0) s.merge(o_s, c);
      }
      if (gl == 0 && row < pl.outer) store_state(out, od, row, s, c);
    }
    return;
  }

  uint32_t row_u, part_u;
  pl.parts_div.divmod(blockIdx.x, row_u, part_u);
  const int64_t row = row_u, part = part_u;
  const int64_t v0 = part * pl.part_vecs, v1 = min(pl.row_vecs, v0 + pl.part_vecs);
  St s = St::init(c);
  fold(s, x + row * pl.r, v0 + t, v1, kReduceThreads, t == 0 && part + 1 == pl.parts);
  for (int o = 1; o < 32; o <<= 1) {
    const St o_s = shfl_state(s, o, 32);
    if ((lane & o) == 0) s.merge(o_s, c);
  }
  if (lane == 0) scratch[warp] = s;
  __syncthreads();
  if (t != 0) return;
  for (int w = 1; w < kWarps; ++w) s.merge(scratch[w], c);
  if (pl.parts == 1) store_state(out, od, row, s, c);
  else partials[row * pl.parts + part] = s;
}

}  // namespace kernels
}  // namespace cupipe
