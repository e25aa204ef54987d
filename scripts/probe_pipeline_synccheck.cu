// Minimal kernels in the CUDA programming guide's patterns, with no cupipe code, to check whether
// compute-sanitizer --tool synccheck reports "Missing wait" on libcu++'s primitives themselves:
//   pipeline: cuda::pipeline<thread_scope_block>, unified producer/consumer, 2 stages, every
//             acquire committed, every wait released;
//   barrier:  cuda::memcpy_async(block, ..., barrier) + barrier.arrive_and_wait() per tile.
// Build and run:
//   nvcc -std=c++17 -arch=sm_90 -o /tmp/probe scripts/probe_pipeline_synccheck.cu
//   compute-sanitizer --tool synccheck /tmp/probe pipeline      (or: barrier)
#include <cooperative_groups.h>
#include <cuda/barrier>
#include <cuda/pipeline>
#include <cstdio>
#include <cstring>

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

int main(int argc, char** argv) {
  const bool barrier = argc > 1 && std::strcmp(argv[1], "barrier") == 0;
  const int ntiles = 8, n = ntiles * 256;
  float *in, *out;
  cudaMalloc(&in, n * sizeof(float));
  cudaMalloc(&out, n * sizeof(float));
  cudaMemset(in, 0, n * sizeof(float));
  if (barrier)
    probe_barrier<<<1, 256>>>(in, out, ntiles);
  else
    probe<<<1, 256>>>(in, out, ntiles);
  const cudaError_t err = cudaDeviceSynchronize();
  std::printf("probe %s: %s\n", barrier ? "barrier" : "pipeline", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}
