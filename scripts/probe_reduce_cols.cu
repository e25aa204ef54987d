// The column sum of the suite, (32768, 8192) fp32 over dim 0, taken apart outside torch: cupipe's
// launcher for several mechanisms and stage counts; the column pass alone and with each partials
// pass (reduce_partials_kernel's lanes, reduce_col_partials_kernel with 1-8 threads per column)
// for the launcher's plan and for other stage sizes, chunk widths (max_vecs) and grids; and plain
// kernels without the engine (a block per 4-16 KiB chunk of columns and part of the rows, 16-byte
// loads issued U rows at a time, then a partials pass of one thread per column): what a column
// sum costs when nothing but its loads stand in the way. Next to the read ceiling (a grid-stride
// sum of 2^28 fp32). Median of queued repetitions, random data in [1, 2); every result is checked
// against per-column double sums (1e-5 relative), outputs poisoned between cases.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Icsrc -Iscripts -o /tmp/probe_cols \
//       scripts/probe_reduce_cols.cu csrc/kernels/device_info.cu
//   /tmp/probe_cols [reps = 50]
//   PROBE_NCU=1 /tmp/probe_cols: each column pass (and the read ceiling) launched twice, for ncu
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/reduce.cuh"
#include "probe_common.cuh"

using namespace cupipe;
using namespace cupipe::kernels;

constexpr int64_t kR = 32768, kInner = 8192;

__global__ void fill_random(float* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = 1.0f + static_cast<float>(h & 0xffffu) / 65536.0f;
  }
}

__global__ void column_sums_double(const float* x, double* ref) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= kInner) return;
  double t = 0;
  for (int64_t i = 0; i < kR; ++i) t += x[i * kInner + c];
  ref[c] = t;
}

__global__ void count_bad(const float* got, const double* ref, unsigned* bad) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c < kInner && !(fabs(got[c] - ref[c]) <= 1e-5 * fabs(ref[c]))) atomicAdd(bad, 1u);
}

// Block (part, chunk): the chunk's 256 * V vectors of each row of the part (R rows), U rows of
// loads in flight per thread, chunk fastest in the block index so that the resident blocks cover
// consecutive rows. One partial per column and part, laid out [part][column].
template <int V, int U>
__global__ void __launch_bounds__(256) cols_plain(const float4* __restrict__ x, float4* __restrict__ partials,
                                                  int rows_per_part) {
  constexpr int64_t row_vecs = kInner / 4;
  constexpr int chunks = static_cast<int>(row_vecs / (256 * V));
  const int chunk = blockIdx.x % chunks, part = blockIdx.x / chunks;
  const int64_t col = int64_t(chunk) * 256 * V + threadIdx.x;
  const float4* src = x + int64_t(part) * rows_per_part * row_vecs + col;
  float4 acc[V];
#pragma unroll
  for (int v = 0; v < V; ++v) acc[v] = make_float4(0, 0, 0, 0);
  for (int i = 0; i < rows_per_part; i += U) {
    float4 t[U][V];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int v = 0; v < V; ++v) t[u][v] = src[(i + u) * row_vecs + v * 256];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int v = 0; v < V; ++v) {
        acc[v].x += t[u][v].x; acc[v].y += t[u][v].y; acc[v].z += t[u][v].z; acc[v].w += t[u][v].w;
      }
  }
#pragma unroll
  for (int v = 0; v < V; ++v) partials[int64_t(part) * row_vecs + col + v * 256] = acc[v];
}

// One thread per column, its parts' partials eight loads at a time (coalesced across the warp).
__global__ void __launch_bounds__(256) cols_plain_finish(const float* __restrict__ partials, float* out, int parts,
                                                         bool dependent) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (dependent) wait_for_previous_grid();
  if (c >= kInner) return;
  float acc = 0.f;
  with_static_combine<float>(ReduceOp::Sum,
                             [&](auto sc) { fold_strided<8>(partials + c, kInner, 0, 1, parts, acc, sc); });
  out[c] = acc;
}

