// Pipelined reductions of a contiguous (outer, r, inner) view over r, on the engine.
//
//   rows  (inner == 1):  short rows are packed several to a tile and reduced by lane groups of
//                        2..32 threads with shuffles; long rows are split into `parts`, one block
//                        streaming each part's tiles through the ring.
//   cols  (inner > 1):   a tile is kColTileRows row segments of kColTileCols contiguous columns;
//                        each thread owns one column of a row group; row groups combine in smem.
//
// Determinism: every partial is combined in a fixed order (per-thread sequential, then fixed
// shuffle / smem trees); a row split into several parts writes its partials to the workspace
// and a second kernel combines them in order. No floating-point atomics anywhere.
#pragma once

#include <algorithm>
#include <cmath>

#include "engine/engine.cuh"
#include "kernels/launch_utils.cuh"
#include "kernels/numeric.cuh"

namespace cupipe {
namespace kernels {

constexpr int kReduceThreads = 256;
constexpr int kReduceTileBytes = 8192;
constexpr int kColTileCols = 32;
constexpr int kColTileRows = 64;

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

// Reduces `v` over the whole block in a fixed order; the result is valid in thread 0.
template <typename A>
__device__ A block_combine(A v, Combine<A> comb, A* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = comb(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  A r = comb.init();
  if (threadIdx.x == 0)
    for (int w = 0; w < nwarps; ++w) r = comb(r, scratch[w]);
  return r;
}

struct RowsPlan {
  int64_t outer, r;
  int rows_per_tile;   // > 0: packed mode
  int group;           // lanes per row in packed mode (power of two <= 32)
  int64_t parts;       // split mode: parts per row
  int64_t part_len;    // elements per part (a multiple of the tile's elements)
  int tile_elems;
};

// ---------------------------------------------------------------------------------- rows
template <engine::Mechanism M, int S, typename T>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_rows_kernel(const T* __restrict__ x, void* out, DType od, acc_t<T>* partials, RowsPlan pl,
                       ReduceOp op) {
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

  if (pl.rows_per_tile > 0) {
    // Packed: block-strided tiles of rows_per_tile whole rows.
    const int64_t ntiles = (pl.outer + pl.rows_per_tile - 1) / pl.rows_per_tile;
    const int64_t mine = blockIdx.x < ntiles ? (ntiles - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
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
      const int G = pl.group, ngroups = team.size / G, gi = team.rank / G, lane = team.rank % G;
      // Every lane of a group runs the same trip count, so the shuffles below are uniform.
      for (int rr = gi; rr - gi < nrows; rr += ngroups) {
        const bool live = rr < nrows && gi < ngroups;
        A acc = comb.init();
        if (live) {
          const T* row = tile + static_cast<int64_t>(rr) * pl.r;
          for (int64_t e = lane; e < pl.r; e += G) acc = comb(acc, to_acc<A>(row[e]));
        }
        for (int o = G / 2; o > 0; o >>= 1) {
          const A other = __shfl_xor_sync(0xffffffffu, acc, o, G);
          acc = comb(acc, other);
        }
        if (live && lane == 0) store_out(out, od, row0 + rr, finalize(op, acc, pl.r));
      }
    };
    engine::run_ring(ring, mine, load, consume);
    return;
  }

  // Split: block = one (row, part); its tiles stream through the ring.
  const int64_t row = blockIdx.x / pl.parts, part = blockIdx.x % pl.parts;
  const int64_t begin = part * pl.part_len;
  const int64_t end = min(begin + pl.part_len, pl.r);
  const int64_t n = end > begin ? end - begin : 0;
  const int64_t ntiles = (n + pl.tile_elems - 1) / pl.tile_elems;
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
    for (int e = team.rank; e < cnt; e += team.size) acc = comb(acc, to_acc<A>(tile[e]));
  };
  engine::run_ring(ring, ntiles, load, consume);
  const A total = block_combine(acc, comb, scratch);
  if (threadIdx.x == 0) {
    if (pl.parts == 1) store_out(out, od, row, finalize(op, total, pl.r));
    else partials[row * pl.parts + part] = total;
  }
}

// ---------------------------------------------------------------------------------- columns
struct ColsPlan {
  int64_t outer, r, inner;
  int64_t col_chunks;  // ceil(inner / kColTileCols)
  int64_t parts;       // parts of r
  int64_t part_rows;   // rows per part (multiple of kColTileRows)
  int pitch;           // smem bytes per tile row
};

template <engine::Mechanism M, int S, typename T>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_cols_kernel(const T* __restrict__ x, void* out, DType od, acc_t<T>* partials, ColsPlan pl,
                       ReduceOp op) {
  using A = acc_t<T>;
  using Ring = engine::Ring<M, S, 16>;
  constexpr int esz = sizeof(T);
  extern __shared__ __align__(engine::kStageAlign) char smem[];
  __shared__ engine::RawShared<typename Ring::SharedState> ss;
  __shared__ A scratch[kReduceThreads];
  Ring ring(ss.get(), smem, kColTileRows * pl.pitch);
  const Combine<A> comb{op};

  int64_t b = blockIdx.x;
  const int64_t part = b % pl.parts; b /= pl.parts;
  const int64_t chunk = b % pl.col_chunks;
  const int64_t o = b / pl.col_chunks;
  const int64_t c0 = chunk * kColTileCols;
  const int ncols = static_cast<int>(min(static_cast<int64_t>(kColTileCols), pl.inner - c0));
  const int64_t r_begin = part * pl.part_rows;
  const int64_t r_end = min(r_begin + pl.part_rows, pl.r);
  const int64_t nrows = r_end > r_begin ? r_end - r_begin : 0;
  const int64_t ntiles = (nrows + kColTileRows - 1) / kColTileRows;
  const T* base = x + (o * pl.r + r_begin) * pl.inner + c0;
  auto shift_of = [](const T* p) { return static_cast<int>(reinterpret_cast<uintptr_t>(p) & 15u); };

  A acc = comb.init();
  const engine::Team team0{Ring::consumer_rank(), Ring::num_consumers()};
  const int groups = team0.size / kColTileCols;  // row groups
  const int my_col = team0.rank % kColTileCols, my_group = team0.rank / kColTileCols;
  auto load = [&](const auto& w, int64_t k) {
    const int rows = static_cast<int>(min(static_cast<int64_t>(kColTileRows), nrows - k * kColTileRows));
    for (int i = 0; i < rows; ++i) {
      const T* src = base + (k * kColTileRows + i) * pl.inner;
      w.copy(static_cast<int64_t>(i) * pl.pitch + shift_of(src), src, static_cast<int64_t>(ncols) * esz,
             engine::TailMode::MayOverwrite);
    }
  };
  auto consume = [&](const char* stage, int64_t k, engine::Team team) {
    if (my_group >= groups || my_col >= ncols || team.rank < 0) return;
    const int rows = static_cast<int>(min(static_cast<int64_t>(kColTileRows), nrows - k * kColTileRows));
    for (int i = my_group; i < rows; i += groups) {
      const T* src = base + (k * kColTileRows + i) * pl.inner;
      const T* srow = reinterpret_cast<const T*>(stage + static_cast<int64_t>(i) * pl.pitch + shift_of(src));
      acc = comb(acc, to_acc<A>(srow[my_col]));
    }
  };
  engine::run_ring(ring, ntiles, load, consume);

  // Combine the row groups of each column in a fixed order.
  __syncthreads();
  const bool owner = Ring::is_consumer() && my_group < groups;
  if (owner) scratch[my_group * kColTileCols + my_col] = acc;
  __syncthreads();
  if (owner && my_group == 0 && my_col < ncols) {
    A total = comb.init();
    for (int g = 0; g < groups; ++g) total = comb(total, scratch[g * kColTileCols + my_col]);
    const int64_t oi = o * pl.inner + c0 + my_col;
    if (pl.parts == 1) store_out(out, od, oi, finalize(op, total, pl.r));
    else partials[part * pl.outer * pl.inner + oi] = total;
  }
}

// Combines `parts` partials per output in order: partials laid out [out][part] (stride_part = 1,
// stride_out = parts) for rows, [part][out] for columns.
template <typename A>
__global__ void reduce_partials_kernel(const A* __restrict__ partials, void* out, DType od, int64_t nout,
                                       int64_t parts, int64_t stride_out, int64_t stride_part, ReduceOp op,
                                       int64_t r) {
  const Combine<A> comb{op};
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < nout;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    A acc = comb.init();
    for (int64_t p = 0; p < parts; ++p) acc = comb(acc, partials[i * stride_out + p * stride_part]);
    store_out(out, od, i, finalize(op, acc, r));
  }
}


inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline RowsPlan make_rows_plan(const ReduceParams& p, int esz, const DeviceInfo& dev) {
  RowsPlan pl{};
  pl.outer = p.outer;
  pl.r = p.r;
  pl.tile_elems = kReduceTileBytes / esz;
  if (p.r <= pl.tile_elems) {
    pl.rows_per_tile = static_cast<int>(p.r > 0 ? pl.tile_elems / p.r : pl.tile_elems);
    int g = 1;
    while (g < 32 && g * 4 < p.r) g *= 2;  // about 4 elements per lane
    pl.group = g;
    pl.parts = 1;
  } else {
    pl.rows_per_tile = 0;
    const int64_t target = static_cast<int64_t>(dev.num_sms) * 8;
    int64_t parts = ceil_div(target, p.outer);
    parts = std::min(parts, std::max<int64_t>(1, ceil_div(p.r, 4 * static_cast<int64_t>(pl.tile_elems))));
    pl.parts = std::max<int64_t>(parts, 1);
    pl.part_len = ceil_div(ceil_div(p.r, pl.parts), pl.tile_elems) * pl.tile_elems;
    pl.parts = ceil_div(p.r, pl.part_len);
  }
  return pl;
}

inline ColsPlan make_cols_plan(const ReduceParams& p, int esz, const DeviceInfo& dev) {
  ColsPlan pl{};
  pl.outer = p.outer;
  pl.r = p.r;
  pl.inner = p.inner;
  pl.col_chunks = ceil_div(p.inner, kColTileCols);
  const int64_t work = p.outer * pl.col_chunks;
  const int64_t target = static_cast<int64_t>(dev.num_sms) * 8;
  int64_t parts = ceil_div(target, work);
  parts = std::min(parts, std::max<int64_t>(1, ceil_div(p.r, 4 * kColTileRows)));
  parts = std::max<int64_t>(parts, 1);
  pl.part_rows = std::max<int64_t>(1, ceil_div(ceil_div(p.r, parts), kColTileRows)) * kColTileRows;
  pl.parts = std::max<int64_t>(1, ceil_div(p.r, pl.part_rows));
  pl.pitch = static_cast<int>(engine::align_up(static_cast<int64_t>(kColTileCols) * esz + 32, 16));
  return pl;
}

inline int acc_size(const ReduceParams& p) { return p.in_dtype == DType::F64 ? 8 : 4; }

inline int64_t partial_count(const ReduceParams& p, const DeviceInfo& dev) {
  const int esz = dtype_size(p.in_dtype);
  if (p.inner == 1) {
    const RowsPlan pl = make_rows_plan(p, esz, dev);
    return pl.rows_per_tile == 0 && pl.parts > 1 ? p.outer * pl.parts : 0;
  }
  const ColsPlan pl = make_cols_plan(p, esz, dev);
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
    const RowsPlan pl = make_rows_plan(p, esz, dev);
    auto kernel = reduce_rows_kernel<M, S, T>;
    const size_t smem = static_cast<size_t>(S) * (pl.tile_elems * esz + 32);
    prepare_smem(kernel, smem, "reduce");
    int64_t grid;
    if (pl.rows_per_tile > 0) {
      const int64_t ntiles = ceil_div(p.outer, pl.rows_per_tile);
      grid = std::min<int64_t>(ntiles, static_cast<int64_t>(dev.num_sms) * blocks_per_sm(kernel, kReduceThreads, smem));
    } else {
      grid = p.outer * pl.parts;
      parts = pl.parts; stride_out = pl.parts; stride_part = 1;
    }
    if (grid > 0x7fffffff) throw std::runtime_error("reduce: too many rows for one launch");
    kernel<<<static_cast<unsigned>(std::max<int64_t>(grid, 1)), kReduceThreads, smem, stream>>>(
        static_cast<const T*>(p.x), p.out, p.out_dtype, partials, pl, p.op);
    CUPIPE_LAUNCH_CHECK();
  } else {
    const ColsPlan pl = make_cols_plan(p, esz, dev);
    auto kernel = reduce_cols_kernel<M, S, T>;
    const size_t smem = static_cast<size_t>(S) * kColTileRows * pl.pitch;
    prepare_smem(kernel, smem, "reduce");
    const int64_t grid = p.outer * pl.col_chunks * pl.parts;
    if (grid > 0x7fffffff) throw std::runtime_error("reduce: too many column blocks for one launch");
    kernel<<<static_cast<unsigned>(std::max<int64_t>(grid, 1)), kReduceThreads, smem, stream>>>(
        static_cast<const T*>(p.x), p.out, p.out_dtype, partials, pl, p.op);
    CUPIPE_LAUNCH_CHECK();
    parts = pl.parts; stride_out = 1; stride_part = nout;
  }
  if (parts > 1) {
    const int64_t blocks = std::min<int64_t>(ceil_div(nout, 256), 65535);
    reduce_partials_kernel<A><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
        partials, p.out, p.out_dtype, nout, parts, stride_out, stride_part, p.op, p.r);
    CUPIPE_LAUNCH_CHECK();
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
