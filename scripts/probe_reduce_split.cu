// The split reductions (a few long rows, the whole tensor) through cupipe's own launcher, outside
// torch: the suite's whole-tensor cases (2^28 fp32 sum and amax, 2^28 bf16 summed in fp32) and a
// row case, next to a plain grid-stride sum (16-byte loads, the read ceiling of
// scripts/probe_copy_bandwidth.cu). Median of queued repetitions (CUDA events between launches),
// random data; each result is checked (whole-tensor sums against the plain kernel's, 1e-5 relative;
// amax: equal; row sums against a double reference, 1e-5 relative; columns not checked).
// Built against two csrc trees, it A/Bs a change to the launcher or the kernel in one device call.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Icsrc -o /tmp/probe_reduce \
//       scripts/probe_reduce_split.cu csrc/kernels/device_info.cu
//   [PROBE_TILE=bytes] /tmp/probe_reduce [reps = 50] [tma1 | tma2 | tma3 | primitives] [blocks ...]
//   (tma/1 is the launcher's choice, primitives/2 the older one; blocks: grids besides the plan's)
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/reduce.cuh"
#include "probe_common.cuh"

using namespace cupipe;
using namespace cupipe::kernels;

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

// Configurations: tma/1 (the launcher's choice on sm_90+), tma/2, tma/3 and primitives/2. Only
// fp32 and bf16 inputs are instantiated (compile time).
template <engine::Mechanism M, int S>
void run_typed(const ReduceParams& p) {
  if (p.in_dtype == DType::F32) launch_reduce_typed<M, S, float>(p);
  else launch_reduce_typed<M, S, __nv_bfloat16>(p);
}
void run_reduce(const ReduceParams& p) {
  using engine::Mechanism;
  if (p.mechanism == Mechanism::Tma && p.stages == 1) run_typed<Mechanism::Tma, 1>(p);
  else if (p.mechanism == Mechanism::Tma && p.stages == 2) run_typed<Mechanism::Tma, 2>(p);
  else if (p.mechanism == Mechanism::Tma) run_typed<Mechanism::Tma, 3>(p);
  else run_typed<Mechanism::Primitives, 2>(p);
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 50;
  const char* cfg = argc > 2 ? argv[2] : "tma1";  // tma1, tma2, tma3 or primitives (/2)
  const bool tma = std::strncmp(cfg, "tma", 3) == 0;
  const engine::Mechanism mech = tma ? engine::Mechanism::Tma : engine::Mechanism::Primitives;
  const int stages = tma ? std::max(1, std::min(3, std::atoi(cfg + 3))) : 2;
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
      {"sum cols (32768, 8192)", x, DType::F32, 1, 32768, ReduceOp::Sum, NAN, 8192},
  };
  // Grids: 0 is the plan's (one wave of resident blocks); others set ReduceParams::blocks: the
  // split plan divides them among the rows (parts per row = blocks / rows, at least 4 tiles each),
  // the packed plan (short rows, several per stage) runs that many blocks.
  std::vector<int64_t> grids = {0};
  for (int i = 3; i < argc; ++i) grids.push_back(std::atoll(argv[i]));
  for (int64_t blocks : grids)
  for (const Case& c : cases) {
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