template <engine::Mechanism M, int S>
void run_cupipe(ReduceParams p) {
  p.mechanism = M;
  p.stages = S;
  launch_reduce_typed<M, S, float>(p);
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines survive a failed case
  const int reps = argc > 1 ? std::atoi(argv[1]) : 50;
  const int64_t n = kR * kInner;
  float *x, *out, *ws, *part;
  double* ref;
  unsigned* bad;
  PROBE_CHECK(cudaMalloc(&x, n * sizeof(float)));
  PROBE_CHECK(cudaMalloc(&out, kInner * sizeof(float)));
  PROBE_CHECK(cudaMalloc(&ws, 64 << 20));
  PROBE_CHECK(cudaMalloc(&part, 4096 * sizeof(float)));
  PROBE_CHECK(cudaMalloc(&ref, kInner * sizeof(double)));
  PROBE_CHECK(cudaMalloc(&bad, sizeof(unsigned)));
  fill_random<<<1024, 256>>>(x, n, 4242u);
  column_sums_double<<<kInner / 256, 256>>>(x, ref);
  PROBE_CHECK(cudaDeviceSynchronize());
  const DeviceInfo dev = device_info(current_device());
  auto check = [&]() {
    unsigned h = 0;
    PROBE_CHECK(cudaMemset(bad, 0, sizeof h));
    count_bad<<<kInner / 256, 256>>>(out, ref, bad);
    PROBE_CHECK(cudaMemcpy(&h, bad, sizeof h, cudaMemcpyDeviceToHost));
    PROBE_CHECK(cudaMemset(out, 0xff, kInner * sizeof(float)));  // poison for the next case
    return h == 0 ? "" : "  FAIL";
  };
  PROBE_CHECK(cudaMemset(out, 0xff, kInner * sizeof(float)));

  if (std::getenv("PROBE_NCU") != nullptr) {  // one launch of each column pass, for ncu
    using engine::Mechanism;
    ReduceParams q;
    q.x = x; q.out = out; q.in_dtype = DType::F32; q.out_dtype = DType::F32;
    q.outer = 1; q.r = kR; q.inner = kInner; q.op = ReduceOp::Sum;
    q.mechanism = Mechanism::Primitives; q.stages = 2; q.workspace = ws; q.workspace_bytes = 64 << 20;
    for (int rep = 0; rep < 2; ++rep) {
      launch_reduce_typed<Mechanism::Primitives, 2, float>(q);
      cols_plain<1, 8><<<512, 256>>>(reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(ws), 512);
      sum_plain<4, false><<<dev.num_sms * 4, 256>>>(reinterpret_cast<const float4*>(x), part, n / 4);
    }
    PROBE_CHECK(cudaDeviceSynchronize());
    std::printf("PROBE_NCU: done\n");
    return 0;
  }
  const float plain_ms =
      probe_median_ms([&] { sum_plain<4, false><<<dev.num_sms * 4, 256>>>(reinterpret_cast<const float4*>(x), part, n / 4); }, reps);
  std::printf("device sms %d; read ceiling (grid-stride sum of 2^28 fp32) %.4f ms (%.0f GB/s)\n", dev.num_sms, plain_ms,
              n * 4 / plain_ms / 1e6);

  ReduceParams p;
  p.x = x; p.out = out; p.in_dtype = DType::F32; p.out_dtype = DType::F32;
  p.outer = 1; p.r = kR; p.inner = kInner; p.op = ReduceOp::Sum;
  p.workspace = ws; p.workspace_bytes = 64 << 20;
  using engine::Mechanism;
  auto launcher = [&](const char* name, auto run) {
    const float ms = probe_median_ms([&] { run(p); }, reps);
    const char* verdict = check();
    std::printf("cupipe %-14s %.4f ms %.3fx ceiling%s\n", name, ms, plain_ms / ms, verdict);
  };
  launcher("primitives/2", run_cupipe<Mechanism::Primitives, 2>);
  launcher("primitives/1", run_cupipe<Mechanism::Primitives, 1>);
  launcher("primitives/3", run_cupipe<Mechanism::Primitives, 3>);
  launcher("tma/1", run_cupipe<Mechanism::Tma, 1>);
  launcher("tma/2", run_cupipe<Mechanism::Tma, 2>);
  launcher("tma/3", run_cupipe<Mechanism::Tma, 3>);
  launcher("primitives/4", run_cupipe<Mechanism::Primitives, 4>);
  launcher("pipeline/3", run_cupipe<Mechanism::Pipeline, 3>);
  launcher("barrier/3", run_cupipe<Mechanism::Barrier, 3>);
  launcher("cg/3", run_cupipe<Mechanism::Cg, 3>);
  launcher("specialized/3", run_cupipe<Mechanism::Specialized, 3>);
  launcher("sync/2", run_cupipe<Mechanism::Sync, 2>);

  // The launcher's plan for M/S (stage bytes `tile`, 0: the launcher's; `blocks` as
  // ReduceParams::blocks): the column pass alone, then with a partials pass as a programmatic
  // dependent (as the launcher runs it): reduce_partials_kernel's lanes (a warp per column, the
  // launcher's before this probe), reduce_col_partials_kernel with 1, 2, 4 or 8 threads per column.
  auto passes = [&](auto kernel, const char* name, int S, int tile, int64_t blocks, int max_vecs = 0) {
    p.tile_bytes = tile;
    p.blocks = blocks;
    p.stages = S;  // (the plan fits its stages into shared memory)
    const ColsPlan shape = make_cols_plan(p, dev, 4, 1, max_vecs);
    const size_t smem = size_t(S) * shape.stage_bytes;
    prepare_smem(kernel, smem, "reduce");
    const int64_t resident = int64_t(dev.num_sms) * blocks_per_sm(kernel, kReduceThreads, smem);
    const ColsPlan pl = make_cols_plan(p, dev, 4, target_blocks(p, resident), max_vecs);
    p.tile_bytes = 0;
    p.blocks = 0;
    p.stages = 2;
    const unsigned grid = static_cast<unsigned>(pl.col_chunks * pl.parts);
    auto first = [&] { kernel<<<grid, kReduceThreads, smem>>>(x, out, DType::F32, ws, pl, ReduceOp::Sum); };
    int lanes_log2 = 0;
    while (lanes_log2 < 5 && (int64_t(4) << lanes_log2) < pl.parts) ++lanes_log2;
    const unsigned lane_blocks = static_cast<unsigned>(ceil_div(kInner << lanes_log2, 256));
    const float a = probe_median_ms(first, reps);
    const float c = probe_median_ms([&] {
      first();
      launch_dependent(reduce_partials_kernel<float>, dim3(lane_blocks), dim3(256), 0, nullptr, true,
                       static_cast<const float*>(ws), out, DType::F32, kInner, pl.parts, int64_t(1), kInner,
                       ReduceOp::Sum, kR, lanes_log2);
    }, reps);
    std::printf("%-13s %5d B stages, %lld chunks x %lld parts (%d rows per tile, %lld resident): column pass %.4f ms, "
                "+ lanes %.4f%s | col partials:", name, shape.stage_bytes,
                static_cast<long long>(pl.col_chunks), static_cast<long long>(pl.parts), pl.tile_rows,
                static_cast<long long>(resident), a, c, check());
    for (int sl = 0; sl <= 3; ++sl) {
      const float e = probe_median_ms([&] {
        first();
        launch_dependent(reduce_col_partials_kernel<float>, dim3(static_cast<unsigned>((kInner << sl) / 256)), dim3(256),
                         0, nullptr, true, static_cast<const float*>(ws), out, DType::F32, kInner, pl.parts,
                         ReduceOp::Sum, kR, sl);
      }, reps);
      std::printf(" %d/col %.4f%s", 1 << sl, e, check());
    }
    std::printf("\n");
  };
  {
    const float b = probe_median_ms([&] {
      reduce_partials_kernel<float><<<1024, 256>>>(ws, out, DType::F32, kInner, 66, 1, kInner, ReduceOp::Sum, kR, 5);
    }, reps);
    const float d = probe_median_ms([&] { reduce_col_partials_kernel<float><<<kInner / 256, 256>>>(ws, out, DType::F32, kInner, 66, ReduceOp::Sum, kR, 0); }, reps);
    const float e = probe_median_ms([&] { reduce_col_partials_kernel<float><<<kInner * 4 / 256, 256>>>(ws, out, DType::F32, kInner, 66, ReduceOp::Sum, kR, 2); }, reps);
    std::printf("partials passes alone over 66 parts: lanes %.4f ms, a thread per column %.4f, four %.4f\n", b, d, e);
  }
  // Stage counts and sizes with the congruent layout (every tile row at its source's offset
  // modulo 128; the probe's earlier version compared it with rows at a pitch of chunk + 32 bytes).
  passes(reduce_cols_kernel<Mechanism::Primitives, 2, float>, "prim/2", 2, 0, 0);
  passes(reduce_cols_kernel<Mechanism::Primitives, 3, float>, "prim/3", 3, 0, 0);
  passes(reduce_cols_kernel<Mechanism::Primitives, 4, float>, "prim/4", 4, 0, 0);
  passes(reduce_cols_kernel<Mechanism::Primitives, 1, float>, "prim/1", 1, 0, 0);
  passes(reduce_cols_kernel<Mechanism::Tma, 2, float>, "tma/2", 2, 0, 0);
  passes(reduce_cols_kernel<Mechanism::Tma, 3, float>, "tma/3", 3, 0, 0);
  passes(reduce_cols_kernel<Mechanism::Tma, 1, float>, "tma/1", 1, 0, 0);
  passes(reduce_cols_kernel<Mechanism::Primitives, 2, float>, "prim/2 32K", 2, 32768, 0);
  passes(reduce_cols_kernel<Mechanism::Primitives, 3, float>, "prim/3 32K", 3, 32768, 0);
  passes(reduce_cols_kernel<Mechanism::Primitives, 4, float>, "prim/4 32K", 4, 32768, 0);
  passes(reduce_cols_kernel<Mechanism::Primitives, 3, float>, "prim/3 8KiB", 3, 0, 0, 2);

  // Plain kernels: V vectors per thread (chunks of 4, 8 or 16 KiB), U rows of loads in flight,
  // R rows per part.
  auto plain = [&](auto kernel, int V, int U, int R) {
    const int parts = static_cast<int>(kR / R);
    const unsigned grid = static_cast<unsigned>(parts * (kInner / 4 / (256 * V)));
    auto both = [&] {
      kernel<<<grid, 256>>>(reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(ws), R);
      cols_plain_finish<<<kInner / 256, 256>>>(ws, out, parts, false);
    };
    const float a = probe_median_ms(
        [&] { kernel<<<grid, 256>>>(reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(ws), R); }, reps);
    const float ms = probe_median_ms(both, reps);
    const char* v = check();
    std::printf("plain V=%d U=%d R=%5d (%5d parts, %6u blocks): column pass %.4f ms, both %.4f ms %.3fx ceiling%s\n", V,
                U, R, parts, grid, a, ms, plain_ms / ms, v);
  };
  plain(cols_plain<1, 8>, 1, 8, 512);
  plain(cols_plain<1, 4>, 1, 4, 512);
  return 0;
}
