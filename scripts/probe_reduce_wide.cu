// A bisection of the (4096, 4096) fp32 row sum: from one bulk copy per row staged through shared
// memory without the engine (A) to reduce_wide_rows_kernel and its launcher (E, F), one difference
// at a time: dynamic shared memory (B), the engine's ring with the staged kernel's hard-wired fold
// (C), the rows plan's run-time geometry for the copy and/or the fold (S, D), and the kernel's first
// version (trip count after the wait) with the op at compile time (E2). Each result is checked
// against a per-row double sum. Added in the thirty-third run: the wide kernel's consume with its
// loads batched and its row combine for one row per tile unrolled (V), a wide kernel for tiles of
// exactly four vectors a thread and its bisection toward C (X, X1-X4), staging in which each thread
// folds only what it copied (P), and no staging at all, loads straight to registers as a generated
// reduction does (R); results in docs/perf_notes.md, thirty-third run. Three rounds, median of
// `reps` queued launches each (H200 numbers: BENCHMARKS.md, eighteenth run; D and E2 ran there as
// kernels of their own, merged into k_split since with the same code).
//   nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Icsrc -Iscripts -o /tmp/probe_wide \
//       scripts/probe_reduce_wide.cu csrc/kernels/device_info.cu && /tmp/probe_wide [reps = 200]
#include <cuda_bf16.h>
#include <cstdio>
#include <functional>
#include "kernels/reduce.cuh"
#include "probe_common.cuh"
using namespace cupipe;
using namespace cupipe::kernels;
namespace sm90 = engine::sm90;

__global__ void fill_random(float* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = 1.0f + static_cast<float>(h & 0xffffu) / 65536.0f;
  }
}
__global__ void check_rows(const float* x, int64_t outer, int64_t r, const float* got, unsigned long long* bad) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < outer; i += int64_t(gridDim.x) * blockDim.x) {
    double t = 0;
    for (int64_t j = 0; j < r; ++j) t += x[i * r + j];
    if (!(fabs(got[i] - t) <= 1e-5 * fabs(t))) atomicAdd(bad, 1ull);
  }
}

__device__ __forceinline__ void staged_sum(const float4* buf, float* ws, float* out, int64_t row) {
  float v = 0.f;
#pragma unroll
  for (int k = 0; k < 4; ++k) { const float4 a = buf[threadIdx.x + k * 256]; v += (a.x + a.y) + (a.z + a.w); }
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) ws[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) { float t = 0.f; for (int w = 0; w < 8; ++w) t += ws[w]; out[row] = t; }
}

// A: static smem, one mbarrier, one arrival (the probe's staged kernel)
template <bool Dyn>
__global__ void __launch_bounds__(256) k_staged(const float* x, float* out) {
  __shared__ alignas(128) float4 sbuf[Dyn ? 1 : 1024];
  extern __shared__ __align__(128) float4 dbuf[];
  float4* buf = Dyn ? dbuf : sbuf;
  __shared__ uint64_t bar;
  __shared__ float ws[8];
  if (threadIdx.x == 0) { sm90::mbarrier_init(&bar, 1); sm90::fence_barrier_init(); }
  __syncthreads();
  if (threadIdx.x == 0) {
    sm90::mbarrier_expect_tx(&bar, 16384);
    sm90::bulk_copy_g2s(buf, x + int64_t(blockIdx.x) * 4096, 16384, &bar);
    sm90::mbarrier_arrive(&bar);
  }
  sm90::mbarrier_wait_parity(&bar, 0);
  staged_sum(buf, ws, out, blockIdx.x);
}

// C: the engine's ring (any mechanism), copy_aligned, the staged consume
template <engine::Mechanism M>
__global__ void __launch_bounds__(256, 8) k_ring(const float* x, float* out) {
  using Ring = engine::Ring<M, 1, 16>;
  extern __shared__ __align__(engine::kStageAlign) char smem[];
  __shared__ engine::RawShared<typename Ring::SharedState> ss;
  __shared__ float ws[8];
  Ring ring(ss.get(), smem, 16384 + 32);
  auto load = [&](const auto& w, int64_t) { w.copy_aligned(0, x + int64_t(blockIdx.x) * 4096, 16384); };
  auto consume = [&](const char* stage, int64_t, engine::Team) {
    staged_sum(reinterpret_cast<const float4*>(stage), ws, out, blockIdx.x);
  };
  engine::run_ring(ring, 1, load, consume);
}

