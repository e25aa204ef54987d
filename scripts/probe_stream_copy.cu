// stream_copy's launcher outside torch, against cudaMemcpyAsync of the same 2^28 fp32 in the same
// run: the table's configuration (sync, one stage) and a few others, each output compared with
// the source byte for byte (poisoned first). Built against two csrc trees, it A/Bs a change to
// the copy kernel or its launcher in one device call.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Icsrc -o /tmp/probe_copy \
//       scripts/probe_stream_copy.cu csrc/kernels/device_info.cu
//   /tmp/probe_copy [reps = 50] [sweep]   (sweep: sync/1 and sync/2 over stage sizes and tiles per block)
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/stream_copy.cuh"
#include "probe_common.cuh"

using namespace cupipe;
using namespace cupipe::kernels;

__global__ void fill_random(uint32_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = h;
  }
}

__global__ void count_diff(const uint32_t* a, const uint32_t* b, int64_t n, unsigned long long* bad) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    if (a[i] != b[i]) atomicAdd(bad, 1ull);
}

template <engine::Mechanism M>
void run(const StreamCopyParams& p) {
  launch_stream_copy_mechanism<M>(p, 0);
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 50;
  const int64_t n = int64_t(1) << 28, bytes = n * 4;
  uint32_t *src, *dst;
  unsigned long long* bad;
  PROBE_CHECK(cudaMalloc(&src, bytes));
  PROBE_CHECK(cudaMalloc(&dst, bytes));
  PROBE_CHECK(cudaMalloc(&bad, sizeof(unsigned long long)));
  fill_random<<<1024, 256>>>(src, n, 4242u);
  const float memcpy_ms =
      probe_median_ms([&] { PROBE_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); }, reps);
  std::printf("2^28 fp32: cudaMemcpyAsync %.4f ms (%.0f GB/s read + write)\n", memcpy_ms, 2.0 * bytes / memcpy_ms / 1e6);
  struct Config {
    const char* name;
    engine::Mechanism m;
    int stages;
  };
  const Config configs[] = {{"sync/1 (the table's)", engine::Mechanism::Sync, 1},
                            {"sync/2", engine::Mechanism::Sync, 2},
                            {"primitives/2", engine::Mechanism::Primitives, 2},
                            {"tma/2", engine::Mechanism::Tma, 2}};
  struct Run {
    Config c;
    int tile_bytes, tiles_per_block;  // 0: the launcher's
  };
  std::vector<Run> runs;
  for (const Config& c : configs) runs.push_back({c, 0, 0});
  // The sweep's stage sizes and tiles per block: PROBE_TILES, PROBE_TPB (space-separated lists).
  auto list = [](const char* env, std::vector<int> dflt) {
    const char* e = std::getenv(env);
    if (e == nullptr) return dflt;
    std::vector<int> v;
    for (char* q = const_cast<char*>(e); *q;) {
      char* end;
      const long x = std::strtol(q, &end, 10);
      if (end == q) break;
      v.push_back(static_cast<int>(x));
      q = end;
    }
    return v;
  };
  if (argc > 2 && std::string(argv[2]) == "sweep")
    for (int s = 0; s < 2; ++s)
      for (int tb : list("PROBE_TILES", {4096, 8192, 16384}))
        for (int tpb : list("PROBE_TPB", {1, 2, 4})) runs.push_back({configs[s], tb, tpb});
  for (const Run& run_cfg : runs) {
    const Config& c = run_cfg.c;
    StreamCopyParams p;
    p.src = src;
    p.dst = dst;
    p.bytes = bytes;
    p.mechanism = c.m;
    p.stages = c.stages;
    p.vec_bytes = 16;
    p.tile_bytes = run_cfg.tile_bytes;
    if (run_cfg.tiles_per_block > 0) {
      const int64_t ntiles = (bytes + run_cfg.tile_bytes - 1) / run_cfg.tile_bytes;
      p.max_blocks = static_cast<int>((ntiles + run_cfg.tiles_per_block - 1) / run_cfg.tiles_per_block);
    }
    PROBE_CHECK(cudaMemset(dst, 0xff, bytes));
    auto launch = [&] {
      switch (c.m) {
        case engine::Mechanism::Sync: run<engine::Mechanism::Sync>(p); break;
        case engine::Mechanism::Primitives: run<engine::Mechanism::Primitives>(p); break;
        default: run<engine::Mechanism::Tma>(p); break;
      }
    };
    const float ms = probe_median_ms(launch, reps);
    PROBE_CHECK(cudaMemset(dst, 0xff, bytes));
    launch();
    PROBE_CHECK(cudaMemset(bad, 0, sizeof(unsigned long long)));
    count_diff<<<1024, 256>>>(src, dst, n, bad);
    unsigned long long h = 0;
    PROBE_CHECK(cudaMemcpy(&h, bad, sizeof h, cudaMemcpyDeviceToHost));
    std::printf("%-22s %6d %3d %.4f ms %.4fx of cudaMemcpyAsync%s\n", c.name, run_cfg.tile_bytes, run_cfg.tiles_per_block,
                ms, memcpy_ms / ms, h ? "  FAIL (words differ)" : "");
  }
  return 0;
}
