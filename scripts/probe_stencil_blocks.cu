// What the block size buys the fixed 3x3 and 5x5 stencil consumers (and, with PROBE_MMA, the
// tensor-core consumers of fp16/bf16 boxes), outside the torch extension:
// cupipe's own kernel template (stencil.cuh), general (NarrowK 0) or narrow (the fixed consumer
// alone, NarrowK = K), at 64, 128 and 256 threads per block (tiles of 16, 32 and 64 rows; the
// same registers per thread, so more blocks per SM for smaller blocks) over stage counts and
// tiles per block, on an 8192 x 8192 plane, against cudaMemcpyAsync of the same bytes in the
// same run. Every configuration's output is compared
// with a plain reference kernel (fp32 accumulation; tolerance in check()) and with the
// launcher's configuration (256 threads, 2 stages) bit for bit (every variant adds a point's
// products in the same order). Median of queued repetitions
// (CUDA events between launches), fresh random data.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Icsrc -DPROBE_DTYPE=0 -DPROBE_MECH=Primitives \
//        -o /tmp/probe_f32 scripts/probe_stencil_blocks.cu csrc/kernels/device_info.cu
//   /tmp/probe_f32 [reps = 30]
// PROBE_DTYPE: 0 fp32, 1 fp16, 2 bf16. PROBE_MECH: Primitives or Tma (an engine::Mechanism enumerator).
// PROBE_K: 3 or 5 (the box); 7 or 9 with PROBE_MMA (the tensor-core kernels only).
// PROBE_EXACT=1: weights exact in fp16 and bf16 (quarters; the narrow kernels with one weight
// term); 2: a box filter, 1 / K^2. PROBE_QUICK=1 (with PROBE_MMA): the launcher's narrow
// tensor-core configuration only (128 threads, two stages); 2: that and smaller tiles through
// deeper rings.
// PROBE_BOUND (environment): report a failed check and go on (variants that compute wrong outputs
// on purpose, timed as bounds).
// PROBE_QUICK=1 without PROBE_MMA: the narrow kernel at its launcher block size only, one and two
// stages.
// PROBE_WIDE=1: tiles 256 columns wide (64 items of 4 across) against the launcher's 128, for the
// narrow CUDA-core kernel (or with PROBE_MMA the narrow tensor-core one) only; tiles/blk -1000 is
// a persistent grid of equal shares, -1 one wave less one block.
// PROBE_WIDE=2 with PROBE_MMA: the narrow tensor-core kernel compiled for more resident warps
// (16: the launcher's 128 registers, rounds of 8 rows; with PROBE_RESIDENT_ALL=1 also 24 and 32:
// 80 and 64 registers, rounds of 4 rows, which spill), one and two stages, 32 x 128 and 32 x 256
// tiles, persistent and short-lived blocks; PROBE_RESIDENT_ALL=2: instead, 256-thread blocks on
// 64 x 256, 64 x 128 and 32 x 256 tiles.
// PROBE_PICK=i (environment): in the wide and resident sweeps, only the i-th row (from 0), so that
// ncu finds it as the third stencil_kernel launch (--launch-skip 2 --launch-count 1: the launcher's
// configuration runs twice first, a warm-up and one repetition with reps = 1).
// PROBE_MMA=1 (fp16, bf16): the tensor-core consumer, narrow (NarrowK = -K) and general, instead of
// the CUDA cores', compared with the reference and bit for bit with the first such configuration.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/stencil.cuh"
#include "probe_common.cuh"

#ifndef PROBE_DTYPE
#define PROBE_DTYPE 0
#endif
#ifndef PROBE_K
#define PROBE_K 3
#endif
#ifndef PROBE_MMA
#define PROBE_MMA 0
#endif
#ifndef PROBE_QUICK
#define PROBE_QUICK 0
#endif
#ifndef PROBE_EXACT
#define PROBE_EXACT 0
#endif
#ifndef PROBE_RESIDENT_ALL
#define PROBE_RESIDENT_ALL 0
#endif
#ifndef PROBE_WIDE
#define PROBE_WIDE 0
#endif
#ifndef PROBE_MECH
#define PROBE_MECH Primitives
#endif

