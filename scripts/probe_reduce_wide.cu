// A bisection of the (4096, 4096) fp32 row sum: from one bulk copy per row staged through shared
// memory without the engine (A) to reduce_wide_rows_kernel and its launcher (E, F), one difference
// at a time: dynamic shared memory (B), the engine's ring with the staged kernel's hard-wired fold
// (C), the rows plan's run-time geometry for the copy and/or the fold (S, D), and the kernel's first
// version (trip count after the wait) with the op at compile time (E2). Each result is checked
// against a per-row double sum. Three rounds, median of `reps` queued launches each (H200 numbers:
// BENCHMARKS.md, eighteenth run; D and E2 ran there as kernels of their own, merged into k_split
// since with the same code).
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
  vs.push_back({"F launch_reduce_typed tma/1 (host path)", [&] { launch_reduce_typed<engine::Mechanism::Tma, 1, float>(p); }});
  for (auto* k : {(const void*)k_ring<engine::Mechanism::Tma>, (const void*)k_ring<engine::Mechanism::Primitives>,
                  (const void*)k_split<true, true>, (const void*)k_split<true, false>, (const void*)k_split<false, true>,
                  (const void*)k_split<true, true, ReduceOp::Sum, true>,
                  (const void*)reduce_wide_rows_kernel<engine::Mechanism::Tma, float, false>,
                  (const void*)reduce_wide_rows_kernel<engine::Mechanism::Primitives, float, false>})
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