// The rows plan's consume of one tile with the op fixed at compile time: each row's group folds
// its vectors (fold_vectors: the trip count worked out after the wait, as the wide kernel's first
// version did), shuffles, and the row's warps combine in order; store(row, value) writes a row.
template <ReduceOp Op, class Store>
__device__ __forceinline__ void plan_consume(const char* stage, engine::Team team, const RowsPlan& pl, int nrows,
                                             float* scratch, Store&& store) {
  const int G = pl.group, row = team.rank >> pl.group_log2, r = static_cast<int>(pl.r);
  const Combine<float> comb{Op};
  StaticCombine<float, Op> sc;
  float acc = comb.init();
  if (row < nrows) fold_vectors<float>(reinterpret_cast<const float*>(stage) + row * r, r / 4, team.rank & (G - 1), G, acc, sc);
  for (int o = 16; o > 0; o >>= 1) acc = sc(acc, __shfl_xor_sync(0xffffffffu, acc, o));
  if ((team.rank & 31) == 0) scratch[team.rank >> 5] = acc;
  engine::team_sync(team);
  if (team.rank < nrows) {
    const int wpr = G >> 5;
    float t = scratch[team.rank * wpr];
    for (int w = 1; w < wpr; ++w) t = sc(t, scratch[team.rank * wpr + w]);
    store(team.rank, t);
  }
}

// S, D and E2: LoadPlan = the plan's row geometry for the copy (else C's constant one);
// ConsumePlan = plan_consume with op Op (else C's staged consume); StoreOut = the result through
// store_out and finalize (the kernel's store; else a float store). D is <true, true>; E2, the wide
// kernel's first version with the op fixed at compile time, is <true, true, Sum, true>.
template <bool LoadPlan, bool ConsumePlan, ReduceOp Op = ReduceOp::Sum, bool StoreOut = false>
__global__ void __launch_bounds__(256, 8) k_split(const float* x, void* out, DType od, RowsPlan pl) {
  using Ring = engine::Ring<engine::Mechanism::Tma, 1, 16>;
  extern __shared__ __align__(engine::kStageAlign) char smem[];
  __shared__ engine::RawShared<typename Ring::SharedState> ss;
  __shared__ float scratch[8];
  Ring ring(ss.get(), smem, pl.tile_elems * 4 + 32);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * pl.rows_per_tile;
  const int nrows = static_cast<int>(min(static_cast<int64_t>(pl.rows_per_tile), pl.outer - row0));
  const int r = static_cast<int>(pl.r);
  float* fout = static_cast<float*>(out);
  auto load = [&](const auto& w, int64_t) {
    if (LoadPlan) w.copy_aligned(0, x + row0 * r, static_cast<int64_t>(nrows) * r * 4);
    else w.copy_aligned(0, x + int64_t(blockIdx.x) * 4096, 16384);
  };
  auto consume = [&](const char* stage, int64_t, engine::Team team) {
    if (!ConsumePlan) { staged_sum(reinterpret_cast<const float4*>(stage), scratch, fout, blockIdx.x); return; }
    plan_consume<Op>(stage, team, pl, nrows, scratch, [&](int i, float v) {
      if (StoreOut) store_out(out, od, row0 + i, finalize(Op, v, pl.r));
      else fout[row0 + i] = v;
    });
  };
  engine::run_ring(ring, LoadPlan ? (nrows > 0 ? 1 : 0) : 1, load, consume);
}

