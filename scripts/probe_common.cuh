// What the standalone probes under scripts/ share: an error check, the median of queued launches
// timed with CUDA events, and the read-ceiling kernel (a grid-stride sum of 16-byte loads).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define PROBE_CHECK(x)                                                                         \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

// The tensor maps' L2 promotion a probe asks for: PROBE_PROMO (environment) 0 none, 1 64 B, 2
// 128 B, 3 256 B; unset, `library` (the kernels' own). scripts/tma_promotion_ab.sh runs a probe
// under each.
inline CUtensorMapL2promotion probe_l2_promotion(CUtensorMapL2promotion library) {
  const char* e = std::getenv("PROBE_PROMO");
  if (e == nullptr) return library;
  switch (std::atoi(e)) {
    case 0: return CU_TENSOR_MAP_L2_PROMOTION_NONE;
    case 1: return CU_TENSOR_MAP_L2_PROMOTION_L2_64B;
    case 2: return CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
    default: return CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  }
}

// Median of `reps` queued calls of launch(), one untimed call (and a synchronization) first,
// CUDA events between the calls.
template <class F>
float probe_median_ms(F&& launch, int reps) {
  std::vector<cudaEvent_t> ev(reps + 1);
  for (auto& e : ev) PROBE_CHECK(cudaEventCreate(&e));
  launch();
  PROBE_CHECK(cudaDeviceSynchronize());
  PROBE_CHECK(cudaEventRecord(ev[0]));
  for (int r = 0; r < reps; ++r) {
    launch();
    PROBE_CHECK(cudaEventRecord(ev[r + 1]));
  }
  PROBE_CHECK(cudaDeviceSynchronize());
  PROBE_CHECK(cudaGetLastError());
  std::vector<float> ms(reps);
  for (int r = 0; r < reps; ++r) PROBE_CHECK(cudaEventElapsedTime(&ms[r], ev[r], ev[r + 1]));
  for (auto& e : ev) PROBE_CHECK(cudaEventDestroy(e));
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

// The read ceiling: a grid-stride sum of n float4, U 16-byte loads per thread and round (Stream:
// cache-streaming loads), one partial per block.
template <int U, bool Stream>
__global__ void __launch_bounds__(256) sum_plain(const float4* __restrict__ s, float* __restrict__ part, int64_t n) {
  float acc = 0.f;
  for (int64_t b = blockIdx.x * int64_t(blockDim.x) * U + threadIdx.x; b < n; b += int64_t(gridDim.x) * blockDim.x * U) {
    float4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = b + u * int64_t(blockDim.x);
      v[u] = i < n ? (Stream ? __ldcs(s + i) : s[i]) : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) acc += (v[u].x + v[u].y) + (v[u].z + v[u].w);
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  __shared__ float w[8];
  if ((threadIdx.x & 31) == 0) w[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int i = 0; i < 8; ++i) t += w[i];
    part[blockIdx.x] = t;
  }
}

// The stencil probes' reference: the K x K box with a zero boundary, one output per thread (grid:
// nx / blockDim.x blocks across, ny down), fp32 accumulation in row-major tap order.
template <int K, typename T>
__global__ void probe_reference_box(const T* x, float* out, const float* w, int ny, int nx) {
  constexpr int R = K / 2;
  const int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
  if (j >= nx) return;
  float acc = 0.f;
  for (int a = 0; a < K; ++a)
    for (int c = 0; c < K; ++c) {
      const int y = i + a - R, xx = j + c - R;
      if (y >= 0 && y < ny && xx >= 0 && xx < nx) acc += w[a * K + c] * static_cast<float>(x[int64_t(y) * nx + xx]);
    }
  out[int64_t(i) * nx + j] = acc;
}

// The probes' data: a hash of the index mapped to [-1, 1) (no zeros, no pattern a kernel could
// shortcut), and a constant (poison before a kernel writes).
template <typename T>
__global__ void probe_fill_random(T* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = static_cast<T>(static_cast<float>(h & 0xffffu) / 32768.0f - 1.0f);
  }
}

template <typename T>
__global__ void probe_fill_value(T* p, int64_t n, float v) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = static_cast<T>(v);
}

// The stencil probes' check: every output within tol * (1 + |ref|) of the reference and, where
// `base` is given, bit for bit equal to it (a kernel that adds in the same order); prints FAIL and
// exits otherwise.
static __global__ void probe_compare(const float* out, const float* base, const float* ref, int64_t n, float tol,
                                     unsigned long long* bad) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if (!(fabsf(out[i] - ref[i]) <= tol * (1.f + fabsf(ref[i])))) atomicAdd(bad, 1ull);
    if (base != nullptr && __float_as_uint(out[i]) != __float_as_uint(base[i])) atomicAdd(bad + 1, 1ull);
  }
}

inline void probe_check(const float* out, const float* base, const float* ref, int64_t n, float tol, const char* what) {
  unsigned long long* bad;
  PROBE_CHECK(cudaMalloc(&bad, 16));
  PROBE_CHECK(cudaMemset(bad, 0, 16));
  probe_compare<<<1024, 256>>>(out, base, ref, n, tol, bad);
  unsigned long long h[2];
  PROBE_CHECK(cudaMemcpy(h, bad, 16, cudaMemcpyDeviceToHost));
  PROBE_CHECK(cudaFree(bad));
  if (h[0] != 0 || h[1] != 0) {
    std::printf("FAIL %s: %llu outputs off the reference, %llu differ from the base\n", what, h[0], h[1]);
    std::exit(1);
  }
}

// The fp32 box probes' buffers: an ny x nx plane of probe_fill_random data, outputs, a base (an
// earlier configuration's outputs or a copy's destination) and the reference of the K x K box with
// weights |w| < 2 that no power of two scales to exact values.
struct ProbeBoxBuffers {
  float *x, *out, *base, *ref, *w;
  int64_t ny, nx;
};

template <int K>
ProbeBoxBuffers probe_box_buffers(int64_t ny, int64_t nx) {
  ProbeBoxBuffers b;
  b.ny = ny;
  b.nx = nx;
  const int64_t n = ny * nx;
  for (float** q : {&b.x, &b.out, &b.base, &b.ref}) PROBE_CHECK(cudaMalloc(q, n * sizeof(float)));
  PROBE_CHECK(cudaMalloc(&b.w, K * K * sizeof(float)));
  probe_fill_random<<<1024, 256>>>(b.x, n, 12345u);
  float w[K * K];
  for (int i = 0; i < K * K; ++i) w[i] = static_cast<float>((i * 37) % 17 - 8) / 4.1f;
  PROBE_CHECK(cudaMemcpy(b.w, w, sizeof(w), cudaMemcpyHostToDevice));
  probe_reference_box<K><<<dim3(static_cast<unsigned>((nx + 255) / 256), static_cast<unsigned>(ny)), 256>>>(
      b.x, b.ref, b.w, static_cast<int>(ny), static_cast<int>(nx));
  PROBE_CHECK(cudaGetLastError());
  return b;
}
