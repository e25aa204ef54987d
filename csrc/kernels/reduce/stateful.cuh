// The state reductions (var, std, argmax, argmin, logsumexp, norm: reduce/states.h) of a contiguous
// (outer, r, inner) view over r, on the engine: StatePlan, the geometry the host works out, and
// reduce_state_kernel, one kernel per state kind for every layout, with three ways to read a tile:
//
//   packed rows (inner == 1, a row fits a stage): a tile is whole rows, one contiguous copy; a
//        group of G lanes per row (each at least 16 elements, enough lanes to fill the block when
//        a tile has few rows), merged by a fixed shuffle tree, then in warp order through smem.
//   split rows  (inner == 1, longer rows): a block per part of a row; its tiles stream through
//        the ring, thread t folding elements t, t + consumers, ...; the block's states merge in
//        warp order, to the output or to the workspace when the row has several parts.
//   columns     (inner > 1): a work item is a chunk of contiguous columns of one outer slice, up to
//        kStateColStates columns per consumer thread (col_threads threads across, columns
//        col + u * col_threads; or 4 col .. 4 col + 3, one vector a row, where every row is
//        aligned: col_quads), so that a tile's rows are runs of up to 4 KiB (fp32) in DRAM:
//        shorter runs read far below the copy rate. When the chunk is the whole row the tile is one
//        contiguous copy. A thread owns its columns' rows g, g + groups, ...; the groups merge as
//        a tree through shared memory at the item's end.
//
// Items (tiles of rows, rows, column chunks) are shared by persistent blocks when r is whole in
// one part, else each block takes one (item, part) and reduce_state_partials_kernel merges the
// parts in order. Every merge has a fixed order: the results are bit-identical on repeat.
// Each thread adds the elements it owns in ascending index order (what Arg's add assumes), a
// 16-byte vector or four rows of a column at a time where it can (the states' add_block: one
// division, rescale or index update per block instead of per element).
#pragma once

#include <cstdint>

#include "engine/engine.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/fast_div.cuh"
#include "kernels/numeric.cuh"
#include "kernels/reduce/combine.cuh"
#include "kernels/reduce/states.h"