using namespace cupipe;
using namespace cupipe::kernels;

#if PROBE_DTYPE == 0
using T = float;
constexpr DType kDType = DType::F32;
#elif PROBE_DTYPE == 1
using T = __half;
constexpr DType kDType = DType::F16;
#else
using T = __nv_bfloat16;
constexpr DType kDType = DType::BF16;
#endif
constexpr engine::Mechanism kMech = engine::Mechanism::PROBE_MECH;
constexpr int K = PROBE_K, R = K / 2;
// The launcher's kernel for the box: the narrow 3x3 kernel, the general kernel for 5x5.
constexpr int kLauncherNarrow = K == 3 ? 3 : 0;
int g_used_phase = 0;  // the last run's column phase (the tensor-core tiles')
int g_tile_h = 0, g_tile_w = 0;  // the last run's tile
constexpr int kBalanced = -1000;  // run()'s tiles_per_block: a persistent grid of equal shares

struct Buffers {
  T* x;
  T* out;
  T* base;  // the launcher's configuration's output
  float* ref;
  float* w;
  int64_t ny, nx;
};

// Mma: the tensor-core consumer (2-byte types): in the general kernel (NarrowK 0) or alone
// (NarrowK -K, the narrow tensor-core kernel).
template <int Threads, int S, int NarrowK, bool Mma = (NarrowK < 0), int Terms = kMmaTerms<T>,
          int Warps = stencil_min_warps<T, true, NarrowK>()>
float run(const Buffers& b, int tiles_per_block, int reps, int* blocks_out, int64_t* grid_out,
          int tile_threads = Threads, int box_cols = 32) {
  StencilParams p;
  p.x = b.x; p.out = b.out; p.weights = b.w; p.dtype = kDType;
  p.batch = 1; p.ny = b.ny; p.nx = b.nx; p.ry = R; p.rx = R; p.boundary = Boundary::Zero;
  p.mechanism = kMech; p.stages = S;
  const DeviceInfo dev = device_info(current_device());
  constexpr bool kTma = kMech == engine::Mechanism::Tma;
  StencilGeom g = make_stencil_geom(p, sizeof(T), sizeof(float), engine::consumer_threads(kMech, tile_threads),
                                    dev.max_smem_optin - 1024, kTma ? 128 : 16, box_cols);
  g.fixed = K <= 5 ? choose_fixed(g, p.x, sizeof(T)) : StencilFixed::None;  // 7x7, 9x9: the general consumer
  if (K <= 5 && g.fixed != (K == 3 ? StencilFixed::Box3x3 : StencilFixed::Box5x5)) {
    std::fprintf(stderr, "no fixed %dx%d consumer\n", K, K);
    std::exit(1);
  }
  CUtensorMap tmap{};
  g.tensor_tiles = kTma && g.pitch / tensor_map_unit(sizeof(T)) <= 256;
  if constexpr (Mma) {
    choose_mma(g, p, dev, S, 0);
    if (g.fixed != StencilFixed::Mma) {
      std::fprintf(stderr, "no tensor-core consumer\n");
      std::exit(1);
    }
  }
  g_used_phase = g.x_phase;
  if (g.tensor_tiles)
    tmap = make_plane_map(p.x, p.dtype, sizeof(T), 1, p.ny, p.nx, g.pitch, g.win_h,
                          probe_l2_promotion(stencil_l2_promotion(dev)));
  g_tile_h = g.tile_h;
  g_tile_w = g.tile_w;
  auto kernel = stencil_kernel<kMech, S, T, true, NarrowK, Threads, Terms, Warps>;
  const size_t smem = static_cast<size_t>(S) * g.stage_bytes + g.weight_bytes + g.frag_bytes;
  prepare_smem(kernel, smem, "probe");
  const int bps = blocks_per_sm(kernel, Threads, smem);
  int64_t grid = int64_t(dev.num_sms) * bps;
  if (tiles_per_block > 0) grid = std::max(grid, (g.ntiles + tiles_per_block - 1) / tiles_per_block);
  // Persistent variants: kBalanced, the fewest blocks that give every block the same tile count
  // as one wave does at most; -n, one wave less n blocks (a grid that is not a multiple of the
  // tile columns deals each block tiles of every column).
  if (tiles_per_block == kBalanced) grid = (g.ntiles + (g.ntiles + grid - 1) / grid - 1) / ((g.ntiles + grid - 1) / grid);
  else if (tiles_per_block < 0) grid += tiles_per_block;
  grid = std::min(grid, g.ntiles);
  set_block_tiles(g, grid);
  *blocks_out = bps;
  *grid_out = grid;
  auto launch = [&] {
    kernel<<<static_cast<unsigned>(grid), Threads, smem>>>(b.x, b.out, b.w, g, Boundary::Zero, tmap);
  };
  return probe_median_ms(launch, reps);
}