// V: reduce_wide_rows_kernel (packed rows) with its fold loop replaced. VPT > 0: the loads of a
// thread's vectors (at most VPT of them) issued together, each behind k < count, then folded in
// the loop's order (the same sums, bit for bit; Tree: one accumulator per vector component, another
// order); the kernel's loop is a run-time trip count with `#pragma unroll 4`. Lean: the row's
// combine and store for one row per tile (no wpr loop, no dtype switch). What the consume's run-time geometry costs (D against C above) is the question.
template <int VPT, bool Lean, bool Tree = false>
__global__ void __launch_bounds__(256, 8) k_wide_var(const float* __restrict__ x, void* out, DType od, RowsPlan pl, ReduceOp op) {
  using Ring = engine::Ring<engine::Mechanism::Tma, 1, 16>;
  extern __shared__ __align__(engine::kStageAlign) char smem[];
  __shared__ engine::RawShared<typename Ring::SharedState> ss;
  __shared__ float scratch[8];
  Ring ring(ss.get(), smem, pl.tile_elems * 4 + 32);
  const unsigned b = blockIdx.x;
  const float* src = x + static_cast<int64_t>(b) * pl.tile_elems;
  const int nrows = b + 1 == gridDim.x ? pl.last_rows : pl.rows_per_tile;
  const int nvec = static_cast<int>(pl.r) / 4;
  auto load = [&](const auto& w, int64_t) { w.copy_aligned(0, src, nrows * nvec * 16); };
  int row = 0, first = 0, count = 0;
  auto ready = [&] {
    const int rank = Ring::consumer_rank();
    row = rank >> pl.group_log2;
    first = rank & (pl.group - 1);
    count = row < nrows && first < nvec ? ((nvec - 1 - first) >> pl.group_log2) + 1 : 0;
  };
  auto consume = [&](const char* stage, int64_t, engine::Team team) {
    const Combine<float> comb{op};
    const uint4* u = reinterpret_cast<const uint4*>(stage) + row * nvec + first;
    float acc = comb.init();
    with_static_combine<float>(op, [&](auto sc) {
      // One vector into a[0] (spread 0: one chain) or its components into a[0..3] (spread 1).
      auto fold_one = [&](const uint4& q, float* a, int spread) {
        float e[4];
        unpack16<float>(q, e);
#pragma unroll
        for (int j = 0; j < 4; ++j) a[j * spread] = sc(a[j * spread], e[j]);
      };
      if constexpr (VPT > 0) {
        uint4 v[VPT];
#pragma unroll
        for (int k = 0; k < VPT; ++k)
          if (k < count) v[k] = u[k << pl.group_log2];
        float a4[4] = {acc, acc, acc, acc};  // Tree: one accumulator per vector component
#pragma unroll
        for (int k = 0; k < VPT; ++k)
          if (k < count) fold_one(v[k], Tree ? a4 : &acc, Tree ? 1 : 0);
        if (Tree) acc = sc(sc(a4[0], a4[1]), sc(a4[2], a4[3]));
      } else {
#pragma unroll 4
        for (int k = 0; k < count; ++k) fold_one(u[k << pl.group_log2], &acc, 0);
      }
      for (int o = 16; o > 0; o >>= 1) acc = sc(acc, __shfl_xor_sync(0xffffffffu, acc, o));
    });
    if ((team.rank & 31) == 0) scratch[team.rank >> 5] = acc;
    engine::team_sync(team);
    if constexpr (Lean) {
      if (team.rank == 0) {
        float t = scratch[0];
#pragma unroll
        for (int w = 1; w < 8; ++w) t = comb(t, scratch[w]);
        static_cast<float*>(out)[b] = t;
      }
    } else if (team.rank < nrows) {
      const int wpr = pl.group >> 5;
      float total = scratch[team.rank * wpr];
      for (int w = 1; w < wpr; ++w) total = comb(total, scratch[team.rank * wpr + w]);
      store_out(out, od, static_cast<int64_t>(b) * pl.rows_per_tile + team.rank, finalize(op, total, pl.r));
    }
  };
  engine::run_ring(ring, 1, load, consume, ready);
}

