// The column reductions (inner > 1): ColsPlan, the geometry the launcher works out for them, and
// reduce_cols_kernel, a block per chunk of contiguous columns of one outer slice and part of r,
// its tiles moved as 2-D boxes.
#pragma once

#include <cstdint>

#include "engine/engine.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/fast_div.cuh"
#include "kernels/reduce/combine.cuh"

namespace cupipe {
namespace kernels {

// A block owns one chunk of contiguous columns of one `outer` slice and a part of r; a tile is
// tile_rows rows of the chunk, moved as one copy_rows box. A chunk is row_threads x vecs 16-byte
// column vectors wide: row_threads (32 to 256, a power of two) as the row needs, and when a row
// is wider than the block, up to col_max_vecs vectors per thread (vector u of thread t is the
// chunk's vector t + u * row_threads: a warp's reads stay consecutive). Consumer thread t owns
// the vectors of t % row_threads in the rows t / row_threads, + groups, ... of each tile; the
// groups' sums combine in smem in group order (several groups only when vecs == 1). Wide chunks
// keep each row's run contiguous in DRAM: up to 16 KiB, where 32-lane chunks read 512 bytes per
// row, too short a run to read at full rate (docs/design.md).
// Vectors per thread and row at most: 16 accumulators (fp32: 4 vectors of 4; 2-byte types: 2 of 8).
constexpr int col_max_vecs(int esz) { return esz == 2 ? 2 : 4; }

struct ColsPlan {
  int64_t outer, r, inner;
  int64_t col_chunks;  // ceil(inner / chunk_cols)
  int chunk_cols;      // columns per chunk: row_threads * vecs * 16 / esz
  int row_threads;     // consumer threads across a tile row
  int vecs;            // 16-byte vectors per thread and row, 1..col_max_vecs(esz)
  int groups;          // consumer threads / row_threads: row groups (threads past them idle)
  int64_t parts;       // parts of r
  int64_t part_rows;   // rows per part (a multiple of tile_rows)
  int64_t part_tiles;  // tiles per part but the last (host-side divisions: see RowsPlan)
  int64_t last_tiles;  // tiles of the last part
  FastDiv parts_div, chunks_div;  // blockIdx.x -> (outer, chunk, part)
  int row_threads_log2;
  int tile_rows;       // rows per tile (tile bytes / chunk bytes)
  int pitch;           // smem bytes per tile row
  int base;            // smem offset of a tile's first row (congruent layout: x's offset modulo 128)
  int stage_bytes;     // tile_rows * pitch, + 128 when base is nonzero (stages stay 128-aligned)
  bool aligned;        // rows 16-byte aligned (x aligned and inner * esz % 16 == 0): vector reads
};

// At least 3 resident blocks per SM: lets ptxas keep the column accumulators in registers.
template <engine::Mechanism M, int S, typename T>
__global__ void __launch_bounds__(kReduceThreads, 3)
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

  uint32_t b, part_u, o_u, chunk_u;
  pl.parts_div.divmod(blockIdx.x, b, part_u);
  pl.chunks_div.divmod(b, o_u, chunk_u);
  const int64_t part = part_u, chunk = chunk_u, o = o_u;
  const int64_t c0 = chunk * pl.chunk_cols;
  const int ncols = static_cast<int>(min(static_cast<int64_t>(pl.chunk_cols), pl.inner - c0));
  const int64_t r_begin = part * pl.part_rows;
  const int64_t r_end = min(r_begin + pl.part_rows, pl.r);
  const int64_t nrows = r_end > r_begin ? r_end - r_begin : 0;
  const int64_t ntiles = part + 1 == pl.parts ? pl.last_tiles : pl.part_tiles;
  const T* base = x + (o * pl.r + r_begin) * pl.inner + c0;
  const int64_t src_pitch = pl.inner * esz;
  auto shift_of = [](const T* p) { return static_cast<int>(reinterpret_cast<uintptr_t>(p) & 15u); };
  auto rows_in = [&](int64_t k) {
    return static_cast<int>(min(static_cast<int64_t>(pl.tile_rows), nrows - k * pl.tile_rows));
  };