__global__ void compare(const T* out, const T* base, const float* ref, int64_t n, float tol, unsigned long long* bad_ref,
                        unsigned long long* bad_base) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float o = static_cast<float>(out[i]);
    if (!(fabsf(o - ref[i]) <= tol * (1.f + fabsf(ref[i])))) atomicAdd(bad_ref, 1ull);
    if (base != nullptr) {
      unsigned short a, c;
      if (sizeof(T) == 2) {
        a = reinterpret_cast<const unsigned short*>(out)[i];
        c = reinterpret_cast<const unsigned short*>(base)[i];
        if (a != c) atomicAdd(bad_base, 1ull);
      } else if (reinterpret_cast<const unsigned*>(out)[i] != reinterpret_cast<const unsigned*>(base)[i]) {
        atomicAdd(bad_base, 1ull);
      }
    }
  }
}

// fp32: the reference's order of the K x K products differs from the consumer's (a few ulp); fp16
// and bf16: plus the output's rounding (half an ulp: 2^-11 and 2^-8 relative).
constexpr float kTol = sizeof(T) == 4 ? 1e-5f : kDType == DType::F16 ? 1e-3f : 8e-3f;

void check(const Buffers& b, bool against_base, const char* what) {
  unsigned long long* bad;
  CUPIPE_CUDA_CHECK(cudaMalloc(&bad, 16));
  CUPIPE_CUDA_CHECK(cudaMemset(bad, 0, 16));
  compare<<<1024, 256>>>(b.out, against_base ? b.base : nullptr, b.ref, b.ny * b.nx, kTol, bad, bad + 1);
  unsigned long long h[2];
  CUPIPE_CUDA_CHECK(cudaMemcpy(h, bad, 16, cudaMemcpyDeviceToHost));
  CUPIPE_CUDA_CHECK(cudaFree(bad));
  if (h[0] != 0 || h[1] != 0) {
    std::printf("FAIL %s: %llu outputs off the reference, %llu differ from the launcher's configuration\n", what, h[0],
                h[1]);
    if (std::getenv("PROBE_BOUND") == nullptr) std::exit(1);  // PROBE_BOUND: a bound (wrong outputs), timed on
  }
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 30;
  Buffers b;
  b.ny = b.nx = 8192;
  const int64_t n = b.ny * b.nx;
  CUPIPE_CUDA_CHECK(cudaMalloc(&b.x, n * sizeof(T)));
  CUPIPE_CUDA_CHECK(cudaMalloc(&b.out, n * sizeof(T)));
  CUPIPE_CUDA_CHECK(cudaMalloc(&b.base, n * sizeof(T)));
  CUPIPE_CUDA_CHECK(cudaMalloc(&b.ref, n * sizeof(float)));
  CUPIPE_CUDA_CHECK(cudaMalloc(&b.w, K * K * sizeof(float)));
  probe_fill_random<<<1024, 256>>>(b.x, n, 12345u);
  float w[K * K];
  // Largest |w| ~1.95 (a common scale, like randn weights; the tensor-core kernels take it unscaled),
  // not exact in fp16 (both weight terms matter); with PROBE_EXACT=1 quarters up to 2, exact in
  // fp16 and bf16 (the tensor-core kernels' one-term path).
  for (int i = 0; i < K * K; ++i) w[i] = static_cast<float>((i * 37) % 17 - 8) / (PROBE_EXACT == 1 ? 4.f : 4.1f);
  if (PROBE_EXACT == 2)
    for (int i = 0; i < K * K; ++i) w[i] = 1.f / (K * K);  // a box filter (fp16 scales it by 2^4)
  CUPIPE_CUDA_CHECK(cudaMemcpy(b.w, w, sizeof(w), cudaMemcpyHostToDevice));
  probe_reference_box<K><<<dim3(static_cast<unsigned>(b.nx / 256), static_cast<unsigned>(b.ny)), 256>>>(b.x, b.ref, b.w,
                                                                                            int(b.ny), int(b.nx));
  CUPIPE_CUDA_CHECK(cudaGetLastError());

  // cudaMemcpyAsync of the same bytes (the suite's copy_), median of the same repetitions.
  const float copy_ms =
      probe_median_ms([&] { CUPIPE_CUDA_CHECK(cudaMemcpyAsync(b.base, b.x, n * sizeof(T), cudaMemcpyDeviceToDevice)); }, reps);

  int bps;
  int64_t grid;
  const float poison = sizeof(T) == 4 ? 1e30f : 60000.f;
  // The launcher's configuration first: its output is the bit-for-bit baseline.
  probe_fill_value<<<1024, 256>>>(b.out, n, poison);
  const float base_ms = run<256, 2, kLauncherNarrow>(b, 2, reps, &bps, &grid);
  check(b, false, "the launcher's kernel");
  CUPIPE_CUDA_CHECK(cudaMemcpy(b.base, b.out, n * sizeof(T), cudaMemcpyDeviceToDevice));
  std::printf("L2 promotion %d. ", static_cast<int>(probe_l2_promotion(stencil_l2_promotion(device_info(current_device())))));
  std::printf("%s %dx%d 8192^2, %s; cudaMemcpyAsync %.4f ms; the launcher's kernel (%s, 256 threads, 2 stages, 2 "
              "tiles per block) %.4f ms = %.3fx of the copy\n",
              sizeof(T) == 4 ? "fp32" : kDType == DType::F16 ? "fp16" : "bf16", K, K, engine::mechanism_name(kMech),
              copy_ms,
              kLauncherNarrow ? "narrow" : "general", base_ms, copy_ms / base_ms);
  std::printf("%8s %8s %6s %10s %8s %8s %6s %9s %8s\n", "kernel", "threads", "stages", "tiles/blk", "blk/SM", "grid",
              "phase", "ms", "x copy");
  auto row = [&](int narrow, int threads, int stages, int tpb, float ms) {
    std::printf("%8s %8d %6d %10d %8d %8lld %6d %9.4f %8.3f\n",
                narrow > 0 ? "narrow" : narrow < 0 ? "mma" : "general", threads, stages, tpb, bps,
                static_cast<long long>(grid), g_used_phase, ms, copy_ms / ms);
  };
  auto sweep = [&](auto narrow_c, auto threads_c, auto stages_c) {
    constexpr int N = decltype(narrow_c)::value, Th = decltype(threads_c)::value, S = decltype(stages_c)::value;
    for (int tpb : {1, 2, 4, 0}) {
      probe_fill_value<<<1024, 256>>>(b.out, n, poison);
      const float ms = run<Th, S, N>(b, tpb, reps, &bps, &grid);
      check(b, true, "a configuration");
      row(N, Th, S, tpb, ms);
    }
  };
  constexpr int kNarrow = K;
#if PROBE_WIDE
  (void)sweep;  // the wide sweep below only
  (void)kNarrow;
#elif !PROBE_MMA && PROBE_QUICK
  sweep(int_c<kNarrow>{}, int_c<narrow_threads<T>()>{}, int_c<1>{});
  sweep(int_c<kNarrow>{}, int_c<narrow_threads<T>()>{}, int_c<2>{});
#elif !PROBE_MMA
  sweep(int_c<kNarrow>{}, int_c<256>{}, int_c<1>{});
  sweep(int_c<kNarrow>{}, int_c<256>{}, int_c<2>{});
  sweep(int_c<kNarrow>{}, int_c<128>{}, int_c<1>{});
  sweep(int_c<kNarrow>{}, int_c<128>{}, int_c<2>{});
  sweep(int_c<kNarrow>{}, int_c<64>{}, int_c<1>{});
  sweep(int_c<kNarrow>{}, int_c<64>{}, int_c<2>{});
#endif
#if PROBE_MMA && !PROBE_WIDE
  if constexpr (sizeof(T) == 2) {
    // Tensor-core products round differently from the CUDA cores': compared with the reference, and
    // bit for bit with the first tensor-core configuration.
    // tile_threads: the tile is the one of a block of that many threads (rows of 8 per warp).
    auto mma_sweep = [&](auto narrow_c, auto threads_c, auto stages_c, bool first, int tile_threads = 0) {
      constexpr int N = decltype(narrow_c)::value, Th = decltype(threads_c)::value, S = decltype(stages_c)::value;
      if (tile_threads > 0) std::printf("tiles of a %d-thread block:\n", tile_threads);
      for (int tpb : {0, 8}) {
        probe_fill_value<<<1024, 256>>>(b.out, n, poison);
        // The narrow kernels with one weight term where the weights are exact (the launcher's choice
        // for weights in x's dtype).
        constexpr int Terms = N < 0 && PROBE_EXACT == 1 ? 1 : kMmaTerms<T>;
        const float ms = run<Th, S, N, true, Terms>(b, tpb, reps, &bps, &grid, tile_threads > 0 ? tile_threads : Th);
        check(b, !first, "a tensor-core configuration");
        if (first) CUPIPE_CUDA_CHECK(cudaMemcpy(b.base, b.out, n * sizeof(T), cudaMemcpyDeviceToDevice));
        first = false;
        row(N, Th, S, tpb, ms);
      }
    };
    mma_sweep(int_c<-K>{}, int_c<128>{}, int_c<2>{}, true);
#if PROBE_QUICK == 2  // smaller tiles through deeper rings
    mma_sweep(int_c<-K>{}, int_c<128>{}, int_c<2>{}, false, 64);
    mma_sweep(int_c<-K>{}, int_c<128>{}, int_c<3>{}, false, 64);
    mma_sweep(int_c<-K>{}, int_c<128>{}, int_c<4>{}, false, 64);
    mma_sweep(int_c<-K>{}, int_c<128>{}, int_c<3>{}, false, 128);
#endif
#if !PROBE_QUICK
    mma_sweep(int_c<-K>{}, int_c<128>{}, int_c<2>{}, false, 256);
    mma_sweep(int_c<-K>{}, int_c<128>{}, int_c<2>{}, false, 512);
    mma_sweep(int_c<-K>{}, int_c<128>{}, int_c<3>{}, false, 256);
    mma_sweep(int_c<-K>{}, int_c<64>{}, int_c<2>{}, false, 256);
    mma_sweep(int_c<-K>{}, int_c<256>{}, int_c<2>{}, false, 512);
    std::printf("general kernel, tensor-core consumer:\n");
    mma_sweep(int_c<0>{}, int_c<256>{}, int_c<2>{}, false);
#endif
  }
#elif !PROBE_QUICK && !PROBE_WIDE
  if constexpr (K == 5) {
    sweep(int_c<0>{}, int_c<256>{}, int_c<1>{});
    sweep(int_c<0>{}, int_c<256>{}, int_c<2>{});
    sweep(int_c<0>{}, int_c<128>{}, int_c<1>{});
    sweep(int_c<0>{}, int_c<128>{}, int_c<2>{});
  }
#endif
#if PROBE_WIDE
  // Tiles of 64 items across (256 columns of fp32 items of 4; for the 2-byte types 512-byte window
  // rows, which tensor-map boxes reach through the map's 4-byte units) against the launcher's 32:
  // the same kernels, tiles of `tile_threads` consumers' rows. Compared bit for bit with the
  // launcher's configuration (CUDA cores) or the first tensor-core one.
  std::printf("wide tiles (box_cols 64 unless marked):\n");
  std::printf("%8s %8s %6s %10s %10s %8s %8s %9s %8s\n", "kernel", "threads", "stages", "tiles/blk", "tile", "blk/SM",
              "grid", "ms", "x copy");
  bool first_wide = true;
  const int pick = std::getenv("PROBE_PICK") ? std::atoi(std::getenv("PROBE_PICK")) : -1;
  int row_index = -1;
  auto skip_row = [&] { return ++row_index != pick && pick >= 0; };
  auto wide = [&](auto narrow_c, auto threads_c, auto stages_c, int tile_threads, int box_cols) {
    constexpr int N = decltype(narrow_c)::value, Th = decltype(threads_c)::value, S = decltype(stages_c)::value;
    for (int tpb : {0, kBalanced, -1, 1, 2, 4}) {
      if (skip_row()) continue;
      probe_fill_value<<<1024, 256>>>(b.out, n, poison);
      const float ms = run<Th, S, N>(b, tpb, reps, &bps, &grid, tile_threads, box_cols);
      check(b, !(N < 0 && first_wide), "a wide configuration");
      if (N < 0 && first_wide) CUPIPE_CUDA_CHECK(cudaMemcpy(b.base, b.out, n * sizeof(T), cudaMemcpyDeviceToDevice));
      if (N < 0) first_wide = false;
      char tile[32];
      std::snprintf(tile, sizeof(tile), "%dx%d", g_tile_h, g_tile_w);
      std::printf("%8s %8d %6d %10d %10s %8d %8lld %9.4f %8.3f\n", N > 0 ? "narrow" : N < 0 ? "mma" : "general", Th, S,
                  tpb, tile, bps, static_cast<long long>(grid), ms, copy_ms / ms);
    }
  };
#if PROBE_MMA && PROBE_WIDE == 2
  if constexpr (sizeof(T) == 2) {
    constexpr int Terms = PROBE_EXACT == 1 ? 1 : kMmaTerms<T>;
    auto resident = [&](auto warps_c, auto stages_c, int tile_threads, int box_cols, auto threads_c) {
      constexpr int Wp = decltype(warps_c)::value, S = decltype(stages_c)::value;
      constexpr int Th = decltype(threads_c)::value;
      for (int tpb : {-1, 1, 2}) {
        if (skip_row()) continue;
        probe_fill_value<<<1024, 256>>>(b.out, n, poison);
        const float ms = run<Th, S, -K, true, Terms, Wp>(b, tpb, reps, &bps, &grid, tile_threads, box_cols);
        check(b, !first_wide, "a resident-warps configuration");
        if (first_wide) CUPIPE_CUDA_CHECK(cudaMemcpy(b.base, b.out, n * sizeof(T), cudaMemcpyDeviceToDevice));
        first_wide = false;
        std::printf("%8s %8d %6d %10d %7dx%-4d %6d %8d %8lld %9.4f %8.3f\n", "mma", Th, S, tpb, g_tile_h, g_tile_w,
                    Wp, bps, static_cast<long long>(grid), ms, copy_ms / ms);
      }
    };
    std::printf("resident warps (narrow tensor-core kernel; tiles/blk -1: persistent, one wave less one "
                "block):\n%8s %8s %6s %10s %12s %6s %8s %8s %9s %8s\n",
                "kernel", "threads", "stages", "tiles/blk", "tile", "warps", "blk/SM", "grid", "ms", "x copy");
    resident(int_c<16>{}, int_c<2>{}, 128, 32, int_c<128>{});  // the launcher's
    resident(int_c<16>{}, int_c<1>{}, 256, 64, int_c<128>{});
    resident(int_c<16>{}, int_c<2>{}, 256, 64, int_c<128>{});
    resident(int_c<16>{}, int_c<1>{}, 128, 32, int_c<128>{});
#if PROBE_RESIDENT_ALL == 2  // 256-thread blocks: taller tiles, fewer halo rows per output
    resident(int_c<16>{}, int_c<1>{}, 512, 64, int_c<256>{});  // 64 x 256
    resident(int_c<16>{}, int_c<2>{}, 512, 64, int_c<256>{});
    resident(int_c<16>{}, int_c<2>{}, 256, 32, int_c<256>{});  // 64 x 128
    resident(int_c<16>{}, int_c<1>{}, 256, 64, int_c<256>{});  // 32 x 256
    resident(int_c<16>{}, int_c<2>{}, 256, 64, int_c<256>{});
#elif PROBE_RESIDENT_ALL
    resident(int_c<24>{}, int_c<2>{}, 128, 32, int_c<128>{});
    resident(int_c<32>{}, int_c<2>{}, 128, 32, int_c<128>{});
    resident(int_c<24>{}, int_c<1>{}, 128, 32, int_c<128>{});
    resident(int_c<32>{}, int_c<1>{}, 128, 32, int_c<128>{});
    resident(int_c<24>{}, int_c<1>{}, 256, 64, int_c<128>{});
    resident(int_c<32>{}, int_c<1>{}, 256, 64, int_c<128>{});
    resident(int_c<24>{}, int_c<2>{}, 256, 64, int_c<128>{});
#endif
  }
  (void)wide;
#elif PROBE_MMA
  if constexpr (sizeof(T) == 2) {
    wide(int_c<-K>{}, int_c<128>{}, int_c<2>{}, 128, 32);  // the launcher's tiles (32 x 128)
    wide(int_c<-K>{}, int_c<128>{}, int_c<2>{}, 128, 64);
    wide(int_c<-K>{}, int_c<128>{}, int_c<2>{}, 256, 64);
    wide(int_c<-K>{}, int_c<128>{}, int_c<2>{}, 512, 64);
    wide(int_c<-K>{}, int_c<128>{}, int_c<1>{}, 256, 64);
  }
#else
  wide(int_c<K>{}, int_c<narrow_threads<T>()>{}, int_c<2>{}, narrow_threads<T>(), 32);  // the launcher's tiles
  wide(int_c<K>{}, int_c<narrow_threads<T>()>{}, int_c<2>{}, narrow_threads<T>(), 64);
  wide(int_c<K>{}, int_c<narrow_threads<T>()>{}, int_c<2>{}, 2 * narrow_threads<T>(), 64);
  wide(int_c<K>{}, int_c<narrow_threads<T>()>{}, int_c<1>{}, 2 * narrow_threads<T>(), 64);
  if constexpr (narrow_threads<T>() != 128) {
    wide(int_c<K>{}, int_c<128>{}, int_c<2>{}, 128, 32);
    wide(int_c<K>{}, int_c<128>{}, int_c<2>{}, 128, 64);
    wide(int_c<K>{}, int_c<128>{}, int_c<2>{}, 256, 64);
    wide(int_c<K>{}, int_c<128>{}, int_c<1>{}, 256, 64);
  }
#endif
#endif
  // The launcher's configuration again: the run's drift.
  const float again = run<256, 2, kLauncherNarrow>(b, 2, reps, &bps, &grid);
  std::printf("launcher's configuration again %.4f ms = %.3fx\n", again, copy_ms / again);
  return 0;
}
