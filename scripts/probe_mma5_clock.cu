// The SM clock inside the fp16 5x5 tensor-core kernel, back to back against spaced calls (a
// 50 us one-thread spin before each, as the suite times; or a 50 us spin of one warp on every SM,
// so that no SM idles between calls): does the two-term kernel's spaced-call cost
// (docs/perf_notes.md, twenty-ninth and thirtieth runs) come with a lower clock, or with more
// cycles at the same clock?
//
// Every block's thread 0 reads clock64 and %globaltimer when the block starts and after its last
// tile (a barrier first), and adds the differences to two counters: cycles / nanoseconds is the
// clock the blocks saw, averaged over their lives, at the timer's resolution (tens of ns) rather
// than NVML's sampling (milliseconds). The stamps need two hooks in stencil_kernel, which the
// library does not carry: scripts/probe_mma5_clock.sh builds this file against a copy of
// csrc/kernels/stencil.cuh with the hooks inserted (CUPIPE_PROBE_BLOCK_BEGIN / _END).
//
//   bash scripts/probe_mma5_clock.sh   (builds .probe_bin/mma5_clock)
//   .probe_bin/mma5_clock [n = 16384] [reps = 60] [rounds = 3]
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

__device__ unsigned long long g_probe_clock[3];  // cycles, nanoseconds, blocks

__device__ __forceinline__ unsigned long long probe_globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

#define CUPIPE_PROBE_BLOCK_BEGIN                                               \
  unsigned long long probe_c0 = 0, probe_t0 = 0;                               \
  if (threadIdx.x == 0) {                                                      \
    probe_t0 = probe_globaltimer();                                            \
    probe_c0 = clock64();                                                      \
  }
#define CUPIPE_PROBE_BLOCK_END                                                 \
  __syncthreads();                                                             \
  if (threadIdx.x == 0) {                                                      \
    const unsigned long long c1 = clock64(), t1 = probe_globaltimer();         \
    atomicAdd(&g_probe_clock[0], c1 - probe_c0);                               \
    atomicAdd(&g_probe_clock[1], t1 - probe_t0);                               \
    atomicAdd(&g_probe_clock[2], 1ull);                                        \
  }

#include "kernels/stencil.cuh"
#include "probe_common.cuh"

#ifndef CUPIPE_PROBE_HOOKED
#error "build with scripts/probe_mma5_clock.sh: stencil_kernel needs the probe's hooks"
#endif

using namespace cupipe;
using namespace cupipe::kernels;
using T = __half;
constexpr engine::Mechanism kMech = engine::Mechanism::Tma;

__global__ void spin_ns(unsigned long long ns) {
  const unsigned long long t0 = probe_globaltimer();
  while (probe_globaltimer() - t0 < ns) {
  }
}

struct Case {
  const char* name;
  bool exact;  // weights exact in fp16: the one-term kernel
};