  const engine::Team team0{Ring::consumer_rank(), Ring::num_consumers()};
  const int vec = team0.rank & (pl.row_threads - 1), grp = team0.rank >> pl.row_threads_log2;
  auto col_of = [&](int u) { return (vec + u * pl.row_threads) * VE; };  // first column of vector u
  const bool active = grp < pl.groups && col_of(0) < ncols;
  A acc[kColMaxVecs][VE];
#pragma unroll
  for (int u = 0; u < kColMaxVecs; ++u)
#pragma unroll
    for (int j = 0; j < VE; ++j) acc[u][j] = comb.init();

  auto load = [&](const auto& w, int64_t k) {
    const int rows = rows_in(k);
    const T* src = base + k * pl.tile_rows * pl.inner;
    if (pl.aligned) {
      w.copy_rows(pl.base, pl.pitch, src, src_pitch, static_cast<int64_t>(ncols) * esz, rows,
                  engine::TailMode::MayOverwrite);
    } else {  // rows disagree modulo 16: each row lands at its own shift
      for (int i = 0; i < rows; ++i) {
        const T* s = src + i * pl.inner;
        w.copy(static_cast<int64_t>(i) * pl.pitch + shift_of(s), s, static_cast<int64_t>(ncols) * esz,
               engine::TailMode::MayOverwrite);
      }
    }
  };
  auto consume = [&](const char* stage, int64_t k, engine::Team) {
    if (!active) return;
    const int rows = rows_in(k);
    const T* src = base + k * pl.tile_rows * pl.inner;
    // Whole vectors: every vector of this thread lies inside the chunk's columns.
    if (pl.aligned && col_of(pl.vecs - 1) + VE <= ncols) {  // (aligned rows: no shifts, the tile at base)
      with_static_combine<A>(op, [&](auto sc) {
        for (int i = grp; i < rows; i += pl.groups) {
          const char* row = stage + pl.base + static_cast<int64_t>(i) * pl.pitch;
#pragma unroll
          for (int u = 0; u < kColMaxVecs; ++u) {
            if (u >= pl.vecs) break;
            A e[VE];
            unpack16<T>(*reinterpret_cast<const uint4*>(row + col_of(u) * esz), e);
#pragma unroll
            for (int j = 0; j < VE; ++j) acc[u][j] = sc(acc[u][j], e[j]);
          }
        }
      });
    } else {
      for (int i = grp; i < rows; i += pl.groups) {
        const int shift = pl.aligned ? pl.base : shift_of(src + i * pl.inner);
        const T* srow = reinterpret_cast<const T*>(stage + static_cast<int64_t>(i) * pl.pitch + shift);
#pragma unroll
        for (int u = 0; u < kColMaxVecs; ++u) {
          if (u >= pl.vecs) break;
#pragma unroll
          for (int j = 0; j < VE; ++j)
            if (col_of(u) + j < ncols) acc[u][j] = comb(acc[u][j], to_acc<A>(srow[col_of(u) + j]));
        }
      }
    }
  };
  engine::run_ring(ring, ntiles, load, consume);

  if (!Ring::is_consumer()) return;
  // One group: each thread holds its columns' totals. Several (vecs == 1): combine them in group
  // order.
  if (pl.groups > 1) {
    const int col = col_of(0);
    if (grp < pl.groups) {
#pragma unroll
      for (int j = 0; j < VE; ++j) scratch[grp * pl.chunk_cols + col + j] = acc[0][j];
    }
    engine::team_sync(team0);
    if (grp != 0) return;
    // j unrolled (acc stays in registers), the group loop rolled (cold code).
#pragma unroll
    for (int j = 0; j < VE; ++j) {
      A total = comb.init();
#pragma unroll 1
      for (int g = 0; g < pl.groups; ++g) total = comb(total, scratch[g * pl.chunk_cols + col + j]);
      acc[0][j] = total;
    }
  } else if (grp != 0) {
    return;
  }
#pragma unroll
  for (int u = 0; u < kColMaxVecs; ++u) {
    if (u >= pl.vecs) break;
#pragma unroll
    for (int j = 0; j < VE; ++j) {
      if (col_of(u) + j >= ncols) continue;
      const int64_t oi = o * pl.inner + c0 + col_of(u) + j;
      if (pl.parts == 1) store_out(out, od, oi, finalize(op, acc[u][j], pl.r));
      else partials[part * pl.outer * pl.inner + oi] = acc[u][j];
    }
  }
}

}  // namespace kernels
}  // namespace cupipe
