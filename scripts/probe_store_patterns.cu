// Write-only patterns over an 8192 x 8192 fp16 plane (128 MiB): what the stores alone can reach,
// and what the narrow tensor-core stencil kernels' output pattern costs (persistent 128-thread
// blocks, 32 x 128 tiles in row-major order, each warp storing 8 rows as two 128-byte warp stores,
// tiles starting `phase` columns left of a 128-column grid), against cudaMemsetAsync and plain
// fills. A phase that is not a multiple of 16 columns puts every tile edge inside a 32-byte
// sector that two blocks write in part (sixteenth run: half the speed of sector-aligned tiles).
// "16 B/lane" skips the stores that would be misaligned (a bound, not a copy of the outputs).
//
//   nvcc -O3 -arch=sm_90a -o /tmp/probe_stores scripts/probe_store_patterns.cu && /tmp/probe_stores
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>

#include "probe_common.cuh"
#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s\n", cudaGetErrorString(e)); return 1; } } while (0)
constexpr int64_t NY = 8192, NX = 8192;
constexpr int kReps = 50;  // repetitions per median

__global__ void fill16(uint4* p, int64_t n) {  // 16 bytes per thread, grid-stride
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = make_uint4(i, 1, 2, 3);
}
__global__ void fill4(uint32_t* p, int64_t n) {  // 4 bytes per thread, grid-stride
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = static_cast<uint32_t>(i);
}
// The MMA kernel's pattern: persistent blocks of 128 threads, tiles of 32 x 128 outputs in
// row-major tile order (tile = block + k * grid), x0 = tx * 128 - phase; warp w stores rows
// 8w .. 8w + 7, each as two 128-byte stores (lane l: columns 2l, 2l + 1 and 64 + ...).
// V = 16: each row as one 256-byte... two rows per 16-byte store instruction.
template <int V>
__global__ void __launch_bounds__(128) tiles(uint16_t* out, int phase, int64_t ntiles, int tiles_x) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
    const int64_t ty = t / tiles_x, tx = t % tiles_x;
    const int64_t y0 = ty * 32 + warp * 8, x0 = tx * 128 - phase;
    const bool inside = x0 >= 0 && x0 + 128 <= NX;
    if (V == 4) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        uint16_t* p = out + (y0 + i) * NX + x0 + 2 * lane;
        if (inside) {
          *reinterpret_cast<uint32_t*>(p) = 0x3c003c00u + i;
          *reinterpret_cast<uint32_t*>(p + 64) = 0x3c003c00u + i;
        }
      }
    } else {  // 16 bytes per lane: lanes 0-15 row i, 16-31 row i + 1
#pragma unroll
      for (int i = 0; i < 8; i += 2) {
        uint16_t* p = out + (y0 + i + (lane >> 4)) * NX + x0 + 8 * (lane & 15);
        if (inside && (reinterpret_cast<uintptr_t>(p) & 15) == 0) *reinterpret_cast<uint4*>(p) = make_uint4(i, 1, 2, 3);
      }
    }
  }
}
// The same tiles stored as 16-byte aligned vectors: each row's 256 bytes [s, s + 256) by lanes of
// chunk c = 16-byte column chunk; chunks wholly inside as one uint4, the (at most two) partial
// chunks at the ends element by element (2-byte stores). H rows per warp round, 8 per warp.
__global__ void __launch_bounds__(128) tiles_aligned(uint16_t* out, int phase, int64_t ntiles, int tiles_x) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
    const int64_t ty = t / tiles_x, tx = t % tiles_x;
    const int64_t y0 = ty * 32 + warp * 8, x0 = tx * 128 - phase;
    if (x0 < 0 || x0 + 128 > NX) continue;
    const int64_t c0 = x0 >> 3, c1 = (x0 + 128 + 7) >> 3;  // 16-byte chunks touched (<= 17)
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
      const int64_t row = y0 + i + (lane >> 4);
      for (int64_t c = c0 + (lane & 15); c < c1; c += 16) {
        uint16_t* p = out + row * NX + c * 8;
        const int64_t lo = c * 8, hi = lo + 8;
        if (lo >= x0 && hi <= x0 + 128) {
          *reinterpret_cast<uint4*>(p) = make_uint4(i, 1, 2, 3);
        } else {
          for (int e = 0; e < 8; ++e)
            if (lo + e >= x0 && lo + e < x0 + 128) p[e] = 0x3c00;
        }
      }
    }
  }
}
int main() {
  uint16_t *a, *b;
  const int64_t bytes = NY * NX * 2;
  CHECK(cudaMalloc(&a, bytes)); CHECK(cudaMalloc(&b, bytes));
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  auto rep = [&](const char* name, float ms) { printf("%-44s %8.4f ms %6.0f GB/s written\n", name, ms, bytes / ms / 1e6); };
  rep("cudaMemcpyAsync (read + write; GB/s of one side)", probe_median_ms([&] { cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice); }, kReps));
  rep("cudaMemsetAsync", probe_median_ms([&] { cudaMemsetAsync(a, 1, bytes); }, kReps));
  for (int bps : {4, 8, 16}) {
    char n[64];
    snprintf(n, 64, "fill 16 B/thread, 256 thr, %d blk/SM", bps);
    rep(n, probe_median_ms([&] { fill16<<<sms * bps, 256>>>(reinterpret_cast<uint4*>(a), bytes / 16); }, kReps));
    snprintf(n, 64, "fill 4 B/thread, 256 thr, %d blk/SM", bps);
    rep(n, probe_median_ms([&] { fill4<<<sms * bps, 256>>>(reinterpret_cast<uint32_t*>(a), bytes / 4); }, kReps));
  }
  for (int phase : {0, 30, 32, 62, 2, 4, 6, 8, 14, 16}) {
    const int tiles_x = (NX + phase + 127) / 128;
    const int64_t ntiles = int64_t(NY / 32) * tiles_x;
    for (int bps : {4, 8}) {
      char n[64];
      snprintf(n, 64, "MMA tiles 4 B/lane phase %d, %d blk/SM", phase, bps);
      rep(n, probe_median_ms([&] { tiles<4><<<sms * bps, 128>>>(a, phase, ntiles, tiles_x); }, kReps));
      snprintf(n, 64, "MMA tiles 16 B/lane phase %d, %d blk/SM", phase, bps);
      rep(n, probe_median_ms([&] { tiles<16><<<sms * bps, 128>>>(a, phase, ntiles, tiles_x); }, kReps));
      snprintf(n, 64, "tiles, aligned 16 B + edges, phase %d, %d blk/SM", phase, bps);
      rep(n, probe_median_ms([&] { tiles_aligned<<<sms * bps, 128>>>(a, phase, ntiles, tiles_x); }, kReps));
    }
  }
  CHECK(cudaGetLastError());
  return 0;
}
