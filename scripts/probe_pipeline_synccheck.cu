// A minimal cuda::pipeline<thread_scope_block> kernel in the CUDA programming guide's pattern
// (unified producer/consumer, 2 stages, every acquire committed, every wait released), with no
// cupipe code, to check whether compute-sanitizer --tool synccheck reports "Missing wait" on
// cuda::pipeline itself. Build and run:
//   nvcc -std=c++17 -arch=sm_90 -o /tmp/probe scripts/probe_pipeline_synccheck.cu
//   compute-sanitizer --tool synccheck /tmp/probe
#include <cooperative_groups.h>
#include <cuda/pipeline>
#include <cstdio>

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

int main() {
  const int ntiles = 8, n = ntiles * 256;
  float *in, *out;
  cudaMalloc(&in, n * sizeof(float));
  cudaMalloc(&out, n * sizeof(float));
  cudaMemset(in, 0, n * sizeof(float));
  probe<<<1, 256>>>(in, out, ntiles);
  const cudaError_t err = cudaDeviceSynchronize();
  std::printf("probe: %s\n", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}
