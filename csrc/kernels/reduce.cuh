// Pipelined reductions of a contiguous (outer, r, inner) view over r, on the engine.
//
//   rows  (inner == 1):  short rows are packed several to a tile and reduced by lane groups of
//                        2..32 threads with shuffles; long rows are split into `parts`, one block
//                        streaming each part's tiles through the ring.
//   cols  (inner > 1):   a tile is tile_rows rows of a chunk of contiguous columns (32 to 256
//                        16-byte vectors wide), moved as one 2-D box; thread t owns the chunk's
//                        vector t % width, groups of threads take interleaved rows and combine
//                        in smem.
//
// Determinism: every partial is combined in a fixed order (per-thread sequential, then fixed
// shuffle / smem trees); a row split into several parts writes its partials to the workspace
// and a second kernel combines them in order. No floating-point atomics anywhere.
#pragma once

#include <algorithm>
#include <cmath>

#include "engine/engine.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/fast_div.cuh"
#include "kernels/launch_utils.cuh"
#include "kernels/numeric.cuh"

namespace cupipe {
namespace kernels {

constexpr int kReduceThreads = 256;
// Bytes per stage unless ReduceParams::tile_bytes says otherwise. The per-tile costs (the copy's
// split, the ring's wait and barrier, the consumer's set-up) are paid per stage, so wider stages
// amortise them over more elements per thread. Measured on an H200 (BENCHMARKS.md, 2026-11-22,
// third run): rows 32 KiB stages (sum all 0.263 ms at 2 stages, against 0.306 with 8 KiB). Columns
// with chunks up to 16 KiB wide (fifth run, scripts/reduce_sweep.py --tiles, two device calls):
// 64 KiB stages at 2 stages, one block per SM, 0.249-0.257 ms for (32768, 8192) and 0.253-0.279
// for (8192, 32768), against 0.274 and 0.272 at 8-16 KiB (three blocks per SM) and 0.306 and
// 0.304 at 32 KiB. Both take the widest stage that fits the stage count into shared memory.
constexpr int kReduceRowsTileBytes = 32768;
constexpr int kReduceColsTileBytes = 65536;
constexpr int kMaxBlocksPerSm = 2048 / kReduceThreads;
// Rows of more than 4 KiB (up to a stage) are reduced a block per ~16 KiB of rows, one tile per
// block (reduce_wide_rows_kernel).
constexpr int kWideRowsBlockBytes = 16384;

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
    if (op == ReduceOp::Amax) return (a != a) ? a : ((v != v || v > a) ? v : a);
    if (op == ReduceOp::Amin) return (a != a) ? a : ((v != v || v < a) ? v : a);
    return a + v;
  }
};

// The same combine with the op fixed at compile time, for the innermost loops only (a run-time
// op there costs several instructions per element in kernels that issue ~25 per element).
template <typename A, ReduceOp Op>
struct StaticCombine {
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

// The index arithmetic a block needs before its first copy is done here, on the host: a 64-bit
// division on the device is a ~70-instruction dependent chain, and every block paid several of
// them (tile counts, its row and part) before issuing its first copy.
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
};