// R: no staging, what a generated reduction does: a block per row, each thread's four 16-byte
// loads straight to registers, the same combine as A.
__global__ void __launch_bounds__(256, 8) k_regs(const float* __restrict__ x, float* out) {
  const float4* row = reinterpret_cast<const float4*>(x + int64_t(blockIdx.x) * 4096);
  __shared__ float ws[8];
  float4 a[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) a[k] = __ldg(row + threadIdx.x + k * 256);
  float v = 0.f;
#pragma unroll
  for (int k = 0; k < 4; ++k) v += (a[k].x + a[k].y) + (a[k].z + a[k].w);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) ws[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) { float t = 0.f; for (int w = 0; w < 8; ++w) t += ws[w]; out[blockIdx.x] = t; }
}

// X: the wide kernel for tiles in which every thread folds exactly four vectors (rows of
// 4 G vectors, G = 256 / rows_per_tile lanes each: rows of 4, 8 and 16 KiB), everything the fold
// needs worked out before the wait: its four loads unpredicated at a run-time stride, one `live`
// predicate (rows past the last tile's), the row's warps combined unrolled to eight.
// Its bisection toward C: StaticOp (the op a template argument everywhere, not only in the fold),
// ConstLoad (C's copy: a constant size and tile), PlainStore (a float store, no dtype switch).
template <bool StaticOp = false, bool ConstLoad = false, bool PlainStore = false>
__global__ void __launch_bounds__(256, 8) k_exact(const float* __restrict__ x, void* out, DType od, RowsPlan pl, ReduceOp op_) {
  const ReduceOp op = StaticOp ? ReduceOp::Sum : op_;
  using Ring = engine::Ring<engine::Mechanism::Tma, 1, 16>;
  extern __shared__ __align__(engine::kStageAlign) char smem[];
  __shared__ engine::RawShared<typename Ring::SharedState> ss;
  __shared__ alignas(16) float scratch[8];
  Ring ring(ss.get(), smem, pl.tile_elems * 4 + 32);
  const unsigned b = blockIdx.x;
  const int nrows = b + 1 == gridDim.x ? pl.last_rows : pl.rows_per_tile;
  const int lg = pl.group_log2;
  auto load = [&](const auto& w, int64_t) {
    if (ConstLoad) w.copy_aligned(0, x + int64_t(b) * 4096, 16384);
    else w.copy_aligned(0, x + static_cast<int64_t>(b) * pl.tile_elems, nrows << (lg + 6));  // 4 G vectors a row
  };
  int row = 0, off = 0;
  auto ready = [&] {
    const int rank = Ring::consumer_rank();
    row = rank >> lg;
    off = (row << (lg + 2)) + (rank & ((1 << lg) - 1));
  };
  auto consume = [&](const char* stage, int64_t, engine::Team team) {
    const Combine<float> comb{op};
    const uint4* u = reinterpret_cast<const uint4*>(stage) + off;
    float acc = comb.init();
    if (row < nrows) {
      uint4 v[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) v[k] = u[k << lg];
      with_static_combine<float>(op, [&](auto sc) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          float e[4];
          unpack16<float>(v[k], e);
#pragma unroll
          for (int j = 0; j < 4; ++j) acc = sc(acc, e[j]);
        }
      });
    }
    for (int o = 16; o > 0; o >>= 1) acc = comb(acc, __shfl_xor_sync(0xffffffffu, acc, o));
    if ((team.rank & 31) == 0) scratch[team.rank >> 5] = acc;
    engine::team_sync(team);
    if (team.rank < nrows) {
      const int wpr = 1 << (lg - 5);
      float total = scratch[team.rank * wpr];
#pragma unroll
      for (int w = 1; w < 8; ++w)
        if (w < wpr) total = comb(total, scratch[team.rank * wpr + w]);
      if (PlainStore) static_cast<float*>(out)[static_cast<int64_t>(b) * pl.rows_per_tile + team.rank] = total;
      else store_out(out, od, static_cast<int64_t>(b) * pl.rows_per_tile + team.rank, finalize(op, total, pl.r));
    }
  };
  engine::run_ring(ring, 1, load, consume, ready);
}

