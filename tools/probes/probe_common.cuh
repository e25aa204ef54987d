// What the probes in tools/probes share: an error check, the median of queued launches timed
// with CUDA events, and the read-ceiling kernel (a grid-stride sum of 16-byte loads).
#pragma once

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
