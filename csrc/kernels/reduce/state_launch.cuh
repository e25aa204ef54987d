// How a state reduction (reduce/states.h) is launched: its StatePlan (packed rows, split rows or
// columns; parts of r), the workspace of partial states, and launch_reduce_state_plan, which
// launches reduce_state_kernel (or, under sync on aligned columns, reduce_state_cols_direct_kernel
// on the direct column plan, and on aligned rows reduce_state_rows_direct_kernel on its
// RowsDirectPlan) and, when r is split, the partials pass. The stage-size and grid helpers are the
// scalar reductions' (launch_plan.cuh).
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "kernels/reduce/launch_plan.cuh"
#include "kernels/reduce/state_direct.cuh"
#include "kernels/reduce/stateful.cuh"

namespace cupipe {
namespace kernels {

// 32 KiB stages: a row of up to 32 KiB is one packed tile; four blocks a SM keep 128 KiB in flight.
constexpr int kStateTileBytes = 32768;
constexpr const char* kReduceStateHeader = "kernels/reduce/stateful.cuh";
constexpr const char* kReduceStateDirectHeader = "kernels/reduce/state_direct.cuh";
// The direct column plan's slices fill half the resident blocks for the state kinds (launch_plan.cuh).
constexpr int kStateSliceFillShift = 1;

inline const char* state_kind_id(StateKind k) {
  switch (k) {
    case StateKind::Moments: return "StateKind::Moments";
    case StateKind::Arg: return "StateKind::Arg";
    case StateKind::Lse: return "StateKind::Lse";
    case StateKind::Norm: return "StateKind::Norm";
  }
  return "?";
}

inline StateCtx state_ctx(const ReduceParams& p) { return make_state_ctx(p.op, p.correction, p.ord); }

// Parts of r (of `unit` elements or rows each) for `items` items: one wave of target_blocks, at
// least four units a part. Sets parts, part_len, part_tiles and last_tiles.
inline void split_state_parts(StatePlan& pl, int64_t r, int64_t unit, int64_t items, int64_t target_blocks) {
  int64_t parts = std::max<int64_t>(1, target_blocks / std::max<int64_t>(items, 1));
  parts = std::min(parts, std::max<int64_t>(1, ceil_div(r, 4 * unit)));
  pl.part_len = ceil_div(ceil_div(r, parts), unit) * unit;
  pl.parts = ceil_div(r, pl.part_len);
  pl.part_tiles = pl.part_len / unit;
  pl.last_tiles = std::max<int64_t>(1, ceil_div(r - (pl.parts - 1) * pl.part_len, unit));
  if (pl.parts == 1) pl.part_tiles = pl.last_tiles;
}

inline StatePlan make_state_plan(const ReduceParams& p, const DeviceInfo& dev, int64_t target_blocks) {
  StatePlan pl{};
  const int esz = dtype_size(p.in_dtype);
  const int consumers = engine::consumer_threads(p.mechanism, kStateThreads);
  const int tile_bytes = p.tile_bytes > 0 ? p.tile_bytes : fitted_tile_bytes(p, dev, kStateTileBytes, 160);
  pl.outer = p.outer, pl.r = p.r, pl.inner = p.inner;
  pl.ctx = state_ctx(p);
  pl.tile_elems = tile_bytes / esz;
  pl.col_chunks = 1;
  pl.vec_rows = (reinterpret_cast<uintptr_t>(p.x) & 15u) == 0 && (p.r * esz) % 16 == 0;
  if (p.inner == 1 && p.r <= pl.tile_elems) {
    pl.mode = 0;
    pl.rows_per_tile = static_cast<int>(pl.tile_elems / p.r);
    pl.items = ceil_div(p.outer, pl.rows_per_tile);
    int g = 1;  // at least 16 elements a lane: a merge costs about as much as a block add
    while (g < 32 && g * 16 < p.r) g *= 2;
    // Tiles of few long rows: several warps per row, so that the rows fill the block.
    while (g >= 32 && g * 2 <= consumers && g * pl.rows_per_tile < consumers && g * 16 < p.r) g *= 2;
    pl.group = g;
    while ((1 << pl.group_log2) < g) ++pl.group_log2;
    pl.parts = pl.part_tiles = pl.last_tiles = 1;
    pl.stage_bytes = static_cast<int>(engine::align_up(static_cast<int64_t>(pl.rows_per_tile) * p.r * esz + 32, 128));
  } else if (p.inner == 1) {
    pl.mode = 1;
    pl.items = p.outer;
    split_state_parts(pl, p.r, pl.tile_elems, pl.items, target_blocks);
    pl.stage_bytes = static_cast<int>(engine::align_up(static_cast<int64_t>(pl.tile_elems) * esz + 32, 128));
  } else {
    // Columns: the column sums' stage size (cols_tile_bytes) and row layout (launch_plan.cuh), which
    // their measurements chose: a 32 KiB tile of 4 KiB rows gave a thread 28 elements a tile.
    const int col_tile = cols_tile_bytes(p, dev);
    pl.mode = 2;
    pl.col_threads = static_cast<int>(std::min<int64_t>(p.inner, consumers));
    pl.vecs = static_cast<int>(std::min<int64_t>(kStateColStates, ceil_div(p.inner, pl.col_threads)));
    pl.chunk_cols = static_cast<int>(std::min<int64_t>(p.inner, static_cast<int64_t>(pl.col_threads) * pl.vecs));
    pl.dense = pl.chunk_cols == p.inner;
    // Quads: 4 columns a thread, each tile row aligned to a 4-element vector (chunks start at
    // multiples of 4 columns; every row of x at a multiple of 16 bytes), no 8-byte type.
    const bool aligned = (reinterpret_cast<uintptr_t>(p.x) & 15u) == 0 && (p.inner * esz) % 16 == 0;
    pl.col_quads = pl.vecs == kStateColStates && esz <= 4 && p.inner % 4 == 0 && aligned;
    pl.col_chunks = ceil_div(p.inner, pl.chunk_cols);
    pl.base = -1;
    const int64_t row_bytes = p.inner * esz, chunk_bytes = static_cast<int64_t>(pl.chunk_cols) * esz;
    if (pl.dense) {
      pl.tile_rows = static_cast<int>(std::max<int64_t>(1, col_tile / row_bytes));
      pl.stage_bytes = static_cast<int>(engine::align_up(pl.tile_rows * row_bytes + 32, 128));
    } else if (aligned && row_bytes % 128 == 0 && chunk_bytes % 128 == 0) {
      // Congruent rows: each at its source's offset modulo 128 (x's: rows and chunk starts are
      // multiples of 128 bytes), one box a tile; a misplaced row costs two L2 requests a line.
      pl.pitch = static_cast<int>(chunk_bytes);
      pl.base = static_cast<int>(reinterpret_cast<uintptr_t>(p.x) & 127u);
      pl.tile_rows = std::max(1, col_tile / pl.pitch);
      pl.stage_bytes = static_cast<int>(engine::align_up(static_cast<int64_t>(pl.tile_rows) * pl.pitch + (pl.base ? 128 : 0), 128));
    } else {
      // 32 bytes of slack: a row's shift (aligned rows: every row at 0, one box) and a zero-filled
      // tail.
      pl.pitch = static_cast<int>(engine::align_up(chunk_bytes + 32, 16));
      if (aligned) pl.base = 0;
      pl.tile_rows = std::max(1, col_tile / pl.pitch);
      pl.stage_bytes = static_cast<int>(engine::align_up(static_cast<int64_t>(pl.tile_rows) * pl.pitch, 128));
    }
    pl.items = p.outer * pl.col_chunks;
    split_state_parts(pl, p.r, pl.tile_rows, pl.items, target_blocks);
  }
  pl.parts_div = FastDiv(static_cast<uint32_t>(std::min<int64_t>(pl.parts, 0x7fffffff)));
  pl.chunks_div = FastDiv(static_cast<uint32_t>(std::clamp<int64_t>(pl.col_chunks, 1, 0x7fffffff)));
  return pl;
}

// The sync mechanism along rows that start on 16-byte boundaries (x aligned and rows of whole
// vectors, or one row) reads them straight into registers (reduce_state_rows_direct_kernel), its
// stage count setting the loads a thread keeps in flight as on columns (cols_direct_loads).
inline bool state_rows_direct(const ReduceParams& p, int esz) {
  return p.mechanism == engine::Mechanism::Sync && p.inner == 1 && (reinterpret_cast<uintptr_t>(p.x) & 15u) == 0 &&
         (p.outer == 1 || (p.r * esz) % 16 == 0);
}

// Rows of at most kRowsDirectWarpBatches batches of `loads` vectors a lane are packed, the fewest
// lanes a row (a power of two, up to a warp) that read it in one batch each where that fits, and a
// warp takes items of 8 KiB or more while the grid stays over two waves of `resident` blocks. Longer
// rows take a block each, split into parts where the rows leave two waves of blocks unfilled (no
// part under a batch of the block's loads).
constexpr int kRowsDirectWarpBatches = 16;
inline RowsDirectPlan make_rows_direct_plan(const ReduceParams& p, int esz, int loads, int64_t resident) {
  constexpr int kWarps = kReduceThreads / 32;
  RowsDirectPlan pl{};
  pl.outer = p.outer;
  pl.r = p.r;
  pl.row_vecs = p.r * esz / 16;
  const int64_t lanes = ceil_div(std::max<int64_t>(pl.row_vecs, 1), loads);
  const int64_t two_waves = 2 * std::max<int64_t>(resident, 1);
  if (lanes <= 32 * kRowsDirectWarpBatches) {
    pl.group = 1;
    while (pl.group < std::min<int64_t>(lanes, 32)) pl.group *= 2, ++pl.group_log2;
    pl.rows_a_lane = 1;
    // Rows of 4 or 8 vectors at 4 loads: their lanes would read under 64 bytes of a row a load; read
    // interleaved instead, a lane's 4 loads from 4 rows, a row's vectors one a lane (the kinds that
    // gain, state_rows_interleave).
    if (loads == 4 && p.outer > 1 && (pl.row_vecs == 4 || pl.row_vecs == 8) && pl.row_vecs * 16 == p.r * esz &&
        state_rows_interleave(state_kind(p.op), esz)) {
      pl.rows_a_lane = loads;
      pl.group = static_cast<int>(pl.row_vecs);
      pl.group_log2 = pl.row_vecs == 4 ? 2 : 3;
    }
    const int64_t rows_per_item = pl.rows_a_lane * 32 / pl.group;
    pl.items = ceil_div(p.outer, rows_per_item);
    const int64_t item_bytes = std::max<int64_t>(rows_per_item * p.r * esz, 1);
    pl.items_per_warp = static_cast<int>(std::clamp<int64_t>(8192 / item_bytes, 1, 16));
    while (pl.items_per_warp > 1 && ceil_div(pl.items, int64_t(kWarps) * pl.items_per_warp) < two_waves)
      pl.items_per_warp /= 2;
    pl.parts = 1;
    pl.grid = ceil_div(pl.items, int64_t(kWarps) * pl.items_per_warp);
  } else {
    const int64_t max_parts = std::max<int64_t>(1, pl.row_vecs / (int64_t(kReduceThreads) * loads));
    const int64_t parts = std::clamp<int64_t>(ceil_div(two_waves, p.outer), 1, max_parts);
    pl.part_vecs = ceil_div(ceil_div(pl.row_vecs, parts), 32) * 32;  // whole 512-byte runs a warp
    pl.parts = ceil_div(pl.row_vecs, pl.part_vecs);
    pl.grid = p.outer * pl.parts;
  }
  pl.parts_div = FastDiv(static_cast<uint32_t>(std::clamp<int64_t>(pl.parts, 1, 0x7fffffff)));
  return pl;
}

inline int64_t state_grid(const StatePlan& pl, int64_t target_blocks) {
  return pl.parts > 1 ? pl.items * pl.parts : std::clamp<int64_t>(pl.items, 1, std::max<int64_t>(target_blocks, 1));
}

inline int state_size(const ReduceParams& p) {
  int size = 0;
  dispatch_state_kind(state_kind(p.op), [&](auto kind) {
    constexpr StateKind K = decltype(kind)::value;
    size = p.in_dtype == DType::F64 ? sizeof(State<double, K>) : sizeof(State<float, K>);
  });
  return size;
}

// Workspace bytes: the partial states of the largest grid a launch may choose (the direct row plan's parts grow
// with the resident blocks: the most a device may have).
inline int64_t state_workspace_bytes(const ReduceParams& p, const DeviceInfo& dev) {
  const int esz = dtype_size(p.in_dtype);
  const int64_t target = max_target_blocks(p, dev);
  const auto bytes = [&](int64_t parts) { return parts > 1 ? p.outer * p.inner * parts * state_size(p) : 0; };
  if (cols_direct(p, esz) || cols_direct_wrap(p, esz) > 1 || cols_direct_narrow(p, esz) > 0) {
    const ReduceParams q = cols_direct_wrap(p, esz) > 1 ? wrapped_view(p, esz) : p;  // (outputs: p's)
    const int vb = cols_direct_narrow(p, esz) > 0 ? cols_direct_narrow(p, esz) : 16;
    const ColsDirectPlan pl =
        make_cols_direct_plan(q, esz, cols_direct_loads(p.stages), target, kStateSliceFillShift, false, vb);
    if (pl.fold) return pl.parts * pl.chunks > 1 ? pl.outer * pl.parts * pl.chunks * state_size(p) : 0;
    return bytes(pl.parts);
  }
  if (state_rows_direct(p, esz)) return bytes(make_rows_direct_plan(p, esz, cols_direct_loads(p.stages), target).parts);
  return bytes(make_state_plan(p, dev, target).parts);
}

template <typename T, StateKind K>
void launch_reduce_state_typed(const ReduceParams& p) {
  using A = acc_t<T>;
  using St = State<A, K>;
  const engine::Mechanism M = p.mechanism;
  const int S = p.stages;
  const DeviceInfo dev = device_info(current_device());
  const cudaStream_t stream = reinterpret_cast<cudaStream_t>(p.stream);
  St* partials = static_cast<St*>(p.workspace);
  const auto partials_pass = [&](int64_t parts, bool rows, const StateCtx& ctx, int64_t nout) {
    const int64_t blocks = ceil_div(nout * 32, 256);
    if (blocks > 0x7fffffff) throw std::runtime_error("reduce: too many outputs for the partials pass");
    const auto k = kernel_ref<const St*, void*, DType, int64_t, int64_t, int64_t, int64_t, StateCtx>(
        kReduceStateHeader, kernel_id("reduce_state_partials_kernel", type_c<A>{}, state_kind_id(K)), stream);
    launch_kernel(k, dim3(static_cast<unsigned>(blocks)), dim3(256), 0, stream, dev.code_sm >= 90,
                  static_cast<const St*>(partials), p.out, p.out_dtype, nout, parts,
                  rows ? parts : int64_t(1), rows ? int64_t(1) : nout, ctx);
  };
  // The direct kernels (sync on aligned columns or rows): U loads in flight a thread, their own plan.
  // (vb: a narrow column kernel's vector bytes, the id's last argument; 0 for the others)
  const auto direct = [&](const char* name, auto make_plan, bool rows, int vb = 0) {
    using Plan = decltype(make_plan(0, int64_t(0)));
    const int U = cols_direct_loads(S);
    const auto kernel = kernel_ref<const T*, void*, DType, St*, Plan, StateCtx>(
        kReduceStateDirectHeader,
        vb ? kernel_id(name, U, type_c<T>{}, state_kind_id(K), vb) : kernel_id(name, U, type_c<T>{}, state_kind_id(K)),
        stream);
    const int64_t resident = static_cast<int64_t>(dev.num_sms) * blocks_per_sm(kernel, kReduceThreads, 0);
    const Plan pl = make_plan(U, target_blocks(p, resident));
    if (pl.grid > 0x7fffffff) throw std::runtime_error("reduce: too many blocks for one launch");
    const StateCtx ctx = state_ctx(p);
    launch_kernel(kernel, dim3(static_cast<unsigned>(pl.grid)), dim3(kReduceThreads), 0, stream, false,
                  static_cast<const T*>(p.x), p.out, p.out_dtype, partials, pl, ctx);
    int64_t parts = pl.parts, nout = p.outer * p.inner;
    if constexpr (std::is_same_v<Plan, ColsDirectPlan>) {
      if (pl.fold) parts *= pl.chunks, nout = pl.outer;  // a folded chunk's partial is one more part
    }
    if (parts > 1) partials_pass(parts, rows, ctx, nout);
  };
  // Aligned columns: the direct kernel, its fold, narrow columns wrapped into vectors (whose plan reads
  // wrapped_view's rows; the outputs stay p's), or narrow ones read a vector of the row's bytes a row.
  const int wrap = cols_direct_wrap(p, sizeof(T)), narrow = cols_direct_narrow(p, sizeof(T));
  if (cols_direct(p, sizeof(T)) || wrap > 1 || narrow > 0) {
    const ReduceParams q = wrap > 1 ? wrapped_view(p, sizeof(T)) : p;
    return direct(p.fold > 1 ? "reduce_state_cols_fold_kernel"
                  : wrap > 1 ? "reduce_state_cols_wrap_kernel"
                  : narrow   ? "reduce_state_cols_narrow_kernel"
                             : "reduce_state_cols_direct_kernel",
                  [&](int U, int64_t target) {
                    ColsDirectPlan pl = make_cols_direct_plan(q, sizeof(T), U, target, kStateSliceFillShift, false,
                                                              narrow > 0 ? narrow : 16);
                    pl.wrap = wrap;
                    return pl;
                  },
                  false, narrow);
  }
  if (state_rows_direct(p, sizeof(T)))
    return direct("reduce_state_rows_direct_kernel",
                  [&](int U, int64_t target) { return make_rows_direct_plan(p, sizeof(T), U, target); }, true);
  const auto kernel = kernel_ref<const T*, void*, DType, St*, StatePlan>(
      kReduceStateHeader, kernel_id("reduce_state_kernel", M, S, type_c<T>{}, state_kind_id(K)), stream);
  const StatePlan shape = make_state_plan(p, dev, 1);  // the stage size; the split needs `resident`
  const size_t smem = static_cast<size_t>(S) * shape.stage_bytes;
  prepare_smem(kernel, smem, "reduce");
  const int64_t resident = static_cast<int64_t>(dev.num_sms) * blocks_per_sm(kernel, kStateThreads, smem);
  StatePlan pl = make_state_plan(p, dev, target_blocks(p, resident));
  const int64_t grid = state_grid(pl, target_blocks(p, resident));
  if (grid > 0x7fffffff || pl.items > 0x7fffffff) throw std::runtime_error("reduce: too many blocks for one launch");
  pl.share = TileShare(pl.items, grid);
  launch_kernel(kernel, dim3(static_cast<unsigned>(grid)), dim3(kStateThreads), smem, stream, false,
                static_cast<const T*>(p.x), p.out, p.out_dtype, partials, pl);
  if (pl.parts > 1) partials_pass(pl.parts, pl.mode == 1, pl.ctx, p.outer * p.inner);
}

inline void launch_reduce_state_plan(const ReduceParams& p) {
  if (p.stages < 1 || p.stages > engine::kMaxStages)
    throw std::runtime_error("stages must be 1..8, got " + std::to_string(p.stages));
  dispatch_dtype(p.in_dtype, [&](auto tv) {
    dispatch_state_kind(state_kind(p.op), [&](auto kind) { launch_reduce_state_typed<decltype(tv), decltype(kind)::value>(p); });
  });
}

}  // namespace kernels
}  // namespace cupipe
