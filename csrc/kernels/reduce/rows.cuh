// The rows reductions (inner == 1): RowsPlan, the geometry the launcher works out for them;
// reduce_rows_kernel (short rows packed several to a tile, or long rows split into parts that
// stream through the ring); reduce_wide_rows_kernel (a block per tile of wide rows, or per chunk
// of a long row, at one stage).
#pragma once

#include <cstdint>

#include "engine/engine.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/fast_div.cuh"
#include "kernels/reduce/combine.cuh"

namespace cupipe {
namespace kernels {

// The index arithmetic a block needs before its first copy, done on the host (launch_plan.cuh):
// a 64-bit division on the device is a ~70-instruction dependent chain, and every block paid
// several of them (tile counts, its row and part) before issuing its first copy.
struct RowsPlan {
  int64_t outer, r;
  int rows_per_tile;   // > 0: packed mode
  int group;           // lanes per row in packed mode (power of two; over 32 only when wide)
  int group_log2;
  bool vec_rows;       // packed rows all start 16-byte aligned: whole-vector loop, no head/tail
  int64_t parts;       // split mode: parts per row
  FastDiv parts_div;   //   blockIdx.x -> (row, part)
  int64_t part_len;    // elements per part (a multiple of the tile's elements)
  int64_t ntiles;      // packed: tiles in all; split: tiles per part but the last
  int64_t last_tiles;  // split: tiles of each row's last part
  TileShare share;     // packed, set at launch (set_rows_grid): block b's tiles b, b + grid, ...
  int tile_elems;      // elements per stage
  bool wide;           // reduce_wide_rows_kernel, one tile per block: packed rows over a warp's
                       // share (parts == 1), or chunks of part_len elements of long rows (parts > 1)
  int last_rows;       // wide, packed: rows of the last tile
  bool short_rows;     // packed rows under a vector from an aligned x: a thread per 16 / esz rows
                       // (r whole vectors; rows_per_tile a multiple of them)
};

template <engine::Mechanism M, int S, typename T>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_rows_kernel(const T* __restrict__ x, void* out, DType od, acc_t<T>* partials, RowsPlan pl,
                       ReduceOp op) {
  if constexpr (!engine::mechanism_in_this_pass(M)) { __trap(); return; }  // tma below sm_90 (mechanism.h)
  using A = acc_t<T>;
  using Ring = engine::Ring<M, S, 16>;
  constexpr int esz = sizeof(T);
  extern __shared__ __align__(engine::kStageAlign) char smem[];
  __shared__ engine::RawShared<typename Ring::SharedState> ss;
  __shared__ A scratch[kReduceThreads / 32];
  const int stage_bytes = pl.tile_elems * esz + 32;
  Ring ring(ss.get(), smem, stage_bytes);
  const Combine<A> comb{op};
  auto shift_of = [](const T* p) { return static_cast<int>(reinterpret_cast<uintptr_t>(p) & 15u); };
  allow_dependent_launch();  // the partials pass, when there is one, may start waiting

  if (pl.rows_per_tile > 0) {
    // Packed: block-strided tiles of rows_per_tile whole rows; a group of G lanes per row.
    const int64_t mine = pl.share.of(blockIdx.x);
    auto rows_of = [&](int64_t k, int64_t& row0) {
      row0 = (blockIdx.x + k * gridDim.x) * pl.rows_per_tile;
      return static_cast<int>(min(static_cast<int64_t>(pl.rows_per_tile), pl.outer - row0));
    };
    auto load = [&](const auto& w, int64_t k) {
      int64_t row0;
      const int nrows = rows_of(k, row0);
      const T* src = x + row0 * pl.r;
      w.copy(shift_of(src), src, static_cast<int64_t>(nrows) * pl.r * esz, engine::TailMode::MayOverwrite);
    };
    auto consume = [&](const char* stage, int64_t k, engine::Team team) {
      int64_t row0;
      const int nrows = rows_of(k, row0);
      const T* tile = reinterpret_cast<const T*>(stage + shift_of(x + row0 * pl.r));
      const int G = pl.group, ngroups = team.size >> pl.group_log2, gi = team.rank >> pl.group_log2,
                lane = team.rank & (G - 1);
      const int r = static_cast<int>(pl.r);
      if (pl.short_rows) {
        // A thread per 16 / esz rows, r whole vectors: each element combined once at a
        // compile-time place, the rows' results stored as whole vectors.
        constexpr int VE = 16 / esz;
        with_short_rows<T>(r, [&](auto rc) {
          constexpr int R = decltype(rc)::value;
          with_static_combine<A>(op, [&](auto sc) {
            for (int g0 = team.rank * VE; g0 < nrows; g0 += team.size * VE) {
              A acc[VE];
              fold_short_rows<T, R>(tile + static_cast<int64_t>(g0) * R, acc, sc);
#pragma unroll
              for (int k = 0; k < VE; ++k) acc[k] = finalize(op, acc[k], pl.r);
              store_outs<VE>(out, od, row0 + g0, min(VE, nrows - g0), acc);
            }
          });
        });
        return;
      }
      if (pl.vec_rows) {
        const int nvec = r / (16 / esz);
        with_static_combine<A>(op, [&](auto sc) {
          for (int rr = gi; rr - gi < nrows; rr += ngroups) {
            const bool live = rr < nrows && gi < ngroups;
            A acc = comb.init();
            if (live) {
              if (G == 1) fold_vectors_rotated<T>(tile + static_cast<int64_t>(rr) * r, nvec, rr, acc, sc);
              else fold_vectors<T>(tile + static_cast<int64_t>(rr) * r, nvec, lane, G, acc, sc);
            }
            for (int o = G / 2; o > 0; o >>= 1) acc = sc(acc, __shfl_xor_sync(0xffffffffu, acc, o, G));
            if (live && lane == 0) store_out(out, od, row0 + rr, finalize(op, acc, pl.r));
          }
        });
        return;
      }
      if (G == 1) {  // short rows at any alignment: a thread per row, no shuffles
        with_static_combine<A>(op, [&](auto sc) {
          for (int rr = team.rank; rr < nrows; rr += team.size) {
            A acc = comb.init();
            fold_span_rotated<T>(tile + static_cast<int64_t>(rr) * r, r, rr, acc, sc);
            store_out(out, od, row0 + rr, finalize(op, acc, pl.r));
          }
        });
        return;
      }
      // Every lane of a group runs the same trip count, so the shuffles below are uniform.
      for (int rr = gi; rr - gi < nrows; rr += ngroups) {
        const bool live = rr < nrows && gi < ngroups;
        A acc = comb.init();
        if (live) fold_span(tile + static_cast<int64_t>(rr) * r, r, lane, G, acc, comb);
        for (int o = G / 2; o > 0; o >>= 1) acc = comb(acc, __shfl_xor_sync(0xffffffffu, acc, o, G));
        if (live && lane == 0) store_out(out, od, row0 + rr, finalize(op, acc, pl.r));
      }
    };
    engine::run_ring(ring, mine, load, consume);
    return;
  }

  // Split: block = one (row, part); its tiles stream through the ring. A part is a run of
  // part_len elements. (Parts of every parts-th tile, so that the grid reads neighbouring tiles
  // at any moment as a copy does, measured no faster: docs/design.md.)
  uint32_t row_u, part_u;
  pl.parts_div.divmod(blockIdx.x, row_u, part_u);
  const int64_t row = row_u, part = part_u;
  const int64_t begin = part * pl.part_len;
  const int64_t end = min(begin + pl.part_len, pl.r);
  const int64_t n = end > begin ? end - begin : 0;
  const int64_t ntiles = part + 1 == pl.parts ? pl.last_tiles : pl.ntiles;
  const T* base = x + row * pl.r + begin;
  A acc = comb.init();
  auto load = [&](const auto& w, int64_t k) {
    const T* src = base + k * pl.tile_elems;
    w.copy(shift_of(src), src, min(static_cast<int64_t>(pl.tile_elems), n - k * pl.tile_elems) * esz,
           engine::TailMode::MayOverwrite);
  };
  auto consume = [&](const char* stage, int64_t k, engine::Team team) {
    const T* src = base + k * pl.tile_elems;
    const T* tile = reinterpret_cast<const T*>(stage + shift_of(src));
    const int cnt = static_cast<int>(min(static_cast<int64_t>(pl.tile_elems), n - k * pl.tile_elems));
    fold_span(tile, cnt, team.rank, team.size, acc, comb);
  };
  engine::run_ring(ring, ntiles, load, consume);
  const engine::Team team{Ring::consumer_rank(), Ring::num_consumers()};
  if (!Ring::is_consumer()) return;
  const A total = team_combine(acc, comb, team, scratch);
  if (team.rank == 0) {
    if (pl.parts == 1) store_out(out, od, row, finalize(op, total, pl.r));
    else partials[row * pl.parts + part] = total;
  }
}

// ---------------------------------------------------------------------------------- wide rows
// A block per tile that exits after it: packed rows wider than a warp's share (parts == 1: a tile
// of rows_per_tile whole rows, about kWideRowsBlockBytes, each row's result to `out`), or one
// chunk of a long row (parts > 1, chunked_rows: block b is chunk b % parts of row b / parts, its
// partial to partials[b], the split plan's [row][part] layout). The overlap of copies and folds
// is between the blocks resident on an SM, not within a block, so the ring has one stage. A row's
// G / 32 warps fold its vectors (thread i of the group takes vectors i, i + G, ...), shuffle, and
// the row's warps combine in warp order through smem: one barrier per block. A chunk's last
// elements past a 16-byte multiple (a single row's end) are folded last by its thread 0. What the
// fold needs besides the data (its row, first vector and trip count, with shifts) is worked out
// in ready(), while the copy is in flight. kChunks (parts > 1) is a template parameter: run-time
// branches on parts slowed the packed rows' kernel. A block per tile beats the persistent grid of
// two-row tiles through reduce_rows_kernel; what it leaves to a bulk copy per row without the
// engine is the consume's run-time geometry, not the staging (docs/design.md).
// Eight resident blocks per SM (32 registers): a block's bytes in flight are its one tile.
template <engine::Mechanism M, typename T, bool kChunks>
__global__ void __launch_bounds__(kReduceThreads, kMaxBlocksPerSm)
    reduce_wide_rows_kernel(const T* __restrict__ x, void* out, DType od, acc_t<T>* partials, RowsPlan pl,
                            ReduceOp op) {
  if constexpr (!engine::mechanism_in_this_pass(M)) { __trap(); return; }
  using A = acc_t<T>;
  using Ring = engine::Ring<M, 1, 16>;
  constexpr int esz = sizeof(T), VE = 16 / esz;
  extern __shared__ __align__(engine::kStageAlign) char smem[];
  __shared__ engine::RawShared<typename Ring::SharedState> ss;
  __shared__ A scratch[kReduceThreads / 32];
  Ring ring(ss.get(), smem, pl.tile_elems * esz + 32);
  if constexpr (kChunks) allow_dependent_launch();  // the partials pass may start waiting
  const unsigned b = blockIdx.x;
  // The tile: nrows rows of nvec 16-byte vectors each from src, then `tail` elements (chunks only).
  const T* src;
  int nrows, nvec, tail;
  if constexpr (!kChunks) {
    src = x + static_cast<int64_t>(b) * pl.tile_elems;
    nrows = b + 1 == gridDim.x ? pl.last_rows : pl.rows_per_tile;
    nvec = static_cast<int>(pl.r) / VE;  // (a row fits a stage)
    tail = 0;
  } else {
    uint32_t row, part;
    pl.parts_div.divmod(b, row, part);
    const int64_t begin = static_cast<int64_t>(part) * pl.part_len;
    const int n = static_cast<int>(min(pl.part_len, pl.r - begin));
    src = x + row * pl.r + begin;
    nrows = 1;
    nvec = n / VE;
    tail = n - nvec * VE;
  }
  auto load = [&](const auto& w, int64_t) {
    // x and every row or chunk start 16-byte aligned, so the tile lands at the stage's start.
    if (!kChunks || tail == 0) w.copy_aligned(0, src, nrows * nvec * 16);
    else w.copy(0, src, (nvec * VE + tail) * esz, engine::TailMode::MayOverwrite);
  };
  int row = 0, first = 0, count = 0;  // this thread's row and vectors first, first + G, ... (count)
  auto ready = [&] {
    const int rank = Ring::consumer_rank();
    row = rank >> pl.group_log2;
    first = rank & (pl.group - 1);
    count = row < nrows && first < nvec ? ((nvec - 1 - first) >> pl.group_log2) + 1 : 0;
  };
  auto consume = [&](const char* stage, int64_t, engine::Team team) {
    const Combine<A> comb{op};
    const uint4* u = reinterpret_cast<const uint4*>(stage) + row * nvec + first;
    A acc = comb.init();
    with_static_combine<A>(op, [&](auto sc) {
#pragma unroll 4
      for (int k = 0; k < count; ++k) {
        A e[VE];
        unpack16<T>(u[k << pl.group_log2], e);
#pragma unroll
        for (int j = 0; j < VE; ++j) acc = sc(acc, e[j]);
      }
      if (kChunks && tail > 0 && team.rank == 0) {
        const T* t = reinterpret_cast<const T*>(stage) + nvec * VE;
        for (int j = 0; j < tail; ++j) acc = sc(acc, to_acc<A>(t[j]));
      }
      for (int o = 16; o > 0; o >>= 1) acc = sc(acc, __shfl_xor_sync(0xffffffffu, acc, o));
    });
    if ((team.rank & 31) == 0) scratch[team.rank >> 5] = acc;
    engine::team_sync(team);
    if (team.rank < nrows) {
      const int wpr = pl.group >> 5;
      A total = scratch[team.rank * wpr];
      for (int w = 1; w < wpr; ++w) total = comb(total, scratch[team.rank * wpr + w]);
      if constexpr (kChunks)
        partials[b] = total;
      else
        store_out(out, od, static_cast<int64_t>(b) * pl.rows_per_tile + team.rank, finalize(op, total, pl.r));
    }
  };
  engine::run_ring(ring, 1, load, consume, ready);
}

}  // namespace kernels
}  // namespace cupipe
