// The column reductions (inner > 1): ColsPlan, the geometry the launcher works out for them, and
// reduce_cols_kernel, persistent blocks over chunks of contiguous columns (or parts of r), their
// tiles moved as contiguous copies (rows that fit the block) or 2-D boxes.
#pragma once

#include <cstdint>

#include "engine/engine.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/fast_div.cuh"
#include "kernels/reduce/combine.cuh"

namespace cupipe {
namespace kernels {

// A work item is one chunk of contiguous columns of one `outer` slice; a tile is tile_rows rows of
// it. With r in one part (parts == 1) the grid is persistent: block b takes items b, b + grid, ...
// and streams all their tiles through one ring, storing an item's outputs after its last tile, so
// short items (r of a few tiles, narrow rows) keep the ring full across items. With r split into
// parts, a block takes one (item, part) and writes partials.
//
// Two tile layouts:
// - dense: the chunk is the whole row (rows of at most one unit per consumer thread: a unit is
//   the widest power of two, from the element to 16 bytes, that x's address and the row's bytes are
//   multiples of), so a tile's rows lie back to back in memory and move as one contiguous copy,
//   placed at its source's offset modulo 128. Consumer thread t owns column unit t % row_threads
//   of the rows t / row_threads, + groups, ...: narrow rows (3 to a few hundred elements) read at
//   full rate.
// - boxed: a chunk is row_threads x vecs 16-byte column vectors (row_threads 32 to 256, a power of
//   two; up to col_max_vecs vectors per thread for rows wider than the block: vector u of thread t
//   is the chunk's vector t + u * row_threads, so a warp's reads stay consecutive), moved as one
//   copy_rows box. Wide chunks keep each row's run contiguous in DRAM: up to 16 KiB, where 32-lane
//   chunks read 512 bytes per row, too short a run to read at full rate (docs/design.md).
// Several row groups' sums (vecs == 1) combine in a fixed order at the item's end (see flush).
// Vectors per thread and row at most: 16 accumulators (fp32: 4 vectors of 4; 2-byte types: 2 of 8).
constexpr int col_max_vecs(int esz) { return esz == 2 ? 2 : 4; }

struct ColsPlan {
  int64_t outer, r, inner;
  int64_t col_chunks;  // ceil(inner / chunk_cols)
  int chunk_cols;      // columns per chunk: dense, inner; boxed, row_threads * vecs * 16 / esz
  int row_threads;     // consumer threads across a tile row (dense: any count up to the consumers)
  int vecs;            // 16-byte vectors per thread and row, 1..col_max_vecs(esz)
  int groups;          // consumer threads / row_threads: row groups (threads past them idle)
  int64_t parts;       // parts of r
  int64_t part_rows;   // rows per part (a multiple of tile_rows)
  int64_t part_tiles;  // tiles per part but the last, at least 1 (host-side divisions: see RowsPlan)
  int64_t last_tiles;  // tiles of the last part, at least 1
  FastDiv parts_div, chunks_div;  // parts > 1: blockIdx.x -> (item, part); item -> (outer, chunk)
  TileShare items;     // parts == 1: items per block (block b's items b, b + grid, ...)
  int64_t grid;        // blocks of the launch
  int tile_rows;       // rows per tile
  int pitch;           // smem bytes per tile row (dense: the row's bytes)
  int base;            // boxed: smem offset of a tile's first row (congruent layout: x's offset modulo 128)
  int stage_bytes;     // tile bytes with slack, a multiple of 128
  int unit_bytes;      // the widest power of two (esz..16) dividing x's address and inner * esz
  bool aligned;        // unit_bytes == 16: rows 16-byte aligned, vector reads
  bool dense;          // tiles are contiguous copies (see above)
};

// One stage of 64 KiB fits three blocks per SM, and the register budget is sized for them; deeper
// rings take the registers the item's bookkeeping needs (at the three-block budget ptxas spilled a
// few words of it): ~90-96, so their 32 KiB stages fit two blocks at 2-3 stages.
template <engine::Mechanism M, int S, typename T>
__global__ void __launch_bounds__(kReduceThreads, S == 1 ? 3 : 1)
    reduce_cols_kernel(const T* __restrict__ x, void* out, DType od, acc_t<T>* partials, ColsPlan pl,
                       ReduceOp op) {
  if constexpr (!engine::mechanism_in_this_pass(M)) { __trap(); return; }
  using A = acc_t<T>;
  using Ring = engine::Ring<M, S, 16>;
  constexpr int esz = sizeof(T);
  constexpr int VE = 16 / esz, kColMaxVecs = col_max_vecs(esz);
  extern __shared__ __align__(engine::kStageAlign) char smem[];
  __shared__ engine::RawShared<typename Ring::SharedState> ss;
  __shared__ A scratch[kReduceThreads * VE];  // [group][chunk column], vecs == 1
  Ring ring(ss.get(), smem, pl.stage_bytes);
  const Combine<A> comb{op};
  allow_dependent_launch();  // the partials pass, when there is one, may start waiting

  // The block's items and part.
  int64_t first_item, item_step, part, my_items, item_tiles;
  if (pl.parts > 1) {
    uint32_t item_u, part_u;
    pl.parts_div.divmod(blockIdx.x, item_u, part_u);
    first_item = item_u, item_step = 1, part = part_u, my_items = 1;
    item_tiles = part + 1 == pl.parts ? pl.last_tiles : pl.part_tiles;
  } else {
    first_item = blockIdx.x, item_step = gridDim.x, part = 0, my_items = pl.items.of(blockIdx.x);
    item_tiles = pl.part_tiles;
  }
  const int64_t r_begin = part * pl.part_rows;
  const int64_t nrows = max(int64_t(0), min(r_begin + pl.part_rows, pl.r) - r_begin);
  const int64_t src_pitch = pl.inner * esz;
  // The block's tiles in order, as a cursor: load and consume each walk k = 0, 1, ... with their
  // own (the producer runs ahead), stepping to the next item after its last tile, so a tile costs a
  // compare and two multiply-adds: tiles of a few wide rows (the (32768, 8192) sum's four) have
  // little work to hide index arithmetic behind.
  struct TileAt {
    int64_t o = 0, c0 = 0, kt = -1, it = -1;
    int ncols = 0, rows = 0;
    const T* item_src = nullptr;  // the item's first row in this part
    const T* src = nullptr;       // the tile's first row
  };
  auto next_tile = [&](TileAt& t) {
    if (++t.kt == item_tiles || t.it < 0) {
      t.kt = 0;
      ++t.it;
      uint32_t o_u, chunk_u;
      pl.chunks_div.divmod(static_cast<uint32_t>(first_item + t.it * item_step), o_u, chunk_u);
      t.o = o_u, t.c0 = static_cast<int64_t>(chunk_u) * pl.chunk_cols;
      t.ncols = static_cast<int>(min(static_cast<int64_t>(pl.chunk_cols), pl.inner - t.c0));
      t.item_src = x + (t.o * pl.r + r_begin) * pl.inner + t.c0;
    }
    t.rows = static_cast<int>(max(int64_t(0), min(static_cast<int64_t>(pl.tile_rows), nrows - t.kt * pl.tile_rows)));
    t.src = t.item_src + t.kt * pl.tile_rows * pl.inner;
  };
  TileAt load_at, use_at;
  auto shift_of = [](const T* p) { return static_cast<int>(reinterpret_cast<uintptr_t>(p) & 15u); };
  // Dense tiles sit at their source's offset modulo 128 (the stage has 128 bytes of slack).
  auto dense_base = [](const T* p) { return static_cast<int>(reinterpret_cast<uintptr_t>(p) & 127u); };

  const engine::Team team0{Ring::consumer_rank(), Ring::num_consumers()};
  const int vec = team0.rank % pl.row_threads, grp = team0.rank / pl.row_threads;
  // First column of the thread's unit u: dense rows have units of unit_bytes (a vector if aligned).
  const int unit = pl.dense ? pl.unit_bytes / esz : VE;
  auto col_of = [&](int u) { return (vec + u * pl.row_threads) * unit; };
  A acc[kColMaxVecs][VE];
  auto reset = [&]() {
#pragma unroll
    for (int u = 0; u < kColMaxVecs; ++u)
#pragma unroll
      for (int j = 0; j < VE; ++j) acc[u][j] = comb.init();
  };
  reset();

  auto load = [&](const auto& w, int64_t) {
    next_tile(load_at);
    const TileAt& t = load_at;
    if (t.rows == 0) return;
    if (pl.dense) {
      w.copy(dense_base(t.src), t.src, static_cast<int64_t>(t.rows) * src_pitch, engine::TailMode::MayOverwrite);
    } else if (pl.aligned) {
      w.copy_rows(pl.base, pl.pitch, t.src, src_pitch, static_cast<int64_t>(t.ncols) * esz, t.rows,
                  engine::TailMode::MayOverwrite);
    } else {  // rows disagree modulo 16: each row lands at its own shift
      w.copy_each_row(t.rows, static_cast<int64_t>(t.ncols) * esz, [&](int i) {
        const T* s = t.src + i * pl.inner;
        return engine::RowCopy{static_cast<int64_t>(i) * pl.pitch + shift_of(s), s};
      }, engine::TailMode::MayOverwrite);
    }
  };
  // The item's totals. Several row groups (vecs == 1) combine in a fixed order: when row_threads is
  // a power of two below a warp, a warp's lanes that own the same column unit first (shuffles),
  // then the groups' (or warps') totals as a tree in shared memory, log2 steps; the holders of
  // total 0 store it (or the part's partials), and every thread starts the next item afresh.
  // A serial walk over the groups by group 0 took longer than the item's tile for narrow rows.
  const bool warp_fold = pl.row_threads < 32 && (pl.row_threads & (pl.row_threads - 1)) == 0;
  auto flush = [&](const TileAt& t) {
    int g = grp, ng = pl.groups;  // the totals the tree combines: row groups, or warps
    if (pl.groups > 1 && warp_fold) {
#pragma unroll
      for (int j = 0; j < VE; ++j)
        for (int off = pl.row_threads; off < 32; off <<= 1)
          acc[0][j] = comb(acc[0][j], __shfl_xor_sync(0xffffffffu, acc[0][j], off));
      g = (team0.rank & 31) < pl.row_threads ? team0.rank >> 5 : ng;  // lanes past a unit: no total
      ng = team0.size >> 5;
    }
    const bool holder = g < ng && col_of(0) < t.ncols;
    if (pl.groups > 1) {
      A* mine = scratch + g * pl.chunk_cols + col_of(0);
      if (holder) {
#pragma unroll
        for (int j = 0; j < VE; ++j)
          if (j < unit) mine[j] = acc[0][j];
      }
      engine::team_sync(team0);
      int span = 1;
      while (span < ng) span <<= 1;
      for (int s = span >> 1; s > 0; s >>= 1) {
        if (holder && g < s && g + s < ng) {
#pragma unroll
          for (int j = 0; j < VE; ++j)
            if (j < unit) mine[j] = comb(mine[j], mine[s * pl.chunk_cols + j]);
        }
        engine::team_sync(team0);
      }
      if (holder && g == 0) {
#pragma unroll
        for (int j = 0; j < VE; ++j)
          if (j < unit) acc[0][j] = mine[j];
      }
      engine::team_sync(team0);  // scratch is free for the next item's totals
    }
    if (holder && g == 0) {
#pragma unroll
      for (int u = 0; u < kColMaxVecs; ++u) {
        if (u >= pl.vecs) break;
#pragma unroll
        for (int j = 0; j < VE; ++j) {
          if (j >= unit || col_of(u) + j >= t.ncols) continue;
          const int64_t oi = t.o * pl.inner + t.c0 + col_of(u) + j;
          if (pl.parts == 1) store_out(out, od, oi, finalize(op, acc[u][j], pl.r));
          else partials[part * pl.outer * pl.inner + oi] = acc[u][j];
        }
      }
    }
    reset();
  };
  auto consume = [&](const char* stage, int64_t, engine::Team) {
    next_tile(use_at);
    const TileAt& t = use_at;
    const bool active = grp < pl.groups && col_of(0) < t.ncols;
    if (active && pl.aligned) {
      // Whole vectors (aligned rows: inner and chunk_cols are multiples of VE, so each of the
      // thread's vectors lies inside the chunk's columns or wholly past them): its first nv, fewer
      // than vecs in a partial last chunk, which the element loop below read at half the rate.
      int nv = 1;
#pragma unroll
      for (int u = 1; u < kColMaxVecs; ++u) nv += u < pl.vecs && col_of(u) < t.ncols;
      const int b0 = pl.dense ? dense_base(t.src) : pl.base;
      with_static_combine<A>(op, [&](auto sc) {
        for (int i = grp; i < t.rows; i += pl.groups) {
          const char* row = stage + b0 + static_cast<int64_t>(i) * pl.pitch;
#pragma unroll
          for (int u = 0; u < kColMaxVecs; ++u) {
            if (u >= nv) break;
            A e[VE];
            unpack16<T>(*reinterpret_cast<const uint4*>(row + col_of(u) * esz), e);
#pragma unroll
            for (int j = 0; j < VE; ++j) acc[u][j] = sc(acc[u][j], e[j]);
          }
        }
      });
    } else if (active && pl.dense) {
      // Dense rows not of whole vectors: a unit (unit_bytes) per thread and row, a pointer walk.
      const char* first = stage + dense_base(t.src) + (static_cast<int64_t>(grp) * pl.inner + col_of(0)) * esz;
      const int64_t step = static_cast<int64_t>(pl.groups) * src_pitch;
      with_unit_bytes<esz>(pl.unit_bytes, [&](auto ub) {
        constexpr int UB = decltype(ub)::value;
        with_static_combine<A>(op, [&](auto sc) {
          const char* e = first;
#pragma unroll 4
          for (int i = grp; i < t.rows; i += pl.groups, e += step) {
            A v[VE];
            unpack16<T>(load_unit<UB>(e), v);
#pragma unroll
            for (int j = 0; j < UB / esz; ++j) acc[0][j] = sc(acc[0][j], v[j]);
          }
        });
      });
    } else if (active) {
      // Rows that disagree modulo 16, each at its own shift (a multiple of unit_bytes): the
      // thread's 16-byte spans read as units, a partial last span masked.
      with_unit_bytes<esz>(pl.unit_bytes, [&](auto ub) {
        constexpr int UB = decltype(ub)::value;
        with_static_combine<A>(op, [&](auto sc) {
          for (int i = grp; i < t.rows; i += pl.groups) {
            const char* srow = stage + static_cast<int64_t>(i) * pl.pitch + shift_of(t.src + i * pl.inner);
#pragma unroll
            for (int u = 0; u < kColMaxVecs; ++u) {
              if (u >= pl.vecs || col_of(u) >= t.ncols) break;
              A e[VE];
              unpack16<T>(load16_in_units<UB>(srow + col_of(u) * esz), e);
#pragma unroll
              for (int j = 0; j < VE; ++j)
                if (col_of(u) + j < t.ncols) acc[u][j] = sc(acc[u][j], e[j]);
            }
          }
        });
      });
    }
    if (t.kt + 1 == item_tiles) flush(t);
  };
  engine::run_ring(ring, my_items * item_tiles, load, consume);
}

}  // namespace kernels
}  // namespace cupipe