// P: LDGSTS staging in which each thread reads back only the four vectors it copied itself, so
// its own wait_prior is the only wait (no block barrier between the copies and the fold); not
// something the engine's rings offer (their consumers may read any thread's bytes).
__global__ void __launch_bounds__(256, 8) k_private(const float* __restrict__ x, float* out) {
  extern __shared__ __align__(128) float4 pbuf[];
  __shared__ float ws[8];
  const float4* row = reinterpret_cast<const float4*>(x + int64_t(blockIdx.x) * 4096);
#pragma unroll
  for (int k = 0; k < 4; ++k) __pipeline_memcpy_async(pbuf + threadIdx.x + k * 256, row + threadIdx.x + k * 256, 16);
  __pipeline_commit();
  __pipeline_wait_prior(0);
  staged_sum(pbuf, ws, out, blockIdx.x);
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 200;
  const int64_t n = 4096 * 4096;
  float *x, *out;
  PROBE_CHECK(cudaMalloc(&x, n * 4));
  PROBE_CHECK(cudaMalloc(&out, 4096 * 4));
  fill_random<<<1024, 256>>>(x, n, 12345u);
  unsigned long long* nbad;
  PROBE_CHECK(cudaMalloc(&nbad, 8));
  ReduceParams p;
  p.x = x; p.out = out; p.in_dtype = DType::F32; p.out_dtype = DType::F32; p.outer = 4096; p.r = 4096; p.inner = 1;
  p.op = ReduceOp::Sum; p.mechanism = engine::Mechanism::Tma; p.stages = 1;
  const DeviceInfo dev = device_info(current_device());
  RowsPlan pl = make_rows_plan(p, 4, rows_tile_bytes(p, dev), 1056);
  std::printf("plan: wide %d rows_per_tile %d group %d tile_elems %d ntiles %lld\n", pl.wide, pl.rows_per_tile, pl.group,
              pl.tile_elems, (long long)pl.ntiles);
  const int dyn = 16384 + 32;
  PROBE_CHECK(cudaFuncSetAttribute(k_staged<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn));
  std::vector<std::pair<const char*, std::function<void()>>> vs;
  vs.push_back({"A staged, static smem", [&] { k_staged<false><<<4096, 256>>>(x, out); }});
  vs.push_back({"B staged, dynamic smem", [&] { k_staged<true><<<4096, 256, dyn>>>(x, out); }});
  vs.push_back({"C ring tma, staged consume", [&] { k_ring<engine::Mechanism::Tma><<<4096, 256, dyn>>>(x, out); }});
  vs.push_back({"C ring primitives, staged consume", [&] { k_ring<engine::Mechanism::Primitives><<<4096, 256, dyn>>>(x, out); }});
  vs.push_back({"D ring tma, plan + fold_vectors", [&] { k_split<true, true><<<4096, 256, dyn>>>(x, out, DType::F32, pl); }});
  vs.push_back({"S plan load, staged consume", [&] { k_split<true, false><<<4096, 256, dyn>>>(x, out, DType::F32, pl); }});
  vs.push_back({"S constant load, plan consume", [&] { k_split<false, true><<<4096, 256, dyn>>>(x, out, DType::F32, pl); }});
  vs.push_back({"E2 first wide kernel, op at compile time", [&] { k_split<true, true, ReduceOp::Sum, true><<<4096, 256, dyn>>>(x, out, DType::F32, pl); }});
  vs.push_back({"E reduce_wide_rows_kernel tma (kernel)", [&] { reduce_wide_rows_kernel<engine::Mechanism::Tma, float, false><<<4096, 256, dyn>>>(x, out, DType::F32, nullptr, pl, ReduceOp::Sum); }});
  vs.push_back({"E reduce_wide_rows_kernel primitives (kernel)", [&] { reduce_wide_rows_kernel<engine::Mechanism::Primitives, float, false><<<4096, 256, dyn>>>(x, out, DType::F32, nullptr, pl, ReduceOp::Sum); }});
  vs.push_back({"V loop (the kernel's fold, copied)", [&] { k_wide_var<0, false><<<4096, 256, dyn>>>(x, out, DType::F32, pl, ReduceOp::Sum); }});
  vs.push_back({"V loads together, VPT 4", [&] { k_wide_var<4, false><<<4096, 256, dyn>>>(x, out, DType::F32, pl, ReduceOp::Sum); }});
  vs.push_back({"V loop, lean store", [&] { k_wide_var<0, true><<<4096, 256, dyn>>>(x, out, DType::F32, pl, ReduceOp::Sum); }});
  vs.push_back({"V VPT 4, lean store", [&] { k_wide_var<4, true><<<4096, 256, dyn>>>(x, out, DType::F32, pl, ReduceOp::Sum); }});
  vs.push_back({"V VPT 4, lean store, tree fold", [&] { k_wide_var<4, true, true><<<4096, 256, dyn>>>(x, out, DType::F32, pl, ReduceOp::Sum); }});
  vs.push_back({"V VPT 4, tree fold", [&] { k_wide_var<4, false, true><<<4096, 256, dyn>>>(x, out, DType::F32, pl, ReduceOp::Sum); }});
  vs.push_back({"X exact four vectors a thread", [&] { k_exact<><<<4096, 256, dyn>>>(x, out, DType::F32, pl, ReduceOp::Sum); }});
  vs.push_back({"X1 + op at compile time", [&] { k_exact<true><<<4096, 256, dyn>>>(x, out, DType::F32, pl, ReduceOp::Sum); }});
  vs.push_back({"X2 + C's constant copy", [&] { k_exact<true, true><<<4096, 256, dyn>>>(x, out, DType::F32, pl, ReduceOp::Sum); }});
  vs.push_back({"X3 + float store", [&] { k_exact<true, true, true><<<4096, 256, dyn>>>(x, out, DType::F32, pl, ReduceOp::Sum); }});
  vs.push_back({"X4 op at compile time, float store", [&] { k_exact<true, false, true><<<4096, 256, dyn>>>(x, out, DType::F32, pl, ReduceOp::Sum); }});
  vs.push_back({"P LDGSTS, each thread its own vectors, no barrier", [&] { k_private<<<4096, 256, dyn>>>(x, out); }});
  vs.push_back({"R registers, no staging", [&] { k_regs<<<4096, 256>>>(x, out); }});
  vs.push_back({"F launch_reduce_typed tma/1 (host path)", [&] { launch_reduce_typed<engine::Mechanism::Tma, 1, float>(p); }});
  for (auto* k : {(const void*)k_ring<engine::Mechanism::Tma>, (const void*)k_ring<engine::Mechanism::Primitives>,
                  (const void*)k_split<true, true>, (const void*)k_split<true, false>, (const void*)k_split<false, true>,
                  (const void*)k_split<true, true, ReduceOp::Sum, true>,
                  (const void*)reduce_wide_rows_kernel<engine::Mechanism::Tma, float, false>,
                  (const void*)reduce_wide_rows_kernel<engine::Mechanism::Primitives, float, false>,
                  (const void*)k_wide_var<0, false>, (const void*)k_wide_var<4, false>,
                  (const void*)k_wide_var<0, true>, (const void*)k_wide_var<4, true>,
                  (const void*)k_wide_var<4, true, true>, (const void*)k_wide_var<4, false, true>, (const void*)k_private, (const void*)k_exact<>, (const void*)k_exact<true>,
                  (const void*)k_exact<true, true>, (const void*)k_exact<true, true, true>, (const void*)k_exact<true, false, true>})
    PROBE_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn));
  for (int round = 0; round < 3; ++round) {
    for (auto& v : vs) {
      PROBE_CHECK(cudaMemset(out, 0xff, 4096 * 4));
      const float ms = probe_median_ms(v.second, reps);
      unsigned long long h = 0;
      PROBE_CHECK(cudaMemset(nbad, 0, 8));
      check_rows<<<16, 256>>>(x, 4096, 4096, out, nbad);
      PROBE_CHECK(cudaMemcpy(&h, nbad, 8, cudaMemcpyDeviceToHost));
      std::printf("r%d %-48s %.4f ms%s\n", round, v.first, ms, h ? "  FAIL" : "");
    }
  }
  return 0;
}
