// Build and run (H100/H200): nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Icsrc -o /tmp/probe_reduce tools/probes/probe_reduce_split.cu csrc/kernels/device_info.cu csrc/kernels/registry.cu && /tmp/probe_reduce
//   args: [reps = 50] [tma1 | tma2 | tma3 | primitives | primitives1] [blocks ...] (grids besides
//   the plan's); PROBE_TILE=bytes, PROBE_ONLY=name part; PROBE_PASSES=1: the chunked whole-tensor
//   sum's two passes timed apart (first pass, partials pass, both, with the dependent launch).
// The split reductions (the whole tensor, a few long rows) through cupipe's own launcher, outside
// torch: 2^28 fp32 sum and amax, 2^28 bf16 summed in fp32 and row cases, next to a plain
// grid-stride sum (the read ceiling). Every result is checked (sums 1e-5 relative, amax equal).
// Built against two csrc trees, it A/Bs a change to the launcher or the kernels in one device call.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/instance.h"
#include "kernels/reduce.cuh"
#include "probe_common.cuh"

using namespace cupipe;
using namespace cupipe::kernels;

__global__ void wait_and_store(void* out) {
  wait_for_previous_grid();
  if (threadIdx.x == 0) *static_cast<float*>(out) = 1.f;
}

template <typename T>
__global__ void fill_random(T* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = static_cast<T>(1.0f + static_cast<float>(h & 0xffffu) / 65536.0f);  // [1, 2): no cancellation
  }
}

// Exact checks: the sum of the plain kernel's partials in double; the largest element by bits
// (every element positive).
__global__ void sum_parts(const float* part, int n, double* out) {
  double t = 0;
  for (int i = 0; i < n; ++i) t += part[i];
  *out = t;
}
template <typename T>
__global__ void max_bits(const T* x, int64_t n, unsigned* out) {
  float m = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    m = fmaxf(m, static_cast<float>(x[i]));
  atomicMax(out, __float_as_uint(m));
}
template <typename T>
__global__ void sum_double(const T* x, int64_t n, double* out) {  // a reference for the bf16 case
  double t = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    t += static_cast<float>(x[i]);
  atomicAdd(out, t);
}

// Row sums (one thread per row, in double) against the launcher's: how many differ by more than
// 1e-5 relative (the row cases' check).
template <typename T>
__global__ void check_rows(const T* x, int64_t outer, int64_t r, const float* got, unsigned long long* bad) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < outer; i += int64_t(gridDim.x) * blockDim.x) {
    double t = 0;
    for (int64_t j = 0; j < r; ++j) t += static_cast<float>(x[i * r + j]);
    if (!(fabs(got[i] - t) <= 1e-5 * fabs(t))) atomicAdd(bad, 1ull);
  }
}

// Rows of 4096 fp32 the way a generated kernel sums them (one 512-thread block per row, two
// 16-byte loads per thread issued before any arithmetic, shuffles, then the warps' sums in order):
// the reference time for the (4096, 4096) case outside any ring.
__global__ void __launch_bounds__(512) sum_rows_4096_plain(const float4* x, float* out) {
  __shared__ float ws[16];
  const float4* row = x + blockIdx.x * 1024ll;
  const float4 a = row[threadIdx.x], b = row[threadIdx.x + 512];
  float v = ((a.x + a.y) + (a.z + a.w)) + ((b.x + b.y) + (b.z + b.w));
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) ws[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int w = 0; w < 16; ++w) t += ws[w];
    out[blockIdx.x] = t;
  }
}