struct Result {
  float ms;
  double mhz, kcycles;  // the blocks' clock and cycles per block (thousands)
};

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 16384;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 60;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 3;
  const int64_t count = n * n;
  T *x, *out;
  float* wd[2];
  PROBE_CHECK(cudaMalloc(&x, count * sizeof(T)));
  PROBE_CHECK(cudaMalloc(&out, count * sizeof(T)));
  probe_fill_random<<<1024, 256>>>(x, count, 12345u);
  for (int e = 0; e < 2; ++e) {  // the other probe's weights: /4.1 needs two terms, quarters one
    float w[25];
    for (int i = 0; i < 25; ++i) w[i] = static_cast<float>((i * 37) % 17 - 8) / (e ? 4.f : 4.1f);
    PROBE_CHECK(cudaMalloc(&wd[e], sizeof(w)));
    PROBE_CHECK(cudaMemcpy(wd[e], w, sizeof(w), cudaMemcpyHostToDevice));
  }
  const DeviceInfo dev = device_info(current_device());

  // The launcher's narrow tensor-core configuration (tma, two stages, 128 threads, persistent).
  auto setup = [&](bool exact, auto kernel, StencilGeom& g, CUtensorMap& tmap, int64_t& grid, size_t& smem) {
    StencilParams p;
    p.x = x; p.out = out; p.weights = wd[exact]; p.dtype = DType::F16;
    p.batch = 1; p.ny = n; p.nx = n; p.ry = 2; p.rx = 2; p.boundary = Boundary::Zero;
    p.mechanism = kMech; p.stages = 2;
    g = make_stencil_geom(p, sizeof(T), sizeof(float), engine::consumer_threads(kMech, kMmaNarrowThreads),
                          dev.max_smem_optin - 1024, 128, 32);
    g.fixed = choose_fixed(g, p.x, sizeof(T));
    g.tensor_tiles = g.pitch / tensor_map_unit(sizeof(T)) <= 256;
    choose_mma(g, p, dev, 2, 0);
    if (g.fixed != StencilFixed::Mma || !g.tensor_tiles) {
      std::fprintf(stderr, "not the tensor-core configuration\n");
      std::exit(1);
    }
    tmap = make_plane_map(p.x, p.dtype, sizeof(T), 1, p.ny, p.nx, g.pitch, g.win_h, stencil_l2_promotion(dev));
    smem = 2 * static_cast<size_t>(g.stage_bytes) + g.weight_bytes + g.frag_bytes;
    prepare_smem(kernel, smem, "probe");
    grid = std::min<int64_t>(int64_t(dev.num_sms) * blocks_per_sm(kernel, kMmaNarrowThreads, smem), g.ntiles);
    if (grid < g.ntiles) grid = column_coprime_grid(grid, g.tiles_x);
    set_block_tiles(g, grid);
  };

  // spaced: 0 back to back, 1 a one-thread spin before each call, 2 a spin on every SM.
  auto measure = [&](bool exact, int spaced) -> Result {
    StencilGeom g;
    CUtensorMap tmap{};
    int64_t grid;
    size_t smem;
    auto k2 = stencil_kernel<kMech, 2, T, true, -5, kMmaNarrowThreads>;
    auto k1 = stencil_kernel<kMech, 2, T, true, -5, kMmaNarrowThreads, 1>;
    auto kernel = exact ? k1 : k2;
    setup(exact, kernel, g, tmap, grid, smem);
    auto launch = [&] {
      kernel<<<static_cast<unsigned>(grid), kMmaNarrowThreads, smem>>>(x, out, wd[exact], g, Boundary::Zero, tmap);
    };
    launch();  // warm-up
    PROBE_CHECK(cudaDeviceSynchronize());
    const unsigned long long zero[3] = {0, 0, 0};
    PROBE_CHECK(cudaMemcpyToSymbol(g_probe_clock, zero, sizeof(zero)));
    std::vector<cudaEvent_t> ev(2 * reps);
    for (auto& e : ev) PROBE_CHECK(cudaEventCreate(&e));
    for (int r = 0; r < reps; ++r) {
      if (spaced) spin_ns<<<spaced == 1 ? 1 : dev.num_sms, spaced == 1 ? 1 : 32>>>(50000);
      if (spaced || r == 0) PROBE_CHECK(cudaEventRecord(ev[2 * r]));
      launch();
      PROBE_CHECK(cudaEventRecord(ev[2 * r + 1]));
    }
    PROBE_CHECK(cudaDeviceSynchronize());
    PROBE_CHECK(cudaGetLastError());
    std::vector<float> ms(reps);
    for (int r = 0; r < reps; ++r)  // back to back: from the previous call's end
      PROBE_CHECK(cudaEventElapsedTime(&ms[r], spaced || r == 0 ? ev[2 * r] : ev[2 * r - 1], ev[2 * r + 1]));
    for (auto& e : ev) PROBE_CHECK(cudaEventDestroy(e));
    std::sort(ms.begin(), ms.end());
    unsigned long long c[3];
    PROBE_CHECK(cudaMemcpyFromSymbol(c, g_probe_clock, sizeof(c)));
    return {ms[reps / 2], 1e3 * double(c[0]) / double(c[1]), 1e-3 * double(c[0]) / double(c[2])};
  };

  const Case cases[] = {{"fp16 5x5 two terms", false}, {"fp16 5x5 one term", true}};
  std::printf("%lld^2 fp16, reps %d; clock and cycles: every block's thread 0, start to after its last tile\n",
              static_cast<long long>(n), reps);
  std::printf("%-20s %6s %-11s %9s %9s %13s\n", "case", "round", "pattern", "ms", "MHz", "kcycles/block");
  for (int round = 0; round < rounds; ++round)
    for (const Case& cs : cases)
      for (int o = 0; o < 3; ++o) {
        const int spaced = (o + round) % 3;  // the order rotates by round
        const Result r = measure(cs.exact, spaced);
        std::printf("%-20s %6d %-11s %9.4f %9.1f %13.1f\n", cs.name, round,
                    spaced == 0 ? "b2b" : spaced == 1 ? "spaced" : "spaced-all", r.ms, r.mhz, r.kcycles);
      }
  return 0;
}
