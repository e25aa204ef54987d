// The partials pass of a split reduction: kernels that combine each output's partials from the
// workspace in a fixed order. A block per output (few outputs, many partials), a lane group per
// output (rows' [out][part] partials), or slices of a block per output (columns' [part][out]).
#pragma once

#include <cstdint>

#include "engine/engine.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/reduce/combine.cuh"

namespace cupipe {
namespace kernels {

// Folds src[p * stride] for p = first, first + step, ... below n into acc in that order, issuing
// kBatch loads before folding them: the partials sit in L2, a few hundred cycles away, and a loop
// that waits on each load in turn (what the compiler made of a plain unrolled loop with a
// run-time op) made the partials pass several times slower (docs/design.md).
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
// flight at a time per lane), then a fixed shuffle tree. (A thread per output folding one load
// after another was far slower: docs/design.md.)
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
// are 128 consecutive bytes of one part's row, where reduce_partials_kernel's lanes (a warp per
// output) load 32 parts apart: a faster pass over column partials (docs/design.md).
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

}  // namespace kernels
}  // namespace cupipe