// The same rows staged through shared memory with nothing of the engine: one bulk copy per row
// (16 KiB) completing on an mbarrier, then Threads threads sum it from shared memory. RPB rows per
// block, each with its own barrier, all issued before the first wait: what staging itself costs.
// AllArrive: every thread arrives on the barrier (count Threads), as the engine's tma ring does.
template <int Threads, int RPB, bool AllArrive = false>
__global__ void __launch_bounds__(Threads) sum_rows_4096_bulk(const float* x, float* out) {
  __shared__ alignas(128) float4 buf[RPB][1024];
  __shared__ uint64_t bar[RPB];
  __shared__ float ws[RPB][Threads / 32];
  namespace sm90 = engine::sm90;
  const int64_t row0 = int64_t(blockIdx.x) * RPB;
  if (threadIdx.x == 0) {
    for (int i = 0; i < RPB; ++i) sm90::mbarrier_init(&bar[i], AllArrive ? Threads : 1);
    sm90::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int i = 0; i < RPB; ++i) {
      sm90::mbarrier_expect_tx(&bar[i], 16384);
      sm90::bulk_copy_g2s(buf[i], x + (row0 + i) * 4096, 16384, &bar[i]);
    }
  }
  if (AllArrive || threadIdx.x == 0)
    for (int i = 0; i < RPB; ++i) sm90::mbarrier_arrive(&bar[i]);
  for (int i = 0; i < RPB; ++i) {
    sm90::mbarrier_wait_parity(&bar[i], 0);
    float v = 0.f;
#pragma unroll
    for (int k = 0; k < 1024 / Threads; ++k) {
      const float4 a = buf[i][threadIdx.x + k * Threads];
      v += (a.x + a.y) + (a.z + a.w);
    }
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) ws[i][threadIdx.x >> 5] = v;
  }
  __syncthreads();
  if (threadIdx.x < RPB) {
    float t = 0.f;
    for (int w = 0; w < Threads / 32; ++w) t += ws[threadIdx.x][w];
    out[row0 + threadIdx.x] = t;
  }
}