// Rows longer than a stage, fewer than the resident blocks (the whole tensor, a few long rows),
// at one stage, x and every row 16-byte aligned (a single row may end anywhere): a block per
// stage-sized chunk of a row (reduce_wide_rows_kernel), its partial to the workspace, then the
// partials pass. Blocks that exit after one chunk keep every SM's copies in flight to the end of
// the pass, where the split plan's resident blocks each stream a part and finish unevenly. H200,
// scripts/probe_reduce_split.cu, old and new in one call, two rounds (nineteenth run, ms, split ->
// chunked, tma/1): sum of 2^28 fp32 0.2374-0.2375 -> 0.2367, amax 0.2393 -> 0.2382, 2^28 bf16
// 0.1233-0.1234 -> 0.1227-0.1228, rows (64, 2^22) 0.2378-0.2379 -> 0.2360; of the 0.2365 ms, the
// first pass 0.2337 and the partials pass ~2.8 us (0.9 of it the dependent launch's floor). 64
// KiB chunks: 32 KiB ran the first pass as fast but left twice the partials (32768 for 2^28
// fp32, the pass then ~4.7 us), 128 KiB fit one block per SM (amax 9% slower). At more stages
// the split plan streams each part through the ring (what the stage count buys). `sync` keeps the
// split plan: its copies wait on each load in registers, so a block of one 64 KiB chunk keeps
// little in flight (sum all 0.373 ms chunked, nineteenth run's sweep, against 0.269 at one stage
// of the split plan in the fifth run's).
inline bool chunked_rows(const ReduceParams& p, int esz) {
  return p.stages == 1 && p.mechanism != engine::Mechanism::Sync && (reinterpret_cast<uintptr_t>(p.x) & 15u) == 0 &&
         (p.outer == 1 || (p.r * esz) % 16 == 0);
}

// The default stage size shrunk (halved) until the stage count fits shared memory.
inline int fitted_tile_bytes(const ReduceParams& p, const DeviceInfo& dev, int t, int slack) {
  while (t > 4096 && static_cast<int64_t>(p.stages) * (t + slack) + 1024 > dev.max_smem_optin) t /= 2;
  return t;
}
// Rows longer than 64 KiB (the split plan: the whole tensor, a few long rows) under tma with one
// stage take 64 KiB stages: one bulk copy per 64 KiB, three blocks per SM instead of seven. H200,
// scripts/probe_reduce_split.cu, two rounds in each of two calls (sixteenth run, ms, 32 -> 64 KiB):
// sum of 2^28 fp32 0.2381-0.2383 -> 0.2371-0.2376, amax 0.2405-0.2408 -> 0.2391-0.2394, rows
// (64, 2^22) 0.2386-0.2389 -> 0.2377-0.2381, 2^28 bf16 0.1235-0.1236 either way, rows (8192, 32768)
// 0.2340-0.2341 either way; 48 KiB in between, 96 KiB even or slower, 128 KiB 2-5% slower. Rows
// of a stage or less (several per stage) lost with 64 KiB: (4194304, 64) 0.2550 -> 0.2570, (4096,
// 4096) 0.0203 -> 0.0209; nor did 16 KiB or other grids help them.
inline int rows_tile_bytes(const ReduceParams& p, const DeviceInfo& dev) {
  if (p.tile_bytes > 0) return p.tile_bytes;
  const int esz = dtype_size(p.in_dtype);
  const bool split = p.r * static_cast<int64_t>(esz) > 2 * kReduceRowsTileBytes;
  const bool wide_stage = split && p.stages == 1 && (p.mechanism == engine::Mechanism::Tma || chunked_rows(p, esz));
  const int t = wide_stage ? 2 * kReduceRowsTileBytes : kReduceRowsTileBytes;
  return fitted_tile_bytes(p, dev, t, 32);
}
// Columns: a tile row is a chunk plus 32 bytes of pitch slack (chunks are 512 bytes or wider).
inline int cols_tile_bytes(const ReduceParams& p, const DeviceInfo& dev) {
  return p.tile_bytes > 0 ? p.tile_bytes : fitted_tile_bytes(p, dev, kReduceColsTileBytes, kReduceColsTileBytes / 16);
}