namespace cupipe {
namespace kernels {

constexpr int kStateThreads = 256;
constexpr int kStateColStates = 4;  // columns (states) per thread at most

struct StatePlan {
  int64_t outer, r, inner;
  int mode;              // 0 packed rows, 1 split rows, 2 columns
  int tile_elems;        // packed rows and split rows: elements per tile
  int rows_per_tile;     // packed: whole rows per tile
  int group, group_log2; // packed: lanes per row
  bool vec_rows;         // rows: x and every row 16-byte aligned, read as 16-byte vectors
  int chunk_cols;        // columns: columns per item (col_threads * vecs, or inner)
  int col_threads;       // columns: consumer threads across a tile row
  int vecs;              // columns: columns per thread, 1..kStateColStates
  bool col_quads;        // columns: a thread's 4 columns adjacent (4 col .. 4 col + 3), read as one vector
  int tile_rows;         // columns: rows per tile
  int pitch;             // columns, boxed: smem bytes per tile row (a multiple of 16)
  int base;              // columns, boxed: every row at this offset in its pitch (one copy_rows box;
                         // congruent rows: x's offset modulo 128), or -1: each row at its own shift
  int stage_bytes;       // a tile with its slack (shift and zero-filled tail), a multiple of 128
  bool dense;            // columns: chunk_cols == inner, a tile is one contiguous copy
  int64_t col_chunks;    // columns: chunks per outer slice
  FastDiv chunks_div;    // item -> (outer, chunk)
  int64_t items;         // packed: tiles; split: rows; columns: outer * col_chunks
  int64_t parts;         // parts of r per item (packed: 1)
  int64_t part_len;      // split: elements per part; columns: rows per part (multiples of a tile)
  int64_t part_tiles;    // tiles per part but the last
  int64_t last_tiles;    // tiles of the last part
  FastDiv parts_div;     // parts > 1: blockIdx.x -> (item, part)
  TileShare share;       // parts == 1: items per block
  StateCtx ctx;
};

template <typename A>
__device__ __forceinline__ A shfl_xor_any(A v, int o, int width) { return __shfl_xor_sync(0xffffffffu, v, o, width); }

template <typename A, StateKind K>
__device__ __forceinline__ State<A, K> shfl_state(const State<A, K>& s, int o, int width) {
  State<A, K> t;
  if constexpr (K == StateKind::Moments) {
    t.mean = shfl_xor_any(s.mean, o, width);
    t.m2 = shfl_xor_any(s.m2, o, width);
    t.n = shfl_xor_any(s.n, o, width);
  } else if constexpr (K == StateKind::Arg) {
    t.v = shfl_xor_any(s.v, o, width);
    t.i = shfl_xor_any(s.i, o, width);
  } else if constexpr (K == StateKind::Lse) {
    t.m = shfl_xor_any(s.m, o, width);
    t.s = shfl_xor_any(s.s, o, width);
  } else {
    t.v = shfl_xor_any(s.v, o, width);
  }
  return t;
}

// The final result of output i: an index (argmax, argmin) or a value in out's dtype.
template <typename A, StateKind K>
__device__ __forceinline__ void store_state(void* out, DType od, int64_t i, const State<A, K>& s, const StateCtx& c) {
  if constexpr (K == StateKind::Arg) static_cast<int64_t*>(out)[i] = s.index();
  else store_out(out, od, i, s.value(c));
}

// Four blocks a SM at one 32 KiB stage (64 registers), three at more stages; fp64 states, two
// (its four column states spilled at 64 registers).
template <engine::Mechanism M, int S, typename T, StateKind K>
__global__ void __launch_bounds__(kStateThreads, sizeof(T) == 8 ? 2 : S == 1 ? 4 : 3)
    reduce_state_kernel(const T* __restrict__ x, void* out, DType od, State<acc_t<T>, K>* partials, StatePlan pl) {
  if constexpr (!engine::mechanism_in_this_pass(M)) { __trap(); return; }
  using A = acc_t<T>;
  using St = State<A, K>;
  using Ring = engine::Ring<M, S, 16>;
  constexpr int esz = sizeof(T);
  extern __shared__ __align__(engine::kStageAlign) char smem[];
  __shared__ engine::RawShared<typename Ring::SharedState> ss;
  __shared__ St scratch[kStateThreads];
  Ring ring(ss.get(), smem, pl.stage_bytes);
  const StateCtx& c = pl.ctx;
  allow_dependent_launch();  // the partials pass, when there is one, may start waiting
  auto shift_of = [](const T* p) { return static_cast<int>(reinterpret_cast<uintptr_t>(p) & 15u); };
  const engine::Team team0{Ring::consumer_rank(), Ring::num_consumers()};
  // Moments add x - K, K the output's first element (states.h); the other kinds add x.
  auto shift_at = [](const T* first) {
    if constexpr (K == StateKind::Moments) return to_acc<A>(*first);
    else return A(0);
  };
  auto val = [](T v, A k) {
    if constexpr (K == StateKind::Moments) return to_acc<A>(v) - k;
    else return to_acc<A>(v);
  };
  auto val_acc = [](A v, A k) {
    if constexpr (K == StateKind::Moments) return v - k;
    else return v;
  };
  constexpr int VE = 16 / esz;

  // The block's items: b, b + grid, ... (one part), or the one (item, part) of blockIdx.x.
  int64_t first_item, item_step, my_items, part;
  if (pl.parts > 1) {
    uint32_t item_u, part_u;
    pl.parts_div.divmod(blockIdx.x, item_u, part_u);
    first_item = item_u, item_step = 1, my_items = 1, part = part_u;
  } else {
    first_item = blockIdx.x, item_step = gridDim.x, my_items = pl.share.of(blockIdx.x), part = 0;
  }
  const int64_t item_tiles = part + 1 == pl.parts ? pl.last_tiles : pl.part_tiles;
  const int64_t begin = part * pl.part_len;  // split: first element; columns: first row

  // Stores a finished item's state (output index oi) or its part's partial.
  auto finish = [&](int64_t oi, const St& s) {
    if (pl.parts == 1) store_state(out, od, oi, s, c);
    else if (pl.mode == 1) partials[oi * pl.parts + part] = s;                  // [out][part]
    else partials[part * pl.outer * pl.inner + oi] = s;                         // [part][out]
  };

  if (pl.mode == 0) {
    // Packed rows: item = tile of rows_per_tile rows.
    const int r = static_cast<int>(pl.r);
    auto load = [&](const auto& w, int64_t k) {
      const int64_t row0 = (first_item + k * item_step) * pl.rows_per_tile;
      const int nrows = static_cast<int>(min(static_cast<int64_t>(pl.rows_per_tile), pl.outer - row0));
      const T* src = x + row0 * pl.r;
      w.copy(shift_of(src), src, static_cast<int64_t>(nrows) * r * esz, engine::TailMode::MayOverwrite);
    };
    auto consume = [&](const char* stage, int64_t k, engine::Team team) {
      const int64_t row0 = (first_item + k * item_step) * pl.rows_per_tile;
      const int nrows = static_cast<int>(min(static_cast<int64_t>(pl.rows_per_tile), pl.outer - row0));
      const T* tile = reinterpret_cast<const T*>(stage + shift_of(x + row0 * pl.r));
      const int G = pl.group, ngroups = team.size >> pl.group_log2, gi = team.rank >> pl.group_log2,
                lane = team.rank & (G - 1);
      // Every lane of a group runs the same trip count, so the shuffles are uniform.
      for (int rr = gi; rr - gi < nrows; rr += ngroups) {
        const bool live = rr < nrows && gi < ngroups;
        St s = St::init(c);
        if (live) {
          const T* row = tile + static_cast<int64_t>(rr) * r;
          const A k0 = shift_at(row);
          if (pl.vec_rows) {  // lane takes vectors lane, lane + G, ...: ascending indices
            const uint4* u = reinterpret_cast<const uint4*>(row);
            for (int v = lane; v < r / VE; v += G) {
              A e[VE];
              unpack16<T>(u[v], e);
#pragma unroll
              for (int j = 0; j < VE; ++j) e[j] = val_acc(e[j], k0);
              s.add_block(e, v * VE, 1, c);
            }
          } else {
            for (int e = lane; e < r; e += G) s.add(val(row[e], k0), e, c);
          }
        }
        for (int o = 1; o < min(G, 32); o <<= 1) {  // a fixed tree; lane 0 ends with the row's state
          const St t = shfl_state(s, o, min(G, 32));
          if ((lane & o) == 0) s.merge(t, c);
        }
        if (G > 32) {  // a row of several warps: their states merge in warp order through smem
          if ((team.rank & 31) == 0) scratch[team.rank >> 5] = s;
          engine::team_sync(team);
          if (live && lane == 0)
            for (int w = 1; w < (G >> 5); ++w) s.merge(scratch[(team.rank >> 5) + w], c);
          engine::team_sync(team);  // scratch is free for the next rows
        }
        if (live && lane == 0) store_state(out, od, row0 + rr, s, c);
      }
    };
    engine::run_ring(ring, my_items, load, consume);
    return;
  }

  if (pl.mode == 1) {
    // Split rows: item = row; its part's tiles stream through the ring.
    const int64_t end = min(begin + pl.part_len, pl.r);
    St acc = St::init(c);
    auto tile_src = [&](int64_t k, int64_t& row, int64_t& e0) {
      const int64_t it = k / item_tiles, kt = k - it * item_tiles;
      row = first_item + it * item_step;
      e0 = begin + kt * pl.tile_elems;
      return x + row * pl.r + e0;
    };
    auto load = [&](const auto& w, int64_t k) {
      int64_t row, e0;
      const T* src = tile_src(k, row, e0);
      w.copy(shift_of(src), src, min(static_cast<int64_t>(pl.tile_elems), end - e0) * esz,
             engine::TailMode::MayOverwrite);
    };
    auto consume = [&](const char* stage, int64_t k, engine::Team team) {
      int64_t row, e0;
      const T* src = tile_src(k, row, e0);
      const T* tile = reinterpret_cast<const T*>(stage + shift_of(src));
      const int cnt = static_cast<int>(min(static_cast<int64_t>(pl.tile_elems), end - e0));
      const A k0 = shift_at(x + row * pl.r);
      int e = team.rank;
      if (pl.vec_rows) {  // vectors rank, rank + size, ..., then the tail's elements: ascending
        const uint4* u = reinterpret_cast<const uint4*>(tile);
        const int nvec = cnt / VE;
        for (int v = team.rank; v < nvec; v += team.size) {
          A a[VE];
          unpack16<T>(u[v], a);
#pragma unroll
          for (int j = 0; j < VE; ++j) a[j] = val_acc(a[j], k0);
          acc.add_block(a, e0 + v * VE, 1, c);
        }
        e = nvec * VE + team.rank;
      }
      for (; e < cnt; e += team.size) acc.add(val(tile[e], k0), e0 + e, c);
      if (k % item_tiles + 1 < item_tiles) return;
      // The row's last tile: the team's states merge in a fixed order (in warps, then warp 0).
      for (int o = 1; o < 32; o <<= 1) {
        const St t = shfl_state(acc, o, 32);
        if ((team.rank & o) == 0) acc.merge(t, c);
      }
      if ((team.rank & 31) == 0) scratch[team.rank >> 5] = acc;
      engine::team_sync(team);
      if (team.rank == 0) {
        for (int w = 1; w < team.size / 32; ++w) acc.merge(scratch[w], c);
        finish(row, acc);
      }
      engine::team_sync(team);  // scratch is free for the next row
      acc = St::init(c);
    };
    engine::run_ring(ring, my_items * item_tiles, load, consume);
    return;
  }

  // Columns: item = (outer slice, chunk of columns); thread (col, grp) of the consumers owns the
  // chunk's columns col + u * cw (u < vecs).
  const int cw = pl.col_threads, groups = team0.size / cw, nv = pl.vecs;
  const int col = team0.rank % cw, grp = team0.rank / cw;
  const int64_t nrows = max(int64_t(0), min(begin + pl.part_len, pl.r) - begin);
  auto item_at = [&](int64_t k, int64_t& o, int64_t& c0, int& ncols, int64_t& kt) {
    const int64_t it = k / item_tiles;
    kt = k - it * item_tiles;
    uint32_t o_u, ch_u;
    pl.chunks_div.divmod(static_cast<uint32_t>(first_item + it * item_step), o_u, ch_u);
    o = o_u, c0 = static_cast<int64_t>(ch_u) * pl.chunk_cols;
    ncols = static_cast<int>(min(static_cast<int64_t>(pl.chunk_cols), pl.inner - c0));
    return static_cast<int>(max(int64_t(0), min(static_cast<int64_t>(pl.tile_rows), nrows - kt * pl.tile_rows)));
  };
  St acc[kStateColStates];
#pragma unroll
  for (int u = 0; u < kStateColStates; ++u) acc[u] = St::init(c);
  auto load = [&](const auto& w, int64_t k) {
    int64_t o, c0, kt;
    int ncols;
    const int rows = item_at(k, o, c0, ncols, kt);
    if (rows == 0) return;
    const T* src = x + (o * pl.r + begin + kt * pl.tile_rows) * pl.inner + c0;
    if (pl.dense) {
      w.copy(shift_of(src), src, static_cast<int64_t>(rows) * pl.inner * esz, engine::TailMode::MayOverwrite);
    } else if (pl.base >= 0) {
      w.copy_rows(pl.base, pl.pitch, src, pl.inner * esz, static_cast<int64_t>(ncols) * esz, rows,
                  engine::TailMode::MayOverwrite);
    } else {  // rows disagree modulo 16: each row lands at its own shift
      w.copy_each_row(rows, static_cast<int64_t>(ncols) * esz, [&](int i) {
        const T* s = src + i * pl.inner;
        return engine::RowCopy{static_cast<int64_t>(i) * pl.pitch + shift_of(s), s};
      }, engine::TailMode::MayOverwrite);
    }
  };
  auto consume = [&](const char* stage, int64_t k, engine::Team team) {
    int64_t o, c0, kt;
    int ncols;
    const int rows = item_at(k, o, c0, ncols, kt);
    const int64_t row0 = begin + kt * pl.tile_rows;  // index along r of the tile's first row
    const T* src = x + (o * pl.r + row0) * pl.inner + c0;
    if (grp < groups) {
      // Row i of the tile: dense tiles are one copy at the first row's shift; boxed rows pitch
      // bytes apart, at base or each at its own shift.
      const int64_t step = pl.dense ? pl.inner * esz : pl.pitch;
      const char* first = stage + (pl.dense ? shift_of(src) : 0);
      auto row_at = [&](int i) {
        const int sh = pl.dense ? 0 : pl.base >= 0 ? pl.base : shift_of(src + i * pl.inner);
        return reinterpret_cast<const T*>(first + i * step + sh);
      };
      if (sizeof(T) <= 4 && pl.col_quads) {  // (never for fp64: state_launch.cuh)
        // Columns 4 col .. 4 col + 3 (all or none in the chunk), each row one aligned vector; four
        // rows at a time, one block add a column.
        struct alignas(4 * sizeof(T)) Quad { T v[4]; };
        static_assert(kStateColStates == 4, "a quad is a thread's states");
        const int c4 = 4 * col;
        if (c4 < ncols) {
          A k0[4];
#pragma unroll
          for (int u = 0; u < 4; ++u) k0[u] = shift_at(x + o * pl.r * pl.inner + c0 + c4 + u);
          int i = grp;
          for (; i + 3 * groups < rows; i += 4 * groups) {
            Quad q[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) q[j] = *reinterpret_cast<const Quad*>(row_at(i + j * groups) + c4);
#pragma unroll
            for (int u = 0; u < 4; ++u) {
              A e[4];
#pragma unroll
              for (int j = 0; j < 4; ++j) e[j] = val(q[j].v[u], k0[u]);
              acc[u].add_block(e, row0 + i, groups, c);
            }
          }
          for (; i < rows; i += groups) {
            const Quad q = *reinterpret_cast<const Quad*>(row_at(i) + c4);
#pragma unroll
            for (int u = 0; u < 4; ++u) acc[u].add(val(q.v[u], k0[u]), row0 + i, c);
          }
        }
      } else {
#pragma unroll
        for (int u = 0; u < kStateColStates; ++u) {
          const int cu = col + u * cw;
          if (u >= nv || cu >= ncols) break;
          const A k0 = shift_at(x + o * pl.r * pl.inner + c0 + cu);
          auto at = [&](int i) { return val(row_at(i)[cu], k0); };
          int i = grp;
          for (; i + 3 * groups < rows; i += 4 * groups) {  // rows i, i + groups, ...: one block add
            A e[4];
#pragma unroll
            for (int q = 0; q < 4; ++q) e[q] = at(i + q * groups);
            acc[u].add_block(e, row0 + i, groups, c);
          }
          for (; i < rows; i += groups) acc[u].add(at(i), row0 + i, c);
        }
      }
    }
    if (kt + 1 < item_tiles) return;
    // The item's last tile: the groups' states of a column merge as a tree (group 0 holds it).
#pragma unroll
    for (int u = 0; u < kStateColStates; ++u) {
      if (u >= nv) break;
      if (groups > 1) {
        scratch[team.rank] = acc[u];
        engine::team_sync(team);
        int span = 1;
        while (span < groups) span <<= 1;
        for (int s = span >> 1; s > 0; s >>= 1) {
          if (grp < s && grp + s < groups) scratch[team.rank].merge(scratch[team.rank + s * cw], c);
          engine::team_sync(team);
        }
        acc[u] = scratch[team.rank];
        engine::team_sync(team);  // scratch is free for the next column or item
      }
      const int cu = pl.col_quads ? 4 * col + u : col + u * cw;
      if (grp == 0 && cu < ncols) finish(o * pl.inner + c0 + cu, acc[u]);
      acc[u] = St::init(c);
    }
  };
  engine::run_ring(ring, my_items * item_tiles, load, consume);
}

// The parts of each output merged in order: a warp per output, lane l taking parts l, l + 32, ...,
// then a fixed shuffle tree. Partials laid out [out][part] (split rows) or [part][out] (columns).
template <typename A, StateKind K>
__global__ void __launch_bounds__(256)
    reduce_state_partials_kernel(const State<A, K>* __restrict__ partials, void* out, DType od, int64_t nout,
                                 int64_t parts, int64_t stride_out, int64_t stride_part, StateCtx c) {
  using St = State<A, K>;
  const int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  St s = St::init(c);
  wait_for_previous_grid();  // launched as a dependent of the pass that writes the partials
  if (i < nout)
    for (int64_t p = lane; p < parts; p += 32) s.merge(partials[i * stride_out + p * stride_part], c);
  for (int o = 1; o < 32; o <<= 1) {
    const St t = shfl_state(s, o, 32);
    if ((lane & o) == 0) s.merge(t, c);
  }
  if (i < nout && lane == 0) store_state(out, od, i, s, c);
}

}  // namespace kernels
}  // namespace cupipe