// The staged kernel as a persistent grid (cupipe's plan without cupipe's code): block b sums
// tiles b, b + grid, ... of RPT rows, through S buffers (one bulk copy and barrier each, the next
// copy into a buffer issued once every thread has read it).
template <int Threads, int RPT, int S>
__global__ void __launch_bounds__(Threads) sum_rows_4096_persistent(const float* x, float* out, int ntiles) {
  extern __shared__ __align__(128) float4 dyn[];
  __shared__ uint64_t bar[S];
  __shared__ float ws[RPT][Threads / 32];
  namespace sm90 = engine::sm90;
  const int mine = ntiles > static_cast<int>(blockIdx.x) ? (ntiles - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  if (threadIdx.x == 0) {
    for (int i = 0; i < S; ++i) sm90::mbarrier_init(&bar[i], 1);
    sm90::fence_barrier_init();
  }
  __syncthreads();
  auto issue = [&](int k, int st) {
    if (threadIdx.x != 0) return;
    sm90::mbarrier_expect_tx(&bar[st], RPT * 16384);
    sm90::bulk_copy_g2s(dyn + st * RPT * 1024, x + (int64_t(blockIdx.x) + int64_t(k) * gridDim.x) * RPT * 4096,
                        RPT * 16384, &bar[st]);
    sm90::mbarrier_arrive(&bar[st]);
  };
  for (int k = 0; k < S && k < mine; ++k) issue(k, k);
  for (int k = 0; k < mine; ++k) {
    const int st = k % S;
    sm90::mbarrier_wait_parity(&bar[st], (k / S) & 1);
    for (int i = 0; i < RPT; ++i) {
      const float4* row = dyn + (st * RPT + i) * 1024;
      float v = 0.f;
#pragma unroll
      for (int q = 0; q < 1024 / Threads; ++q) {
        const float4 a = row[threadIdx.x + q * Threads];
        v += (a.x + a.y) + (a.z + a.w);
      }
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if ((threadIdx.x & 31) == 0) ws[i][threadIdx.x >> 5] = v;
    }
    sm90::fence_proxy_async_shared();  // these reads before the next copy's writes
    __syncthreads();
    if (k + S < mine) issue(k + S, st);
    if (threadIdx.x < RPT) {
      float t = 0.f;
      for (int w = 0; w < Threads / 32; ++w) t += ws[threadIdx.x][w];
      out[(int64_t(blockIdx.x) + int64_t(k) * gridDim.x) * RPT + threadIdx.x] = t;
    }
    __syncthreads();  // ws is written again next tile
  }
}

// Configurations: tma/1 (the launcher's choice on sm_90+), tma/2, tma/3, primitives/2 and
// primitives/1 (the launcher's for rows of 4-32 KiB), for fp32 and bf16 inputs: the instances the
// launcher may ask the registry for (compile time), registered here as the module's build does.
#define PROBE_REDUCE(M, S)                                                                        \
  CUPIPE_KERNEL_INSTANCE(reduce_rows_kernel<engine::Mechanism::M, S, float>)                      \
  CUPIPE_KERNEL_INSTANCE(reduce_rows_kernel<engine::Mechanism::M, S, __nv_bfloat16>)
PROBE_REDUCE(Tma, 1) PROBE_REDUCE(Tma, 2) PROBE_REDUCE(Tma, 3) PROBE_REDUCE(Primitives, 1) PROBE_REDUCE(Primitives, 2)
CUPIPE_KERNEL_INSTANCE(reduce_wide_rows_kernel<engine::Mechanism::Tma, float, true>)
CUPIPE_KERNEL_INSTANCE(reduce_wide_rows_kernel<engine::Mechanism::Tma, __nv_bfloat16, true>)
CUPIPE_KERNEL_INSTANCE(reduce_wide_rows_kernel<engine::Mechanism::Primitives, float, true>)
CUPIPE_KERNEL_INSTANCE(reduce_wide_rows_kernel<engine::Mechanism::Primitives, __nv_bfloat16, true>)
CUPIPE_KERNEL_INSTANCE(reduce_partials_block_kernel<float>)
CUPIPE_KERNEL_INSTANCE(reduce_partials_kernel<float>)
CUPIPE_KERNEL_INSTANCE(reduce_col_partials_kernel<float>)

void run_reduce(const ReduceParams& p) {
  if (p.in_dtype == DType::F32) launch_reduce_typed<float>(p);
  else launch_reduce_typed<__nv_bfloat16>(p);
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 50;
  const char* cfg = argc > 2 ? argv[2] : "tma1";  // tma1, tma2, tma3 or primitives (/2)
  const bool tma = std::strncmp(cfg, "tma", 3) == 0;
  const engine::Mechanism mech = tma ? engine::Mechanism::Tma : engine::Mechanism::Primitives;
  const int stages = tma ? std::max(1, std::min(3, std::atoi(cfg + 3))) : (std::strcmp(cfg, "primitives1") == 0 ? 1 : 2);
  const int tile_bytes = std::getenv("PROBE_TILE") ? std::atoi(std::getenv("PROBE_TILE")) : 0;
  const int64_t n = int64_t(1) << 28;
  float* x;
  __nv_bfloat16* xb;
  CUPIPE_CUDA_CHECK(cudaMalloc(&x, n * sizeof(float)));
  CUPIPE_CUDA_CHECK(cudaMalloc(&xb, n * sizeof(__nv_bfloat16)));
  fill_random<<<1024, 256>>>(x, n, 12345u);
  fill_random<<<1024, 256>>>(xb, n, 777u);
  const DeviceInfo dev = device_info(current_device());
  float* part;
  double* dref;
  unsigned* mref;
  void* out;
  void* ws;
  CUPIPE_CUDA_CHECK(cudaMalloc(&part, 4096 * sizeof(float)));
  CUPIPE_CUDA_CHECK(cudaMalloc(&dref, 2 * sizeof(double)));
  CUPIPE_CUDA_CHECK(cudaMalloc(&mref, sizeof(unsigned)));
  CUPIPE_CUDA_CHECK(cudaMalloc(&out, (int64_t(1) << 23) * sizeof(float)));  // the most outputs: 2^23 rows
  CUPIPE_CUDA_CHECK(cudaMalloc(&ws, 64 << 20));
  CUPIPE_CUDA_CHECK(cudaMemset(dref, 0, 2 * sizeof(double)));
  CUPIPE_CUDA_CHECK(cudaMemset(mref, 0, sizeof(unsigned)));

  const int plain_grid = dev.num_sms * 4;
  const float plain_ms =
      probe_median_ms([&] { sum_plain<4, false><<<plain_grid, 256>>>(reinterpret_cast<const float4*>(x), part, n / 4); }, reps);
  sum_parts<<<1, 1>>>(part, plain_grid, dref);
  sum_double<<<1024, 256>>>(xb, n, dref + 1);
  max_bits<<<1024, 256>>>(x, n, mref);
  double ref[2];
  unsigned mbits;
  CUPIPE_CUDA_CHECK(cudaMemcpy(ref, dref, sizeof ref, cudaMemcpyDeviceToHost));
  CUPIPE_CUDA_CHECK(cudaMemcpy(&mbits, mref, sizeof mbits, cudaMemcpyDeviceToHost));
  float mref_f;
  std::memcpy(&mref_f, &mbits, 4);
  std::printf("device sms %d; %s/%d, stage bytes %d (0: the launcher's); plain grid-stride sum 2^28 fp32 %.4f ms "
              "(%.0f GB/s)\n", dev.num_sms, engine::mechanism_name(mech), stages, tile_bytes, plain_ms,
              n * 4 / plain_ms / 1e6);

  {
    const float rows_ms =
        probe_median_ms([&] { sum_rows_4096_plain<<<4096, 512>>>(reinterpret_cast<const float4*>(x), static_cast<float*>(out)); }, reps);
    unsigned long long* nbad;
    unsigned long long h = 0;
    CUPIPE_CUDA_CHECK(cudaMalloc(&nbad, sizeof h));
    CUPIPE_CUDA_CHECK(cudaMemset(nbad, 0, sizeof h));
    check_rows<<<1024, 256>>>(x, 4096, 4096, static_cast<const float*>(out), nbad);
    CUPIPE_CUDA_CHECK(cudaMemcpy(&h, nbad, sizeof h, cudaMemcpyDeviceToHost));
    CUPIPE_CUDA_CHECK(cudaFree(nbad));
    std::printf("plain (4096, 4096) row sum, a 512-thread block per row: %.4f ms%s\n", rows_ms, h ? "  FAIL" : "");
    // dyn: dynamic shared memory (unused) that caps the resident blocks per SM.
    auto staged = [&](auto kernel, int threads, int rpb, const char* what, int dyn = 0) {
      float* o = static_cast<float*>(out);
      CUPIPE_CUDA_CHECK(cudaMemset(o, 0xff, 4096 * sizeof(float)));  // poison (NaN)
      if (dyn > 0) CUPIPE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn));
      int bps = 0;
      CUPIPE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, kernel, threads, dyn));
      const float ms = probe_median_ms([&] { kernel<<<4096 / rpb, threads, dyn>>>(x, o); }, reps);
      CUPIPE_CUDA_CHECK(cudaMemset(nbad, 0, sizeof h));
      check_rows<<<1024, 256>>>(x, 4096, 4096, o, nbad);
      CUPIPE_CUDA_CHECK(cudaMemcpy(&h, nbad, sizeof h, cudaMemcpyDeviceToHost));
      std::printf("staged (4096, 4096) row sum, %s (%d blocks/SM): %.4f ms%s\n", what, bps, ms, h ? "  FAIL" : "");
    };
    CUPIPE_CUDA_CHECK(cudaMalloc(&nbad, sizeof h));
    staged(sum_rows_4096_bulk<256, 1>, 256, 1, "one bulk copy per row, 256 threads, a row per block");
    staged(sum_rows_4096_bulk<512, 1>, 512, 1, "512 threads, a row per block");
    staged(sum_rows_4096_bulk<256, 2>, 256, 2, "256 threads, two rows per block");
    staged(sum_rows_4096_bulk<512, 2>, 512, 2, "512 threads, two rows per block");
    staged(sum_rows_4096_bulk<256, 1, true>, 256, 1, "256 threads arriving, a row per block");
    int smem_sm = 0;
    CUPIPE_CUDA_CHECK(cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, current_device()));
    for (int cap : {6, 5, 4}) {
      char what[96];
      std::snprintf(what, sizeof what, "256 threads, a row per block, capped at %d blocks/SM", cap);
      staged(sum_rows_4096_bulk<256, 1>, 256, 1, what, smem_sm / cap - 16512 - 1024 - 64);
    }
    auto persistent = [&](auto kernel, int rpt, int stages, const char* what) {
      float* o = static_cast<float*>(out);
      CUPIPE_CUDA_CHECK(cudaMemset(o, 0xff, 4096 * sizeof(float)));
      const int dyn = stages * rpt * 16384;
      CUPIPE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn));
      int bps = 0;
      CUPIPE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, kernel, 256, dyn));
      bps = std::min(bps, 6);  // cupipe's rows kernel: six per SM (its registers)
      const int grid = std::min(dev.num_sms * bps, 4096 / rpt);
      const float ms = probe_median_ms([&] { kernel<<<grid, 256, dyn>>>(x, o, 4096 / rpt); }, reps);
      CUPIPE_CUDA_CHECK(cudaMemset(nbad, 0, sizeof h));
      check_rows<<<1024, 256>>>(x, 4096, 4096, o, nbad);
      CUPIPE_CUDA_CHECK(cudaMemcpy(&h, nbad, sizeof h, cudaMemcpyDeviceToHost));
      std::printf("persistent (4096, 4096) row sum, %s (grid %d): %.4f ms%s\n", what, grid, ms, h ? "  FAIL" : "");
    };
    persistent(sum_rows_4096_persistent<256, 2, 1>, 2, 1, "tiles of two rows, one buffer (cupipe's plan)");
    persistent(sum_rows_4096_persistent<256, 1, 1>, 1, 1, "tiles of one row, one buffer");
    persistent(sum_rows_4096_persistent<256, 1, 2>, 1, 2, "tiles of one row, two buffers");
    persistent(sum_rows_4096_persistent<256, 2, 2>, 2, 2, "tiles of two rows, two buffers");
    persistent(sum_rows_4096_persistent<256, 1, 3>, 1, 3, "tiles of one row, three buffers");
    {
      auto k = reduce_rows_kernel<engine::Mechanism::Tma, 1, float>;
      int bps = 0;
      cudaFuncAttributes fa{};
      CUPIPE_CUDA_CHECK(cudaFuncGetAttributes(&fa, k));
      CUPIPE_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024 + 64));
      for (int tb : {16384, 32768}) {
        CUPIPE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, k, kReduceThreads, tb + 32));
        std::printf("reduce_rows_kernel<tma, 1, float>: %d registers, %zu static smem, %d blocks/SM at %d-byte stages\n",
                    fa.numRegs, fa.sharedSizeBytes, bps, tb);
      }
    }
    CUPIPE_CUDA_CHECK(cudaFree(nbad));
  }

  if (std::getenv("PROBE_PASSES") != nullptr) {
    // The whole-tensor sum's two passes apart: the chunked first pass alone (reduce_wide_rows_kernel,
    // a block per 32 KiB), the partials pass alone over what it wrote, both plain, both with the
    // partials pass as a programmatic dependent (what the launcher does).
    ReduceParams p;
    p.x = x; p.out = out; p.in_dtype = DType::F32; p.out_dtype = DType::F32;
    p.outer = 1; p.r = n; p.inner = 1; p.op = ReduceOp::Sum;
    p.mechanism = engine::Mechanism::Tma; p.stages = 1; p.tile_bytes = tile_bytes;
    p.workspace = ws; p.workspace_bytes = 64 << 20;
    const RowsPlan pl = make_rows_plan(p, 4, rows_tile_bytes(p, dev), dev.num_sms * kernels::kMaxBlocksPerSm);
    if (!pl.wide) { std::printf("not chunked\n"); return 1; }
    auto first = reduce_wide_rows_kernel<engine::Mechanism::Tma, float, true>;
    const size_t sm = static_cast<size_t>(pl.tile_elems) * 4 + 32;
    CUPIPE_CUDA_CHECK(cudaFuncSetAttribute(first, cudaFuncAttributeMaxDynamicSharedMemorySize, sm));
    float* parts = static_cast<float*>(ws);
    auto pass1 = [&] { first<<<static_cast<unsigned>(pl.ntiles), kReduceThreads, sm>>>(x, out, DType::F32, parts, pl, p.op); };
    // The partials pass and a dependent that only waits, through the launchers' typed launch.
    const KernelRef<const float*, void*, DType, int64_t, int64_t, int64_t, ReduceOp, int64_t> partials{
        reinterpret_cast<const void*>(&reduce_partials_block_kernel<float>)};
    const KernelRef<void*> waiter{reinterpret_cast<const void*>(&wait_and_store)};
    auto pass2 = [&](bool dep) {
      launch_kernel(partials, dim3(1), dim3(kPartialsBlockThreads), 0, nullptr, dep,
                    static_cast<const float*>(parts), out, DType::F32, pl.parts, pl.parts, int64_t(1), p.op, p.r);
    };
    const float a = probe_median_ms(pass1, reps);
    const float b = probe_median_ms([&] { pass2(false); }, reps);
    const float c = probe_median_ms([&] { pass1(); pass2(false); }, reps);
    const float d = probe_median_ms([&] { pass1(); pass2(true); }, reps);
    const float e = probe_median_ms([&] { run_reduce(p); }, reps);
    float got;
    CUPIPE_CUDA_CHECK(cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost));
    // The floor under the partials pass: a dependent that only waits and stores; and the pass over
    // a quarter of the partials.
    const float f = probe_median_ms([&] {
      pass1();
      launch_kernel(waiter, dim3(1), dim3(kPartialsBlockThreads), 0, nullptr, true, out);
    }, reps);
    const float g = probe_median_ms([&] {
      pass1();
      launch_kernel(partials, dim3(1), dim3(kPartialsBlockThreads), 0, nullptr, true,
                    static_cast<const float*>(parts), out, DType::F32, pl.parts / 4, pl.parts, int64_t(1), p.op, p.r);
    }, reps);
    std::printf("first pass + a dependent that only waits: %.4f ms; + the partials pass over a quarter: %.4f\n", f, g);
    std::printf("chunked sum 2^28 fp32, %lld partials: first pass %.4f ms, partials pass %.4f, both %.4f, both (PDL) "
                "%.4f, run_reduce %.4f (%s)\n", static_cast<long long>(pl.parts), a, b, c, d, e,
                std::fabs(got - ref[0]) <= 1e-5 * ref[0] ? "ok" : "FAIL");
    return 0;
  }

  struct Case {
    const char* name;
    const void* x;
    DType dt;
    int64_t outer, r;
    ReduceOp op;
    double expect;  // NaN: no check
    int64_t inner;  // 1: rows; > 1: columns (reduce_cols_kernel)
  };
  const Case cases[] = {
      {"sum all fp32", x, DType::F32, 1, n, ReduceOp::Sum, ref[0], 1},
      {"amax all fp32", x, DType::F32, 1, n, ReduceOp::Amax, mref_f, 1},
      {"sum all bf16 -> fp32", xb, DType::BF16, 1, n, ReduceOp::Sum, ref[1], 1},
      {"sum rows (8192, 32768)", x, DType::F32, 8192, 32768, ReduceOp::Sum, NAN, 1},
      {"sum rows (64, 2^22)", x, DType::F32, 64, int64_t(1) << 22, ReduceOp::Sum, NAN, 1},
      {"sum rows (4194304, 64)", x, DType::F32, 4194304, 64, ReduceOp::Sum, NAN, 1},
      {"sum rows (8388608, 32)", x, DType::F32, 8388608, 32, ReduceOp::Sum, NAN, 1},
      {"sum rows (2097152, 128)", x, DType::F32, 2097152, 128, ReduceOp::Sum, NAN, 1},
      {"sum rows bf16 (4194304, 64)", xb, DType::BF16, 4194304, 64, ReduceOp::Sum, NAN, 1},
      {"sum rows (4096, 4096)", x, DType::F32, 4096, 4096, ReduceOp::Sum, NAN, 1},
      // 2^28 elements as rows of 8-32 KiB (the wide-rows kernel): what a whole-tensor sum's first
      // pass would cost with a block per tile instead of the split plan's parts
      {"sum rows (131072, 2048)", x, DType::F32, 131072, 2048, ReduceOp::Sum, NAN, 1},
      {"sum rows (65536, 4096)", x, DType::F32, 65536, 4096, ReduceOp::Sum, NAN, 1},
      {"sum rows (32768, 8192)", x, DType::F32, 32768, 8192, ReduceOp::Sum, NAN, 1},
      {"sum rows bf16 (65536, 4096)", xb, DType::BF16, 65536, 4096, ReduceOp::Sum, NAN, 1},
      {"sum cols (32768, 8192)", x, DType::F32, 1, 32768, ReduceOp::Sum, NAN, 8192},
  };
  // Grids: 0 is the plan's (one wave of resident blocks); others set ReduceParams::blocks: the
  // split plan divides them among the rows (parts per row = blocks / rows, at least 4 tiles each),
  // the packed plan (short rows, several per stage) runs that many blocks.
  std::vector<int64_t> grids = {0};
  for (int i = 3; i < argc; ++i) grids.push_back(std::atoll(argv[i]));
  for (int64_t blocks : grids)
  for (const Case& c : cases) {
    if (const char* only = std::getenv("PROBE_ONLY"); only != nullptr && std::strstr(c.name, only) == nullptr) continue;
    ReduceParams p;
    p.blocks = blocks;
    p.tile_bytes = tile_bytes;
    p.x = c.x;
    p.out = out;
    p.in_dtype = c.dt;
    p.out_dtype = DType::F32;
    p.outer = c.outer;
    p.r = c.r;
    p.inner = c.inner;
    p.op = c.op;
    p.mechanism = mech;
    p.stages = stages;
    p.workspace = ws;
    p.workspace_bytes = 64 << 20;
    const float ms = probe_median_ms([&] { run_reduce(p); }, reps);
    float got;
    CUPIPE_CUDA_CHECK(cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost));
    bool bad = !std::isnan(c.expect) &&
               (c.op == ReduceOp::Amax ? got != static_cast<float>(c.expect)
                                       : !(std::fabs(got - c.expect) <= 1e-5 * std::fabs(c.expect)));
    if (c.outer > 1 && c.inner == 1 && c.r <= 65536) {  // (one thread per row: short rows only)
      unsigned long long* nbad;
      unsigned long long h = 0;
      CUPIPE_CUDA_CHECK(cudaMalloc(&nbad, sizeof h));
      CUPIPE_CUDA_CHECK(cudaMemset(nbad, 0, sizeof h));
      if (c.dt == DType::F32)
        check_rows<<<1024, 256>>>(static_cast<const float*>(c.x), c.outer, c.r, static_cast<const float*>(out), nbad);
      else
        check_rows<<<1024, 256>>>(static_cast<const __nv_bfloat16*>(c.x), c.outer, c.r, static_cast<const float*>(out),
                                  nbad);
      CUPIPE_CUDA_CHECK(cudaMemcpy(&h, nbad, sizeof h, cudaMemcpyDeviceToHost));
      CUPIPE_CUDA_CHECK(cudaFree(nbad));
      if (h != 0) std::printf("FAIL %s: %llu rows off the double reference\n", c.name, h);
      bad = bad || h != 0;
    }
    const double bytes = c.outer * c.r * c.inner * static_cast<double>(dtype_size(c.dt));
    std::printf("%-24s %6lld %8.4f ms %6.0f GB/s %.3fx plain%s\n", c.name, static_cast<long long>(blocks), ms,
                bytes / ms / 1e6, plain_ms * bytes / (n * 4.0) / ms, bad ? "  FAIL" : "");
    if (bad) std::printf("FAIL %s: got %.9g expected %.9g\n", c.name, got, c.expect);
  }
  return 0;
}