// ---------------------------------------------------------------------------------- rows
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
  // at any moment as a copy does, measured the same to 1%: sixth run, scripts/grid_sweep.py.)
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
// in ready(), while the copy is in flight. kChunks (parts > 1) is a template parameter, so the
// packed rows' kernel is the one it was before chunks: with run-time branches on parts,
// (4096, 4096) measured 0.0195-0.0196 -> 0.0197-0.0198 ms against the old kernel (two calls);
// templated, 0.0195-0.0198 -> 0.0196-0.0197 (tma/1 and primitives/1, another call; a 0.0001 ms
// resolution), nineteenth run.
// H200, (4096, 4096) fp32, ms (docs/perf_notes.md, eighteenth run): the persistent grid of
// two-row tiles through reduce_rows_kernel 0.0203-0.0204 (tma/1) and 0.0199-0.0202 (primitives/1)
// against this kernel's 0.0194-0.0195 (either), one bulk copy per row without the engine
// 0.0188-0.0190 (one call). The remaining ~2.5% is the consume's run-time geometry: the engine's
// ring with a hard-wired fold runs as fast as staging without it (scripts/probe_reduce_wide.cu).
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

// ---------------------------------------------------------------------------------- columns
// A block owns one chunk of contiguous columns of one `outer` slice and a part of r; a tile is
// tile_rows rows of the chunk, moved as one copy_rows box. A chunk is row_threads x vecs 16-byte
// column vectors wide: row_threads (32 to 256, a power of two) as the row needs, and when a row
// is wider than the block, up to col_max_vecs vectors per thread (vector u of thread t is the
// chunk's vector t + u * row_threads: a warp's reads stay consecutive). Consumer thread t owns
// the vectors of t % row_threads in the rows t / row_threads, + groups, ... of each tile; the
// groups' sums combine in smem in group order (several groups only when vecs == 1). Wide chunks
// keep each row's run contiguous in DRAM: up to 16 KiB, where 32-lane chunks read 512 bytes per
// row (H200, (32768, 8192) fp32: 0.77x of eager torch.sum with 512-byte chunks; BENCHMARKS.md).
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

// Folds src[p * stride] for p = first, first + step, ... below n into acc in that order, issuing
// kBatch loads before folding them: the partials sit in L2, a few hundred cycles away, and a loop
// that waits on each load in turn (what the compiler made of a plain unrolled loop with a
// run-time op) made the pass over 32768 partials of a whole-tensor sum cost 14.6 us after the
// first pass, against 4.7 us batched (H200, nineteenth run, scripts/probe_reduce_split.cu).
template <int kBatch, typename A, class SC>
__device__ __forceinline__ void fold_strided(const A* __restrict__ src, int64_t stride, int64_t first, int64_t step,
                                             int64_t n, A& acc, SC sc) {
  int64_t p = first;
  for (; p + (kBatch - 1) * step < n; p += kBatch * step) {
    A v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) v[k] = src[(p + k * step) * stride];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) acc = sc(acc, v[k]);
  }
  for (; p < n; p += step) acc = sc(acc, src[p * stride]);
}

// Combines `parts` partials per output in order: partials laid out [out][part] (stride_part = 1,
// stride_out = parts) for rows, [part][out] for columns.
// Few outputs with many partials each (a whole-tensor reduction: one output, one partial per
// resident block or one per chunk, up to tens of thousands): a block of 1024 threads per
// output, each folding the partials p = rank, rank + 1024, ... sixteen loads at a time, then the
// block's fixed-order combine.
constexpr int kPartialsBlockThreads = 1024;
template <typename A>
__global__ void __launch_bounds__(kPartialsBlockThreads)
    reduce_partials_block_kernel(const A* __restrict__ partials, void* out, DType od, int64_t parts,
                                 int64_t stride_out, int64_t stride_part, ReduceOp op, int64_t r) {
  __shared__ A scratch[kPartialsBlockThreads / 32];
  const Combine<A> comb{op};
  const int64_t i = blockIdx.x;
  const A* src = partials + i * stride_out;
  A acc = comb.init();
  wait_for_previous_grid();  // launched as a dependent of the pass that writes the partials
  with_static_combine<A>(op, [&](auto sc) {
    fold_strided<16>(src, stride_part, threadIdx.x, kPartialsBlockThreads, parts, acc, sc);
  });
  const engine::Team team{static_cast<int>(threadIdx.x), kPartialsBlockThreads};
  const A total = team_combine(acc, comb, team, scratch);
  if (threadIdx.x == 0) store_out(out, od, i, finalize(op, total, r));
}

