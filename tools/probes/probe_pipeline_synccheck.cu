// Build and run (compute-sanitizer; tools/gpu_check.sh step `sanitize` runs it too):
//   nvcc -std=c++17 -arch=sm_90a -o /tmp/probe_sync tools/probes/probe_pipeline_synccheck.cu && compute-sanitizer --tool synccheck /tmp/probe_sync pipeline
//   modes: pipeline | barrier | barrier_ring [stages tile_bytes blocks tiles] | barrier_ring4 [...]
// Minimal kernels in the CUDA programming guide's patterns, with no cupipe code: whether synccheck
// reports "Missing wait" on libcu++'s primitives themselves.
//   pipeline:      cuda::pipeline<thread_scope_block>, unified producer/consumer, 2 stages, every
//                  acquire committed, every wait released;
//   barrier:       cuda::memcpy_async(block, ..., barrier) + barrier.arrive_and_wait() per tile;
//   barrier_ring:  the same shaped like cupipe's barrier ring;
//   barrier_ring4: the same with 4-byte alignment (libcu++'s LDGSTS path).
#include <cooperative_groups.h>
#include <cuda/barrier>
#include <cuda/pipeline>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

// The guide's __shared__ pipeline states and barriers have constructors (init() sets them up):
// nvcc's warning 20054 about their dynamic initialization is expected.
#pragma nv_diag_suppress 20054

namespace cg = cooperative_groups;

__global__ void probe(const float* in, float* out, int ntiles) {
  constexpr int kStages = 2, kTile = 256;
  __shared__ float buf[kStages][kTile];
  __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, kStages> state;
  auto block = cg::this_thread_block();
  auto pipe = cuda::make_pipeline(block, &state);
  int fetched = 0;
  for (int k = 0; k < ntiles; ++k) {
    for (; fetched < ntiles && fetched < k + kStages; ++fetched) {
      pipe.producer_acquire();
      cuda::memcpy_async(block, buf[fetched % kStages], in + fetched * kTile, sizeof(float) * kTile, pipe);
      pipe.producer_commit();
    }
    pipe.consumer_wait();
    out[k * kTile + threadIdx.x] = buf[k % kStages][threadIdx.x] * 2.f;
    pipe.consumer_release();
  }
}

__global__ void probe_barrier(const float* in, float* out, int ntiles) {
  constexpr int kTile = 256;
  __shared__ float buf[kTile];
  __shared__ cuda::barrier<cuda::thread_scope_block> bar;
  auto block = cg::this_thread_block();
  if (block.thread_rank() == 0) init(&bar, block.size());
  block.sync();
  for (int k = 0; k < ntiles; ++k) {
    cuda::memcpy_async(block, buf, in + k * kTile, cuda::aligned_size_t<16>(sizeof(float) * kTile), bar);
    bar.arrive_and_wait();
    out[k * kTile + threadIdx.x] = buf[threadIdx.x] * 2.f;
    block.sync();  // buf is refilled next
  }
}

// The barrier probe shaped like cupipe's `barrier` ring: a ring of S barriers over S stages of
// dynamic shared memory, `tile_bytes` per stage, tile k+S-1 issued after the wait for tile k,
// `tiles` tiles in each of `blocks` blocks. Differences from probe_barrier narrow down what
// synccheck reports.
// Align = 16 takes libcu++'s bulk-copy path on sm_90 (one thread, complete_tx); Align = 4 its
// LDGSTS path (every thread copies, then cp.async.mbarrier.arrive), which cupipe's barrier ring
// takes for 4- and 8-byte copy widths.
template <int S, int Align>
__global__ void probe_barrier_ring(const char* in, char* out, int tiles, int tile_bytes) {
  extern __shared__ __align__(128) char stages[];
  __shared__ cuda::barrier<cuda::thread_scope_block> bar[S];
  auto block = cg::this_thread_block();
  if (block.thread_rank() == 0)
    for (int s = 0; s < S; ++s) init(&bar[s], block.size());
  block.sync();
  const char* src = in + static_cast<size_t>(blockIdx.x) * tiles * tile_bytes;
  char* dst = out + static_cast<size_t>(blockIdx.x) * tiles * tile_bytes;
  auto produce = [&](int k) {
    cuda::memcpy_async(block, stages + (k % S) * tile_bytes, src + static_cast<size_t>(k) * tile_bytes,
                       cuda::aligned_size_t<Align>(tile_bytes), bar[k % S]);
  };
  int fetched = 0;
  for (; fetched < S - 1 && fetched < tiles; ++fetched) produce(fetched);
  for (int k = 0; k < tiles; ++k) {
    if (S == 1) produce(fetched++);
    bar[k % S].arrive_and_wait();
    if (S > 1 && fetched < tiles) produce(fetched++);
    for (int i = threadIdx.x; i < tile_bytes / 4; i += blockDim.x)
      reinterpret_cast<float*>(dst + static_cast<size_t>(k) * tile_bytes)[i] =
          reinterpret_cast<const float*>(stages + (k % S) * tile_bytes)[i];
    if (S == 1) block.sync();
  }
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "pipeline";
  // barrier_ring [stages [tile_bytes [blocks [tiles]]]]
  const int stages = argc > 2 ? std::atoi(argv[2]) : 2, tile = argc > 3 ? std::atoi(argv[3]) : 8192;
  const int blocks = argc > 4 ? std::atoi(argv[4]) : 20, tiles = argc > 5 ? std::atoi(argv[5]) : 1;
  const size_t n = std::max<size_t>(8 * 256 * sizeof(float), static_cast<size_t>(blocks) * tiles * tile);
  char *in, *out;
  cudaMalloc(&in, n);
  cudaMalloc(&out, n);
  cudaMemset(in, 0, n);
  if (std::strcmp(mode, "barrier") == 0) {
    probe_barrier<<<1, 256>>>(reinterpret_cast<float*>(in), reinterpret_cast<float*>(out), 8);
  } else if (std::strncmp(mode, "barrier_ring", 12) == 0) {  // barrier_ring (16-byte) or barrier_ring4
    const size_t smem = static_cast<size_t>(stages) * tile;
    auto go = [&](auto kernel) {
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      kernel<<<blocks, 256, smem>>>(in, out, tiles, tile);
    };
    const bool ldgsts = std::strcmp(mode, "barrier_ring4") == 0;
    if (stages == 1) ldgsts ? go(probe_barrier_ring<1, 4>) : go(probe_barrier_ring<1, 16>);
    else if (stages == 2) ldgsts ? go(probe_barrier_ring<2, 4>) : go(probe_barrier_ring<2, 16>);
    else ldgsts ? go(probe_barrier_ring<3, 4>) : go(probe_barrier_ring<3, 16>);
  } else {
    probe<<<1, 256>>>(reinterpret_cast<float*>(in), reinterpret_cast<float*>(out), 8);
  }
  const cudaError_t err = cudaDeviceSynchronize();
  std::printf("probe %s (stages %d, tile %d, blocks %d, tiles %d): %s\n", mode, stages, tile, blocks, tiles,
              cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}
