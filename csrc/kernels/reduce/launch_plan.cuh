// How a reduction is launched: the stage sizes, the rows and columns plans worked out on the host
// (packed, wide, chunked or split rows; column chunks and parts of r), the workspace's partial
// count, and launch_reduce_typed / launch_reduce_plan, which launch the main pass and, when r
// is split, the partials pass. (The state reductions': state_launch.cuh.)
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "engine/engine.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/fast_div.cuh"
#include "kernels/kernel_id.h"
#include "kernels/launch_utils.cuh"
#include "kernels/numeric.cuh"
#include "kernels/reduce/columns.cuh"
#include "kernels/reduce/columns_direct.cuh"
#include "kernels/reduce/combine.cuh"
#include "kernels/reduce/partials.cuh"
#include "kernels/reduce/rows.cuh"

namespace cupipe {
namespace kernels {

// Bytes per stage unless ReduceParams::tile_bytes says otherwise. The per-tile costs (the copy's
// split, the ring's wait and barrier, the consumer's set-up) are paid per stage, so wider stages
// amortise them over more elements per thread: rows take 32 KiB, columns 64 KiB at one stage
// (cols_tile_bytes), the fastest measured (docs/design.md). Both take the widest stage that fits
// the stage count into shared memory.
constexpr int kReduceRowsTileBytes = 32768;
constexpr int kReduceColsTileBytes = 65536;
// A short column reduction (under 8 tiles of rows) is split only past this many bytes an item.
constexpr int64_t kColsSplitMinBytes = 131072;
// Rows of more than 4 KiB (up to a stage) are reduced a block per ~16 KiB of rows, one tile per
// block (reduce_wide_rows_kernel).
constexpr int kWideRowsBlockBytes = 16384;

// Rows longer than a stage, fewer than the resident blocks (the whole tensor, a few long rows),
// at one stage, x and every row 16-byte aligned (a single row may end anywhere): a block per
// stage-sized chunk of a row (reduce_wide_rows_kernel), its partial to the workspace, then the
// partials pass. Blocks that exit after one chunk keep every SM's copies in flight to the end of
// the pass, where the split plan's resident blocks each stream a part and finish unevenly. 64 KiB
// chunks: 32 KiB leave twice the partials (a slower partials pass), 128 KiB fit one block per SM.
// At more stages the split plan streams each part through the ring (what the stage count buys).
// `sync` keeps the split plan: its copies wait on each load in registers, so a block of one chunk
// keeps little in flight (docs/design.md).
inline bool chunked_rows(const ReduceParams& p, int esz) {
  return p.stages == 1 && p.mechanism != engine::Mechanism::Sync && (reinterpret_cast<uintptr_t>(p.x) & 15u) == 0 &&
         (p.outer == 1 || (p.r * esz) % 16 == 0);
}

// The default stage size shrunk (halved) until the stage count fits shared memory.
inline int fitted_tile_bytes(const ReduceParams& p, const DeviceInfo& dev, int t, int slack) {
  while (t > 4096 && static_cast<int64_t>(p.stages) * (t + slack) + 1024 > dev.max_smem_optin) t /= 2;
  return t;
}
// Rows longer than 64 KiB (the whole tensor, a few long rows) at one stage under tma or
// chunked_rows take 64 KiB stages: one bulk copy per 64 KiB, three blocks per SM instead of seven.
// Shorter rows keep 32 KiB, which 64 KiB (and 16 KiB) slowed (docs/design.md).
inline int rows_tile_bytes(const ReduceParams& p, const DeviceInfo& dev) {
  if (p.tile_bytes > 0) return p.tile_bytes;
  const int esz = dtype_size(p.in_dtype);
  const bool split = p.r * static_cast<int64_t>(esz) > 2 * kReduceRowsTileBytes;
  const bool wide_stage = split && p.stages == 1 && (p.mechanism == engine::Mechanism::Tma || chunked_rows(p, esz));
  const int t = wide_stage ? 2 * kReduceRowsTileBytes : kReduceRowsTileBytes;
  return fitted_tile_bytes(p, dev, t, 32);
}
// Columns: a tile row is a chunk plus 32 bytes of pitch slack (chunks are 512 bytes or wider).
// One stage takes 64 KiB (three blocks an SM), deeper rings 32 KiB a stage (two blocks an SM at
// three stages): a block alone on its SM streamed the layout sweep's columns slower (docs/design.md).
inline int cols_tile_bytes(const ReduceParams& p, const DeviceInfo& dev) {
  const int t = p.stages == 1 ? kReduceColsTileBytes : kReduceColsTileBytes / 2;
  return p.tile_bytes > 0 ? p.tile_bytes : fitted_tile_bytes(p, dev, t, t / 16);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Plans take the number of blocks that fill the device (SMs x resident blocks per SM): split
// reductions cut their rows into just enough parts to give every resident block one, so the
// grid is one full wave. The workspace is sized with the largest possible target.
inline RowsPlan make_rows_plan(const ReduceParams& p, int esz, int tile_bytes, int64_t target_blocks) {
  RowsPlan pl{};
  pl.outer = p.outer;
  pl.r = p.r;
  pl.tile_elems = tile_bytes / esz;
  if (p.r <= pl.tile_elems) {
    pl.rows_per_tile = static_cast<int>(p.r > 0 ? pl.tile_elems / p.r : pl.tile_elems);
    const int64_t vecs = ceil_div(std::max<int64_t>(p.r, 1), 16 / esz);  // 16-byte vectors per row
    pl.vec_rows = (reinterpret_cast<uintptr_t>(p.x) & 15u) == 0 && (p.r * esz) % 16 == 0;
    // Rows under a vector from an aligned x: 16 / esz rows a thread (whole vectors, fold_short_rows),
    // tiles of whole such groups so that every tile starts aligned.
    pl.short_rows = (reinterpret_cast<uintptr_t>(p.x) & 15u) == 0 && p.r >= 1 && p.r * esz < 16;
    if (pl.short_rows) pl.rows_per_tile -= pl.rows_per_tile % (16 / esz);
    int g = 1;
    if (pl.vec_rows) {
      // About 4 vectors per lane (fewer shuffles per element), but enough lanes that the tile's
      // rows occupy the whole block. Rows that this asks more than a warp for (over 128 vectors,
      // too few per stage to fill the block) go to the wide-rows kernel below.
      const int consumers = engine::consumer_threads(p.mechanism, kReduceThreads);
      while (g < 32 && (g * 4 < vecs || g * pl.rows_per_tile < kReduceThreads)) g *= 2;
      while (g * 2 <= consumers && g * 4 < vecs && g * pl.rows_per_tile < consumers) g *= 2;
      // Rows of up to 32 vectors: one thread per row, its loads rotated (fold_vectors_rotated),
      // no shuffles, though threads past a tile's rows then idle (three quarters of them for
      // 512-byte rows, half for 256-byte rows). Faster than the groups above, which lose to
      // their shuffles (docs/design.md).
      if (vecs <= 32) g = 1;
      if (g > 32) {
        // Wide rows (over 4 KiB with the default stage): reduce_wide_rows_kernel, a block per
        // tile of about kWideRowsBlockBytes (whole rows, at least one), each row a power-of-two
        // number of the block's warps.
        const int warps = consumers / 32;
        pl.wide = true;
        pl.rows_per_tile = static_cast<int>(
            std::clamp<int64_t>(kWideRowsBlockBytes / (p.r * esz), 1, static_cast<int64_t>(warps)));
        int wpr = 1;
        while (wpr * 2 * pl.rows_per_tile <= warps) wpr *= 2;
        g = wpr * 32;
        pl.tile_elems = static_cast<int>(pl.rows_per_tile * p.r);
        pl.last_rows = static_cast<int>(p.outer - (ceil_div(p.outer, pl.rows_per_tile) - 1) * pl.rows_per_tile);
      }
    } else if (vecs > 32) {
      while (g < 32 && g < vecs) g *= 2;  // about one vector per lane
    }  // else rows of up to 32 vectors at any alignment: one thread per row (fold_span_rotated)
    pl.group = g;
    pl.group_log2 = 0;
    while ((1 << pl.group_log2) < g) ++pl.group_log2;
    pl.parts = 1;
    pl.ntiles = ceil_div(p.outer, pl.rows_per_tile);
  } else if (chunked_rows(p, esz) && p.outer < target_blocks) {
    // A block per chunk of a stage (reduce_wide_rows_kernel), each row's chunks laid out as the
    // split plan's parts; a chunk is folded by the largest power-of-two number of consumer warps.
    const int warps = engine::consumer_threads(p.mechanism, kReduceThreads) / 32;
    pl.wide = true;
    pl.rows_per_tile = 1;
    pl.last_rows = 1;
    int wpr = 1;
    while (wpr * 2 <= warps) wpr *= 2;
    pl.group = wpr * 32;
    pl.group_log2 = 5;
    while ((1 << pl.group_log2) < pl.group) ++pl.group_log2;
    pl.vec_rows = true;
    pl.part_len = pl.tile_elems;
    pl.parts = ceil_div(p.r, pl.part_len);
    pl.parts_div = FastDiv(static_cast<uint32_t>(std::min<int64_t>(pl.parts, 0x7fffffff)));  // (grids < 2^31)
    pl.ntiles = p.outer * pl.parts;
  } else {
    pl.rows_per_tile = 0;
    int64_t parts = target_blocks / p.outer;  // rounded down: no second, nearly empty wave
    parts = std::min(parts, std::max<int64_t>(1, ceil_div(p.r, 4 * static_cast<int64_t>(pl.tile_elems))));
    pl.parts = std::max<int64_t>(parts, 1);
    pl.part_len = ceil_div(ceil_div(p.r, pl.parts), pl.tile_elems) * pl.tile_elems;
    pl.parts = ceil_div(p.r, pl.part_len);
    pl.parts_div = FastDiv(static_cast<uint32_t>(std::min<int64_t>(pl.parts, 0x7fffffff)));  // (grids < 2^31)
    pl.ntiles = pl.part_len / pl.tile_elems;
    pl.last_tiles = ceil_div(p.r - (pl.parts - 1) * pl.part_len, pl.tile_elems);
  }
  return pl;
}

// The packed plan's share of tiles per block for a grid of `grid` blocks (grid <= ntiles, or 1).
inline void set_rows_grid(RowsPlan& pl, int64_t grid) {
  pl.share = TileShare(pl.ntiles, grid);
}

// max_vecs (0: col_max_vecs) caps the vectors per thread and row, so the chunk width (for
// experiments; the launcher leaves it 0).
inline ColsPlan make_cols_plan(const ReduceParams& p, const DeviceInfo& dev, int esz, int64_t target_blocks,
                               int max_vecs = 0) {
  ColsPlan pl{};
  pl.outer = p.outer;
  pl.r = p.r;
  pl.inner = p.inner;
  const int consumers = engine::consumer_threads(p.mechanism, kReduceThreads);
  const int64_t row_bytes = p.inner * esz;
  const int64_t row_vecs = ceil_div(p.inner, 16 / esz);
  // A split's parts stream four tiles each, so that their stages overlap, unless that leaves most
  // SMs idle (1000 rows of 4 KB: 16 blocks): a small reduction takes tiles of a few rows, two a
  // part, as many parts as fill the target. Short reductions (under 8 tiles) stay whole, as the
  // partials pass costs more than their parts save (pooling: 64 items of 49 rows), unless their
  // items leave nearly every SM idle and each holds at least kColsSplitMinBytes: (256, 256) over dim 0.
  int part_tiles = 4;
  auto fit_tile = [&](int64_t items, int64_t rows, int64_t item_row_bytes) {
    const bool stay_whole = items * 8 >= target_blocks || p.r * item_row_bytes < kColsSplitMinBytes;
    if ((p.r < 8 * rows && stay_whole) || items * ceil_div(p.r, 4 * rows) >= target_blocks)
      return static_cast<int>(rows);
    part_tiles = 2;
    return static_cast<int>(std::clamp<int64_t>(ceil_div(p.r * items, 2 * target_blocks), 1, rows));
  };
  // The widest unit (a power of two from the element to 16 bytes) that x's address and the row's
  // bytes are both multiples of: every row starts at one, so a thread reads a unit at a time.
  int unit_bytes = 16;
  while (unit_bytes > esz && ((reinterpret_cast<uintptr_t>(p.x) | static_cast<uintptr_t>(row_bytes)) &
                              static_cast<uintptr_t>(unit_bytes - 1)) != 0)
    unit_bytes /= 2;
  pl.unit_bytes = unit_bytes;
  pl.aligned = unit_bytes == 16;
  // Dense: a row is at most one unit per consumer thread, so the chunk is the row and a tile one
  // contiguous copy.
  const int64_t row_units = row_bytes / unit_bytes;
  pl.dense = row_units <= consumers;
  if (pl.dense) {
    pl.row_threads = static_cast<int>(row_units);
    pl.groups = consumers / pl.row_threads;
    pl.vecs = 1;
    pl.chunk_cols = static_cast<int>(p.inner);
    pl.col_chunks = 1;
    pl.pitch = static_cast<int>(row_bytes);
    pl.base = 0;
    // 128 bytes of slack for the tile's offset modulo 128, 16 for a zero-filled tail chunk.
    pl.tile_rows = fit_tile(p.outer, std::max<int64_t>(1, cols_tile_bytes(p, dev) / row_bytes), row_bytes);
    pl.stage_bytes = static_cast<int>(ceil_div(pl.tile_rows * row_bytes + 128 + 16, 128) * 128);
  } else {
    // The narrowest power-of-two chunk of at least 32 vectors that spans the row, up to as many
    // vectors as there are consumer threads, then up to col_max_vecs vectors per thread.
    int rt = 32;
    while (rt * 2 <= consumers && rt < row_vecs) rt *= 2;
    pl.row_threads = rt;
    pl.groups = consumers / rt;
    // Rows wider than the block's threads: several vectors per thread (one row group).
    const int vec_cap = max_vecs > 0 ? std::min(max_vecs, col_max_vecs(esz)) : col_max_vecs(esz);
    pl.vecs = pl.groups == 1 ? static_cast<int>(std::min<int64_t>(vec_cap, ceil_div(row_vecs, rt))) : 1;
    const int chunk_bytes = rt * pl.vecs * 16;
    pl.chunk_cols = chunk_bytes / esz;
    pl.col_chunks = ceil_div(p.inner, pl.chunk_cols);
    pl.tile_rows = fit_tile(p.outer * pl.col_chunks, std::max(1, cols_tile_bytes(p, dev) / chunk_bytes), chunk_bytes);
    if (pl.aligned && row_bytes % 128 == 0) {
      // Congruent layout: every row of a tile lands at its source's offset modulo 128 (rows a
      // multiple of 128 bytes apart in both, the tile at x's offset modulo 128: a chunk starts a
      // multiple of 512 bytes into its row). Rows with no tail need no slack. A pitch of chunk + 32
      // (rows 1-3 of a 4-row tile 32, 64 and 96 bytes off their sources' lines) made each async copy
      // of a misplaced row two L2 requests per line (docs/design.md).
      pl.pitch = chunk_bytes;
      pl.base = static_cast<int>(reinterpret_cast<uintptr_t>(p.x) & 127u);
    } else {
      // 32 bytes of slack: up to 15 for a row's shift, 16 for the zero-filled tail chunk.
      pl.pitch = chunk_bytes + 32;
      pl.base = 0;
    }
    pl.stage_bytes = pl.tile_rows * pl.pitch + (pl.base != 0 ? 128 : 0);
  }
  const int64_t items = p.outer * pl.col_chunks;
  // Rounded down: a part more than the resident blocks hold would start a second, nearly empty
  // wave (448 blocks for 396 resident in the (32768, 8192) sum).
  int64_t parts = target_blocks / std::max<int64_t>(items, 1);
  parts = std::min(parts, std::max<int64_t>(1, ceil_div(p.r, part_tiles * pl.tile_rows)));
  parts = std::max<int64_t>(parts, 1);
  pl.part_rows = std::max<int64_t>(1, ceil_div(ceil_div(p.r, parts), pl.tile_rows)) * pl.tile_rows;
  pl.parts = std::max<int64_t>(1, ceil_div(p.r, pl.part_rows));
  pl.part_tiles = pl.part_rows / pl.tile_rows;
  pl.last_tiles = std::max<int64_t>(1, ceil_div(std::max<int64_t>(0, p.r - (pl.parts - 1) * pl.part_rows), pl.tile_rows));
  if (pl.parts == 1) pl.part_tiles = pl.last_tiles;  // r of one part: every item's tiles
  pl.parts_div = FastDiv(static_cast<uint32_t>(std::min<int64_t>(pl.parts, 0x7fffffff)));  // (grids < 2^31)
  pl.chunks_div = FastDiv(static_cast<uint32_t>(std::clamp<int64_t>(pl.col_chunks, 1, 0x7fffffff)));
  // One part: persistent blocks, a wave of them at most, each streaming its items' tiles.
  pl.grid = pl.parts > 1 ? items * pl.parts : std::clamp<int64_t>(items, 1, std::max<int64_t>(target_blocks, 1));
  pl.items = TileShare(items, pl.grid);
  return pl;
}

// The sync mechanism on columns whose rows all start on a 16-byte boundary reads them straight
// into registers (reduce_cols_direct_kernel); its stage count sets the loads each thread keeps in
// flight: 4, 8, then 16 from three stages. Other columns under sync stream through the ring.
inline bool cols_direct(const ReduceParams& p, int esz) {
  return p.mechanism == engine::Mechanism::Sync && p.inner > 1 && (reinterpret_cast<uintptr_t>(p.x) & 15u) == 0 &&
         (p.inner * esz) % 16 == 0;
}
// A folded step (p.fold > 1) runs as one pass only there, with every slice's columns starting on a
// 16-byte boundary (the ops layer splits it in two otherwise: reduce_folds).
inline bool cols_direct_fold(const ReduceParams& p, int esz) {
  return cols_direct(p, esz) && p.fold > 1 && p.inner % p.fold == 0 && (p.fold * esz) % 16 == 0;
}
inline int cols_direct_loads(int stages) { return stages <= 1 ? 4 : stages == 2 ? 8 : 16; }
// Narrow columns that wrap into vectors (the sum kinds, reduce_cols_wrap_kernel): rows of inner elements
// under 16 bytes that divide 16, each outer slice's r rows whole vectors from an aligned x. The
// slice reads as r x inner x esz / 16 rows of one vector (wrapped_view), whose lanes j, j + inner,
// ... are one column. Returns inner there (ColsDirectPlan::wrap), else 1.
inline int cols_direct_wrap(const ReduceParams& p, int esz) {
  const int64_t row = p.inner * esz;
  const bool wraps = p.mechanism == engine::Mechanism::Sync && p.fold <= 1 && p.inner > 1 && row < 16 &&
                     16 % row == 0 && (p.r * row) % 16 == 0 && (reinterpret_cast<uintptr_t>(p.x) & 15u) == 0;
  return wraps ? static_cast<int>(p.inner) : 1;
}
// Narrow columns the wrap does not take (reduce_cols_narrow_kernel, reduce_state_cols_narrow_kernel): rows of 4 or 8 bytes,
// one vector of that many bytes each, from an x aligned to it (odd r, or x aligned to 8 or 4 only).
// Returns the row's bytes there, else 0. (Rows of 12 bytes keep the ring, which reads them at the
// roofline where the slices are long.)
inline int cols_direct_narrow(const ReduceParams& p, int esz) {
  const int64_t row = p.inner * esz;
  const bool narrow = p.mechanism == engine::Mechanism::Sync && p.fold <= 1 && p.inner > 1 && (row == 8 || row == 4) &&
                      reinterpret_cast<uintptr_t>(p.x) % row == 0 && cols_direct_wrap(p, esz) == 1;
  return narrow ? static_cast<int>(row) : 0;
}
inline ReduceParams wrapped_view(const ReduceParams& p, int esz) {
  ReduceParams q = p;
  q.r = p.r * p.inner * esz / 16;
  q.inner = 16 / esz;
  return q;
}

// Chunks of at most a block's threads in vectors (16 bytes, or vb of narrow columns), split in whole
// 128-byte lines. Rows of whole lines narrow their chunks (halving, down to a line) while the items
// leave resident blocks idle: more row groups a block cost no second pass, where chunks that split
// lines between blocks read slower than the parts below. Only then is r split into parts, no finer
// than a batch of loads a thread.
// `fill_shift`: the slices' blocks need fill only target >> fill_shift (below). Folded (p.fold > 1),
// a slice is an (outer, mid) pair of p's and its row the fold's columns; chunks are not narrowed
// (a folded chunk's partial is one more part: the partials stay within those sized for the most
// resident blocks). `walk` (the sum kinds' folds): a block sweeps several of its slice's chunks
// (doubling while the blocks still fill half the target; r is then not split), so wide folds over
// many slices need no partials pass. A larger target never walks further: the partials stay within
// the workspace's plan (a plan that does not walk at a target walks at no larger one either).
constexpr int kShortRowsPerThread = 4;  // (the fewest loads a direct kernel keeps in flight)
inline ColsDirectPlan make_cols_direct_plan(const ReduceParams& p, int esz, int loads, int64_t target_blocks,
                                            int fill_shift = 0, bool walk = false, int vb = 16) {
  ColsDirectPlan pl{};
  pl.fold = p.fold > 1;
  pl.mid = pl.fold ? p.inner / p.fold : 1;
  pl.width = pl.fold ? p.fold : p.inner;
  pl.outer = p.outer * pl.mid;
  pl.r = p.r;
  pl.inner = p.inner;
  const int kLineVecs = 128 / vb;  // (vb: the vector's bytes, 16 unless narrow)
  const int64_t row_vecs = pl.width * esz / vb;
  pl.chunks = ceil_div(row_vecs, kReduceThreads);
  pl.chunk_vecs = static_cast<int>(pl.chunks == 1 ? row_vecs : ceil_div(ceil_div(row_vecs, pl.chunks), kLineVecs) * kLineVecs);
  pl.chunks = ceil_div(row_vecs, pl.chunk_vecs);
  pl.walk = 1;
  pl.wrap = 1;
  if (walk && pl.fold)
    while (pl.walk < pl.chunks && pl.outer * ceil_div(pl.chunks, 2 * int64_t(pl.walk)) >= std::max<int64_t>(1, target_blocks / 2))
      pl.walk *= 2;
  pl.chunks = ceil_div(pl.chunks, int64_t(pl.walk));  // a block's chunks from here on: walk sweeps each
  if (row_vecs % kLineVecs == 0 && !pl.fold) {
    while (pl.outer * pl.chunks < target_blocks && pl.chunk_vecs % (2 * kLineVecs) == 0) {
      pl.chunk_vecs /= 2;
      pl.chunks = ceil_div(row_vecs, pl.chunk_vecs);
    }
  }
  // Short rows (one chunk of a power-of-two count of vectors up to a warp) put several outer slices
  // in a block, whole warps or a power-of-two part of one each (down to one row group), while the
  // blocks still fill the target (the state kernels, whose merge of group states costs more than
  // idle block slots, half of it: fill_shift 1): fewer row groups to merge a slice, more rows a
  // thread (docs/design.md §5). Such blocks take all of r, so the partials a launch writes never
  // outnumber those sized for the largest target.
  // Short r then doubles them further while half the row groups still leave a thread at most
  // kShortRowsPerThread rows (one batch of loads): idle and one-row groups cost a combine each.
  pl.slices = 1;
  if (pl.chunks == 1 && pl.chunk_vecs <= 32 && (pl.chunk_vecs & (pl.chunk_vecs - 1)) == 0) {
    while (pl.slices < kReduceThreads / pl.chunk_vecs &&
           ceil_div(pl.outer, 2 * int64_t(pl.slices)) >= std::max<int64_t>(1, target_blocks >> fill_shift))
      pl.slices *= 2;
    while (pl.slices < kReduceThreads / pl.chunk_vecs &&
           int64_t(kReduceThreads / pl.slices / pl.chunk_vecs / 2) * kShortRowsPerThread >= p.r)
      pl.slices *= 2;
  }
  pl.groups = kReduceThreads / pl.slices / pl.chunk_vecs;
  const int64_t items = ceil_div(pl.outer, int64_t(pl.slices)) * pl.chunks;
  int64_t parts = pl.slices > 1 || pl.walk > 1 ? 1 : std::max<int64_t>(1, target_blocks / std::max<int64_t>(items, 1));
  parts = std::min(parts, std::max<int64_t>(1, ceil_div(p.r, static_cast<int64_t>(pl.groups) * loads)));
  pl.part_rows = std::max<int64_t>(1, ceil_div(p.r, parts));
  pl.parts = std::max<int64_t>(1, ceil_div(p.r, pl.part_rows));
  pl.grid = items * pl.parts;
  pl.parts_div = FastDiv(static_cast<uint32_t>(std::min<int64_t>(pl.parts, 0x7fffffff)));
  pl.chunks_div = FastDiv(static_cast<uint32_t>(std::clamp<int64_t>(pl.chunks, 1, 0x7fffffff)));
  return pl;
}

inline int acc_size(const ReduceParams& p) { return p.in_dtype == DType::F64 ? 8 : 4; }

inline int64_t max_target_blocks(const ReduceParams& p, const DeviceInfo& dev) {
  return std::max<int64_t>(p.blocks, static_cast<int64_t>(dev.num_sms) * kMaxBlocksPerSm);
}
// The blocks a plan aims at: one wave of resident blocks unless the caller asks otherwise.
inline int64_t target_blocks(const ReduceParams& p, int64_t resident) { return p.blocks > 0 ? p.blocks : resident; }

// The loads in flight for p: its stage count's, but 8 instead of 16 where the grid is more than
// one wave of the 16-load kernel (two blocks an SM by its registers, which the estimate assumes):
// there four blocks an SM of the 8-load kernel keep as many loads in flight, and an SM's other
// blocks stream while one combines its groups and exits (the layout sweep's many short items).
inline int cols_direct_loads(const ReduceParams& p, const DeviceInfo& dev, int esz, int vb = 16) {
  const int u = cols_direct_loads(p.stages);
  if (u < 16) return u;
  const int64_t wave = static_cast<int64_t>(dev.num_sms) * 2;
  return make_cols_direct_plan(p, esz, u, target_blocks(p, wave), 0, true, vb).grid > wave ? u / 2 : u;
}

inline int64_t partial_count(const ReduceParams& p, const DeviceInfo& dev) {
  const int esz = dtype_size(p.in_dtype);
  if (p.inner == 1) {
    const RowsPlan pl = make_rows_plan(p, esz, rows_tile_bytes(p, dev), max_target_blocks(p, dev));
    return pl.parts > 1 ? p.outer * pl.parts : 0;  // split or chunked
  }
  if (cols_direct(p, esz) || cols_direct_wrap(p, esz) > 1 || cols_direct_narrow(p, esz) > 0) {
    const ReduceParams q = cols_direct_wrap(p, esz) > 1 ? wrapped_view(p, esz) : p;  // (outputs: p's)
    const int vb = cols_direct_narrow(p, esz) > 0 ? cols_direct_narrow(p, esz) : 16;
    const ColsDirectPlan pl = make_cols_direct_plan(q, esz, cols_direct_loads(q, dev, esz, vb),
                                                    max_target_blocks(q, dev), 0, true, vb);
    if (pl.fold) return pl.parts * pl.chunks > 1 ? pl.parts * pl.chunks * pl.outer : 0;
    return pl.parts > 1 ? pl.parts * p.outer * p.inner : 0;
  }
  const ColsPlan pl = make_cols_plan(p, dev, esz, max_target_blocks(p, dev));
  return pl.parts > 1 ? pl.parts * p.outer * p.inner : 0;
}

// The headers that define the reduction kernels (an instance's compile includes its own).
constexpr const char* kReduceRowsHeader = "kernels/reduce/rows.cuh";
constexpr const char* kReduceColsHeader = "kernels/reduce/columns.cuh";
constexpr const char* kReducePartialsHeader = "kernels/reduce/partials.cuh";
constexpr const char* kReduceColsDirectHeader = "kernels/reduce/columns_direct.cuh";

// The mechanism and stage count are p's (run-time values here: only the kernels are compiled per
// mechanism and stage count).
template <typename T>
void launch_reduce_typed(const ReduceParams& p) {
  const engine::Mechanism M = p.mechanism;
  const int S = p.stages;
  using A = acc_t<T>;
  const DeviceInfo dev = device_info(current_device());
  const cudaStream_t stream = reinterpret_cast<cudaStream_t>(p.stream);
  A* partials = static_cast<A*>(p.workspace);
  constexpr int esz = sizeof(T);
  int64_t nout = p.outer * p.inner, parts = 1, stride_out = 1, stride_part = 1;
  int64_t count = p.r;  // the values an output reduces (the mean's divisor)
  if (p.inner == 1) {
    const auto kernel = kernel_ref<const T*, void*, DType, A*, RowsPlan, ReduceOp>(
        kReduceRowsHeader, kernel_id("reduce_rows_kernel", M, S, type_c<T>{}), stream);
    const int tile_bytes = rows_tile_bytes(p, dev);
    const size_t smem = static_cast<size_t>(S) * (tile_bytes + 32);
    prepare_smem(kernel, smem, "reduce");
    const int64_t resident = static_cast<int64_t>(dev.num_sms) * blocks_per_sm(kernel, kReduceThreads, smem);
    RowsPlan pl = make_rows_plan(p, esz, tile_bytes, target_blocks(p, resident));
    if (pl.wide) {
      const auto wide = kernel_ref<const T*, void*, DType, A*, RowsPlan, ReduceOp>(
          kReduceRowsHeader, kernel_id("reduce_wide_rows_kernel", M, type_c<T>{}, pl.parts > 1), stream);
      const size_t wide_smem = static_cast<size_t>(pl.tile_elems) * esz + 32;
      prepare_smem(wide, wide_smem, "reduce");
      if (pl.ntiles > 0x7fffffff) throw std::runtime_error("reduce: too many rows for one launch");
      if (pl.ntiles == 0) return;  // no rows, no outputs
      launch_kernel(wide, dim3(static_cast<unsigned>(pl.ntiles)), dim3(kReduceThreads), wide_smem, stream, false,
                    static_cast<const T*>(p.x), p.out, p.out_dtype, partials, pl, p.op);
    } else {
      int64_t grid;
      if (pl.rows_per_tile > 0) {
        grid = std::max<int64_t>(1, std::min<int64_t>(pl.ntiles, target_blocks(p, resident)));
        set_rows_grid(pl, grid);
      } else {
        grid = p.outer * pl.parts;
      }
      if (grid > 0x7fffffff) throw std::runtime_error("reduce: too many rows for one launch");
      launch_kernel(kernel, dim3(static_cast<unsigned>(std::max<int64_t>(grid, 1))), dim3(kReduceThreads), smem,
                    stream, false, static_cast<const T*>(p.x), p.out, p.out_dtype, partials, pl, p.op);
    }
    parts = pl.parts; stride_out = pl.parts; stride_part = 1;  // (parts == 1: no partials)
  } else if (cols_direct(p, esz) || cols_direct_wrap(p, esz) > 1 || cols_direct_narrow(p, esz) > 0) {
    const int wrap = cols_direct_wrap(p, esz), narrow = cols_direct_narrow(p, esz), vb = narrow > 0 ? narrow : 16;
    const ReduceParams q = wrap > 1 ? wrapped_view(p, esz) : p;  // nout and count stay p's
    const int U = cols_direct_loads(q, dev, esz, vb);
    // A fold whose blocks walk at the walk kernel's residency runs that kernel; every other plan the
    // plain one (or the wrap's, the narrow one's), at its own (more blocks an SM).
    const ColsDirectPlan walked = make_cols_direct_plan(
        q, esz, U, target_blocks(q, static_cast<int64_t>(dev.num_sms) * cols_own_blocks_per_sm(U)), 0, true, vb);
    const bool walks = walked.walk > 1;
    const std::string id =
        walks      ? kernel_id("reduce_cols_fold_kernel", U, type_c<T>{})
        : wrap > 1 ? kernel_id("reduce_cols_wrap_kernel", U, type_c<T>{})
        : narrow   ? kernel_id("reduce_cols_narrow_kernel", U, type_c<T>{}, narrow)
                   : kernel_id("reduce_cols_direct_kernel", U, type_c<T>{});
    const auto kernel =
        kernel_ref<const T*, void*, DType, A*, ColsDirectPlan, ReduceOp>(kReduceColsDirectHeader, id, stream);
    ColsDirectPlan pl =
        walks ? walked
              : make_cols_direct_plan(
                    q, esz, U,
                    target_blocks(q, static_cast<int64_t>(dev.num_sms) * blocks_per_sm(kernel, kReduceThreads, 0)), 0,
                    false, vb);
    pl.wrap = wrap;
    if (pl.grid > 0x7fffffff) throw std::runtime_error("reduce: too many column blocks for one launch");
    launch_kernel(kernel, dim3(static_cast<unsigned>(pl.grid)), dim3(kReduceThreads), 0, stream, false,
                  static_cast<const T*>(p.x), p.out, p.out_dtype, partials, pl, p.op);
    if (pl.fold) nout = pl.outer, count = p.r * pl.width;
    parts = pl.fold ? pl.parts * pl.chunks : pl.parts; stride_out = 1; stride_part = nout;
  } else {
    const auto kernel = kernel_ref<const T*, void*, DType, A*, ColsPlan, ReduceOp>(
        kReduceColsHeader, kernel_id("reduce_cols_kernel", M, S, type_c<T>{}), stream);
    const ColsPlan shape = make_cols_plan(p, dev, esz, 1);  // tile geometry; the split needs `resident`
    const size_t smem = static_cast<size_t>(S) * shape.stage_bytes;
    prepare_smem(kernel, smem, "reduce");
    const int64_t resident = static_cast<int64_t>(dev.num_sms) * blocks_per_sm(kernel, kReduceThreads, smem);
    const ColsPlan pl = make_cols_plan(p, dev, esz, target_blocks(p, resident));
    if (pl.grid > 0x7fffffff || p.outer * pl.col_chunks > 0x7fffffff)
      throw std::runtime_error("reduce: too many column blocks for one launch");
    launch_kernel(kernel, dim3(static_cast<unsigned>(pl.grid)), dim3(kReduceThreads), smem, stream, false,
                  static_cast<const T*>(p.x), p.out, p.out_dtype, partials, pl, p.op);
    parts = pl.parts; stride_out = 1; stride_part = nout;
  }
  const bool dependent = dev.code_sm >= 90;  // griddepcontrol is in the kernels' code
  if (parts > 1 && nout < dev.num_sms) {
    const auto k = kernel_ref<const A*, void*, DType, int64_t, int64_t, int64_t, ReduceOp, int64_t>(
        kReducePartialsHeader, kernel_id("reduce_partials_block_kernel", type_c<A>{}), stream);
    launch_kernel(k, dim3(static_cast<unsigned>(nout)), dim3(kPartialsBlockThreads), 0,
                  stream, dependent, static_cast<const A*>(partials), p.out, p.out_dtype, parts, stride_out,
                  stride_part, p.op, count);
  } else if (parts > 1 && stride_out == 1) {
    int slices_log2 = 0;  // about 8-16 partials per thread, up to eight threads per output
    while (slices_log2 < 3 && (int64_t(16) << slices_log2) < parts) ++slices_log2;
    const int64_t blocks = ceil_div(nout << slices_log2, kColPartialsThreads);
    if (blocks > 0x7fffffff) throw std::runtime_error("reduce: too many outputs for the partials pass");
    const auto k = kernel_ref<const A*, void*, DType, int64_t, int64_t, ReduceOp, int64_t, int>(
        kReducePartialsHeader, kernel_id("reduce_col_partials_kernel", type_c<A>{}), stream);
    launch_kernel(k, dim3(static_cast<unsigned>(blocks)), dim3(kColPartialsThreads), 0,
                  stream, dependent, static_cast<const A*>(partials), p.out, p.out_dtype, nout, parts, p.op, count,
                  slices_log2);
  } else if (parts > 1) {
    int lanes_log2 = 0;  // about 4 partials per lane, up to a warp per output
    while (lanes_log2 < 5 && (int64_t(4) << lanes_log2) < parts) ++lanes_log2;
    const int64_t blocks = ceil_div(nout << lanes_log2, 256);
    if (blocks > 0x7fffffff) throw std::runtime_error("reduce: too many outputs for the partials pass");
    const auto k = kernel_ref<const A*, void*, DType, int64_t, int64_t, int64_t, int64_t, ReduceOp, int64_t, int>(
        kReducePartialsHeader, kernel_id("reduce_partials_kernel", type_c<A>{}), stream);
    launch_kernel(k, dim3(static_cast<unsigned>(blocks)), dim3(256), 0, stream, dependent,
                  static_cast<const A*>(partials), p.out, p.out_dtype, nout, parts, stride_out, stride_part, p.op,
                  count, lanes_log2);
  }
}

inline void launch_reduce_plan(const ReduceParams& p) {
  if (p.stages < 1 || p.stages > engine::kMaxStages)
    throw std::runtime_error("stages must be 1..8, got " + std::to_string(p.stages));
  dispatch_dtype(p.in_dtype, [&](auto tv) { launch_reduce_typed<decltype(tv)>(p); });
}

}  // namespace kernels
}  // namespace cupipe