// Many outputs of rows split in parts ([out][part]: an output's partials are adjacent): a group of
// 2^lanes_log2 lanes of one warp per output, lane g folding partials g, g + G, ... (four loads in
// flight at a time per lane), then a fixed shuffle tree. (Columns took it too until the twentieth
// run; before these lanes, a thread per output folding one load after another took ~25 us for 49
// partials of 8192 columns, a tenth of the column sum it ends.)
template <typename A>
__global__ void __launch_bounds__(256)
    reduce_partials_kernel(const A* __restrict__ partials, void* out, DType od, int64_t nout, int64_t parts,
                           int64_t stride_out, int64_t stride_part, ReduceOp op, int64_t r, int lanes_log2) {
  const Combine<A> comb{op};
  const int G = 1 << lanes_log2;
  const int64_t gid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t i = gid >> lanes_log2;
  const int lane = static_cast<int>(gid & (G - 1));
  A acc = comb.init();
  wait_for_previous_grid();  // launched as a dependent of the pass that writes the partials
  if (i < nout) {
    with_static_combine<A>(op, [&](auto sc) { fold_strided<4>(partials + i * stride_out, stride_part, lane, G, parts, acc, sc); });
  }
  // Every lane of the warp gets here (the groups of a warp differ only in i), so the shuffles
  // are uniform.
  for (int o = G / 2; o > 0; o >>= 1) acc = comb(acc, __shfl_xor_sync(0xffffffffu, acc, o, G));
  if (i < nout && lane == 0) store_out(out, od, i, finalize(op, acc, r));
}

// Columns' partials, laid out [part][out]: a block of 256 threads takes 256 / slices consecutive
// outputs, `slices` threads per output; thread s of an output folds parts s, s + slices, ...
// (eight loads at a time), then the slices combine in order through shared memory. A warp's loads
// are 128 consecutive bytes of one part's row. Against reduce_partials_kernel's lanes (a warp per
// output, each load 32 parts apart) the (32768, 8192) sum's pass over 66 parts ran 0.0042-0.0044
// ms against 0.0070 alone, and the whole sum 0.2520-0.2521 against 0.2540-0.2544 (H200, twentieth
// run, scripts/probe_reduce_cols.cu).
constexpr int kColPartialsThreads = 256, kColPartialsThreadsLog2 = 8;
static_assert(kColPartialsThreads == 1 << kColPartialsThreadsLog2, "slices are found by a shift");
template <typename A>
__global__ void __launch_bounds__(kColPartialsThreads)
    reduce_col_partials_kernel(const A* __restrict__ partials, void* out, DType od, int64_t nout, int64_t parts,
                               ReduceOp op, int64_t r, int slices_log2) {
  __shared__ A scratch[kColPartialsThreads];
  const Combine<A> comb{op};
  const int per_block = kColPartialsThreads >> slices_log2;
  const int lo = static_cast<int>(threadIdx.x) & (per_block - 1);
  const int slice = static_cast<int>(threadIdx.x) >> (kColPartialsThreadsLog2 - slices_log2);
  const int64_t i = blockIdx.x * static_cast<int64_t>(per_block) + lo;
  A acc = comb.init();
  wait_for_previous_grid();  // launched as a dependent of the pass that writes the partials
  if (i < nout) {
    with_static_combine<A>(op, [&](auto sc) {
      fold_strided<8>(partials + i, nout, slice, int64_t(1) << slices_log2, parts, acc, sc);
    });
  }
  if (slices_log2 > 0) {
    scratch[threadIdx.x] = acc;
    __syncthreads();
    if (slice != 0) return;
    for (int s = 1; s < (1 << slices_log2); ++s) acc = comb(acc, scratch[s * per_block + lo]);
  }
  if (i < nout) store_out(out, od, i, finalize(op, acc, r));
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
      // 512-byte rows, half for 256-byte rows). H200,
      // scripts/probe_reduce_split.cu, tma/1, two rounds (sixteenth run, ms, against the groups
      // above): (8388608, 32) 0.2634-0.2637 -> 0.2594-0.2595, (4194304, 64) 0.2554-0.2555 ->
      // 0.2545-0.2549, bf16 (4194304, 64) 0.1364-0.1369 -> 0.1344-0.1346, (2097152, 128)
      // 0.2505-0.2508 -> 0.2496-0.2497. Two lanes per row ran even, eight lost 2-86% (their
      // shuffles; with or without the rotation), rotated loads in groups of four lost 1.5%.
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
    } else {
      while (g < 32 && g < vecs) g *= 2;  // about one vector per lane
    }
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

// max_vecs (0: col_max_vecs) caps the vectors per thread and row, so the chunk width (probes).
inline ColsPlan make_cols_plan(const ReduceParams& p, const DeviceInfo& dev, int esz, int64_t target_blocks,
                               int max_vecs = 0) {
  ColsPlan pl{};
  pl.outer = p.outer;
  pl.r = p.r;
  pl.inner = p.inner;
  // The narrowest power-of-two chunk of at least 32 vectors that spans the row, up to as many
  // vectors as there are consumer threads, then up to col_max_vecs vectors per thread.
  const int consumers = engine::consumer_threads(p.mechanism, kReduceThreads);
  const int64_t row_vecs = ceil_div(p.inner, 16 / esz);
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
  pl.tile_rows = std::max(1, cols_tile_bytes(p, dev) / chunk_bytes);
  const int64_t work = p.outer * pl.col_chunks;
  // Rounded down: a part more than the resident blocks hold would start a second, nearly empty
  // wave (448 blocks for 396 resident in the (32768, 8192) sum).
  int64_t parts = target_blocks / work;
  parts = std::min(parts, std::max<int64_t>(1, ceil_div(p.r, 4 * pl.tile_rows)));
  parts = std::max<int64_t>(parts, 1);
  pl.part_rows = std::max<int64_t>(1, ceil_div(ceil_div(p.r, parts), pl.tile_rows)) * pl.tile_rows;
  pl.parts = std::max<int64_t>(1, ceil_div(p.r, pl.part_rows));
  pl.part_tiles = pl.part_rows / pl.tile_rows;
  pl.last_tiles = ceil_div(std::max<int64_t>(0, p.r - (pl.parts - 1) * pl.part_rows), pl.tile_rows);
  pl.parts_div = FastDiv(static_cast<uint32_t>(std::min<int64_t>(pl.parts, 0x7fffffff)));  // (grids < 2^31)
  pl.chunks_div = FastDiv(static_cast<uint32_t>(std::clamp<int64_t>(pl.col_chunks, 1, 0x7fffffff)));
  pl.row_threads_log2 = 0;
  while ((1 << pl.row_threads_log2) < pl.row_threads) ++pl.row_threads_log2;
  pl.aligned = (reinterpret_cast<uintptr_t>(p.x) & 15u) == 0 && (p.inner * esz) % 16 == 0;
  if (pl.aligned && (p.inner * esz) % 128 == 0) {
    // Congruent layout: every row of a tile lands at its source's offset modulo 128 (rows a
    // multiple of 128 bytes apart in both, the tile at x's offset modulo 128: a chunk starts a
    // multiple of 512 bytes into its row). Rows with no tail need no slack. A pitch of chunk + 32
    // (rows 1-3 of a 4-row tile 32, 64 and 96 bytes off their sources' lines) made each async copy
    // of a misplaced row two L2 requests per line: (32768, 8192) fp32, column pass at primitives/2
    // 0.2427-0.2428 -> 0.2416-0.2422 ms, primitives/3 0.3035-0.3051 -> 0.2382-0.2388, tma/2
    // 0.2422-0.2428 -> 0.2395-0.2398 (H200, twentieth run, scripts/probe_reduce_cols.cu).
    pl.pitch = chunk_bytes;
    pl.base = static_cast<int>(reinterpret_cast<uintptr_t>(p.x) & 127u);
  } else {
    // 32 bytes of slack: up to 15 for a row's shift, 16 for the zero-filled tail chunk.
    pl.pitch = chunk_bytes + 32;
    pl.base = 0;
  }
  pl.stage_bytes = pl.tile_rows * pl.pitch + (pl.base != 0 ? 128 : 0);
  return pl;
}

inline int acc_size(const ReduceParams& p) { return p.in_dtype == DType::F64 ? 8 : 4; }

inline int64_t max_target_blocks(const ReduceParams& p, const DeviceInfo& dev) {
  return std::max<int64_t>(p.blocks, static_cast<int64_t>(dev.num_sms) * kMaxBlocksPerSm);
}
// The blocks a plan aims at: one wave of resident blocks unless the caller asks otherwise.
inline int64_t target_blocks(const ReduceParams& p, int64_t resident) { return p.blocks > 0 ? p.blocks : resident; }

inline int64_t partial_count(const ReduceParams& p, const DeviceInfo& dev) {
  const int esz = dtype_size(p.in_dtype);
  if (p.inner == 1) {
    const RowsPlan pl = make_rows_plan(p, esz, rows_tile_bytes(p, dev), max_target_blocks(p, dev));
    return pl.parts > 1 ? p.outer * pl.parts : 0;  // split or chunked
  }
  const ColsPlan pl = make_cols_plan(p, dev, esz, max_target_blocks(p, dev));
  return pl.parts > 1 ? pl.parts * p.outer * p.inner : 0;
}

template <engine::Mechanism M, int S, typename T>
void launch_reduce_typed(const ReduceParams& p) {
  using A = acc_t<T>;
  const DeviceInfo dev = device_info(current_device());
  const cudaStream_t stream = reinterpret_cast<cudaStream_t>(p.stream);
  A* partials = static_cast<A*>(p.workspace);
  constexpr int esz = sizeof(T);
  int64_t nout = p.outer * p.inner, parts = 1, stride_out = 1, stride_part = 1;
  if (p.inner == 1) {
    auto kernel = reduce_rows_kernel<M, S, T>;
    const int tile_bytes = rows_tile_bytes(p, dev);
    const size_t smem = static_cast<size_t>(S) * (tile_bytes + 32);
    prepare_smem(kernel, smem, "reduce");
    const int64_t resident = static_cast<int64_t>(dev.num_sms) * blocks_per_sm(kernel, kReduceThreads, smem);
    RowsPlan pl = make_rows_plan(p, esz, tile_bytes, target_blocks(p, resident));
    if (pl.wide) {
      auto wide = pl.parts > 1 ? reduce_wide_rows_kernel<M, T, true> : reduce_wide_rows_kernel<M, T, false>;
      const size_t wide_smem = static_cast<size_t>(pl.tile_elems) * esz + 32;
      prepare_smem(wide, wide_smem, "reduce");
      if (pl.ntiles > 0x7fffffff) throw std::runtime_error("reduce: too many rows for one launch");
      if (pl.ntiles == 0) return;  // no rows, no outputs
      wide<<<static_cast<unsigned>(pl.ntiles), kReduceThreads, wide_smem, stream>>>(
          static_cast<const T*>(p.x), p.out, p.out_dtype, partials, pl, p.op);
      CUPIPE_LAUNCH_CHECK();
    } else {
      int64_t grid;
      if (pl.rows_per_tile > 0) {
        grid = std::max<int64_t>(1, std::min<int64_t>(pl.ntiles, target_blocks(p, resident)));
        set_rows_grid(pl, grid);
      } else {
        grid = p.outer * pl.parts;
      }
      if (grid > 0x7fffffff) throw std::runtime_error("reduce: too many rows for one launch");
      kernel<<<static_cast<unsigned>(std::max<int64_t>(grid, 1)), kReduceThreads, smem, stream>>>(
          static_cast<const T*>(p.x), p.out, p.out_dtype, partials, pl, p.op);
      CUPIPE_LAUNCH_CHECK();
    }
    parts = pl.parts; stride_out = pl.parts; stride_part = 1;  // (parts == 1: no partials)
  } else {
    auto kernel = reduce_cols_kernel<M, S, T>;
    const ColsPlan shape = make_cols_plan(p, dev, esz, 1);  // tile geometry; the split needs `resident`
    const size_t smem = static_cast<size_t>(S) * shape.stage_bytes;
    prepare_smem(kernel, smem, "reduce");
    const int64_t resident = static_cast<int64_t>(dev.num_sms) * blocks_per_sm(kernel, kReduceThreads, smem);
    const ColsPlan pl = make_cols_plan(p, dev, esz, target_blocks(p, resident));
    const int64_t grid = p.outer * pl.col_chunks * pl.parts;
    if (grid > 0x7fffffff) throw std::runtime_error("reduce: too many column blocks for one launch");
    kernel<<<static_cast<unsigned>(std::max<int64_t>(grid, 1)), kReduceThreads, smem, stream>>>(
        static_cast<const T*>(p.x), p.out, p.out_dtype, partials, pl, p.op);
    CUPIPE_LAUNCH_CHECK();
    parts = pl.parts; stride_out = 1; stride_part = nout;
  }
  const bool dependent = dev.code_sm >= 90;  // griddepcontrol is in the kernels' code
  if (parts > 1 && nout < dev.num_sms) {
    launch_dependent(reduce_partials_block_kernel<A>, dim3(static_cast<unsigned>(nout)), dim3(kPartialsBlockThreads), 0,
                     stream, dependent, static_cast<const A*>(partials), p.out, p.out_dtype, parts, stride_out,
                     stride_part, p.op, p.r);
  } else if (parts > 1 && stride_out == 1) {
    int slices_log2 = 0;  // about 8-16 partials per thread, up to eight threads per output
    while (slices_log2 < 3 && (int64_t(16) << slices_log2) < parts) ++slices_log2;
    const int64_t blocks = ceil_div(nout << slices_log2, kColPartialsThreads);
    if (blocks > 0x7fffffff) throw std::runtime_error("reduce: too many outputs for the partials pass");
    launch_dependent(reduce_col_partials_kernel<A>, dim3(static_cast<unsigned>(blocks)), dim3(kColPartialsThreads), 0,
                     stream, dependent, static_cast<const A*>(partials), p.out, p.out_dtype, nout, parts, p.op, p.r,
                     slices_log2);
  } else if (parts > 1) {
    int lanes_log2 = 0;  // about 4 partials per lane, up to a warp per output
    while (lanes_log2 < 5 && (int64_t(4) << lanes_log2) < parts) ++lanes_log2;
    const int64_t blocks = ceil_div(nout << lanes_log2, 256);
    if (blocks > 0x7fffffff) throw std::runtime_error("reduce: too many outputs for the partials pass");
    launch_dependent(reduce_partials_kernel<A>, dim3(static_cast<unsigned>(blocks)), dim3(256), 0, stream, dependent,
                     static_cast<const A*>(partials), p.out, p.out_dtype, nout, parts, stride_out, stride_part, p.op,
                     p.r, lanes_log2);
  }
}

template <engine::Mechanism M>
void launch_reduce_mechanism(const ReduceParams& p) {
  dispatch_stages(p.stages, [&](auto s) {
    constexpr int S = decltype(s)::value;
    dispatch_dtype(p.in_dtype, [&](auto tv) { launch_reduce_typed<M, S, decltype(tv)>(p); });
  });
}

}  // namespace kernels
}  // namespace cupipe
