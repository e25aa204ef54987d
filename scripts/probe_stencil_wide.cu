// The fp32 9x9 box's wide consumer (consume_tile_wide) in the kernels that can run it, outside
// the torch extension: the general Box kernel (256 threads; the launcher's until the twenty-third
// run) and the narrow kernel (NarrowK = 9: the wide consumer alone; the launcher's at 128 threads,
// persistent) at 128 and 256 threads,
// each persistent and with 1, 2 or 4 tiles per block, on an 8192 x 8192 plane, tma or primitives,
// two stages. Every configuration's output is compared with a plain reference kernel (tolerance
// below) and bit for bit with the first configuration (every kernel adds a point's 81 products in
// the same order). Times: median of queued repetitions (CUDA events between launches), fresh
// random data; the FP32 rate they reach (81 FMAs per point) beside cudaMemcpyAsync of the plane.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Icsrc -DPROBE_MECH=Tma \
//        -o /tmp/probe_wide scripts/probe_stencil_wide.cu csrc/kernels/device_info.cu
//   /tmp/probe_wide [reps = 30]
// PROBE_ONLY=<kernel>/<threads>/<tiles per block> (environment): that configuration alone,
// launched once (for ncu), e.g. PROBE_ONLY=narrow/128/0.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/stencil.cuh"
#include "probe_common.cuh"

#ifndef PROBE_MECH
#define PROBE_MECH Tma
#endif

using namespace cupipe;
using namespace cupipe::kernels;

constexpr engine::Mechanism kMech = engine::Mechanism::PROBE_MECH;
constexpr int K = 9, R = K / 2;

// 81 products of |w| < 2 and |x| < 1 summed in another order than the consumer's: a few ulp of
// sums up to ~160, relative to 1 + |ref|.
constexpr float kTol = 1e-4f;

using Buffers = ProbeBoxBuffers;

struct Launch {
  int blocks_per_sm;
  int64_t grid;
  float ms;
};

// NarrowK 0: the general Box kernel; 9: the narrow 9x9 kernel. tpb 0: persistent blocks.
template <int Threads, int NarrowK>
Launch run(const Buffers& b, int tpb, int reps) {
  StencilParams p;
  p.x = b.x; p.out = b.out; p.weights = b.w; p.dtype = DType::F32;
  p.batch = 1; p.ny = b.ny; p.nx = b.nx; p.ry = R; p.rx = R; p.boundary = Boundary::Zero;
  p.mechanism = kMech; p.stages = 2;
  const DeviceInfo dev = device_info(current_device());
  constexpr bool kTma = kMech == engine::Mechanism::Tma;
  const int64_t budget = dev.max_smem_optin - 1024;
  StencilGeom g = make_stencil_geom(p, 4, 4, engine::consumer_threads(kMech, Threads), budget, kTma ? 128 : 16);
  g.fixed = choose_fixed(g, p.x, 4);
  // The narrow kernel on the launcher's tiles for it.
  if (NarrowK == 9 && !narrow_wide_geom(g, p, budget, kTma ? 128 : 16)) g.fixed = StencilFixed::None;
  if (g.fixed != StencilFixed::Box9x9 || !widen_weight_rows(g, 2, budget)) {
    std::fprintf(stderr, "no wide 9x9 consumer for %d threads\n", Threads);
    std::exit(1);
  }
  CUtensorMap tmap{};
  g.tensor_tiles = kTma;
  if (kTma)
    tmap = make_plane_map(p.x, p.dtype, 4, 1, p.ny, p.nx, g.pitch, g.win_h, probe_l2_promotion(stencil_l2_promotion(dev)));
  auto kernel = stencil_kernel<kMech, 2, float, true, NarrowK, Threads>;
  const size_t smem = 2 * static_cast<size_t>(g.stage_bytes) + g.weight_bytes;
  prepare_smem(kernel, smem, "probe");
  Launch l;
  l.blocks_per_sm = blocks_per_sm(kernel, Threads, smem);
  int64_t grid = int64_t(dev.num_sms) * l.blocks_per_sm;
  if (tpb > 0) grid = std::max(grid, (g.ntiles + tpb - 1) / tpb);
  grid = std::min(grid, g.ntiles);
  set_block_tiles(g, grid);
  l.grid = grid;
  l.ms = probe_median_ms(
      [&] { kernel<<<static_cast<unsigned>(grid), Threads, smem>>>(b.x, b.out, b.w, g, Boundary::Zero, tmap); }, reps);
  return l;
}

void check(const Buffers& b, bool against_base, const char* what) {
  probe_check(b.out, against_base ? b.base : nullptr, b.ref, b.ny * b.nx, kTol, what);
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 30;
  const char* only = std::getenv("PROBE_ONLY");
  const Buffers b = probe_box_buffers<K>(8192, 8192);
  const int64_t n = b.ny * b.nx;
  const float copy_ms = only ? 0.f : probe_median_ms([&] {
    PROBE_CHECK(cudaMemcpyAsync(b.base, b.x, n * sizeof(float), cudaMemcpyDeviceToDevice));
  }, reps);
  std::printf("fp32 9x9 8192^2, %s/2; cudaMemcpyAsync %.4f ms\n", engine::mechanism_name(kMech), copy_ms);
  std::printf("%-8s %8s %10s %7s %7s %9s %10s\n", "kernel", "threads", "tiles/blk", "blk/SM", "grid", "ms", "TFLOP/s");
  bool first = true;
  auto config = [&](const char* name, auto threads_c, auto narrow_c, int tpb) {
    constexpr int Th = decltype(threads_c)::value, N = decltype(narrow_c)::value;
    char row[64];
    std::snprintf(row, sizeof(row), "%s/%d/%d", name, Th, tpb);
    if (only != nullptr && std::strcmp(only, row) != 0) return;
    probe_fill_value<<<1024, 256>>>(b.out, n, 1e30f);  // poison
    const Launch l = run<Th, N>(b, tpb, only ? 1 : reps);
    check(b, !first, row);
    if (first) PROBE_CHECK(cudaMemcpy(b.base, b.out, n * sizeof(float), cudaMemcpyDeviceToDevice));
    first = false;
    std::printf("%-8s %8d %10d %7d %7lld %9.4f %10.2f\n", name, Th, tpb, l.blocks_per_sm,
                static_cast<long long>(l.grid), l.ms, 2.0 * K * K * n / (l.ms * 1e9));
  };
  for (int tpb : {0, 2}) config("general", int_c<256>{}, int_c<0>{}, tpb);
  for (int tpb : {0, 1, 2, 4}) config("narrow", int_c<128>{}, int_c<9>{}, tpb);
  for (int tpb : {0, 1, 2}) config("narrow", int_c<256>{}, int_c<9>{}, tpb);
  if (!only) config("general", int_c<256>{}, int_c<0>{}, 0);  // the run's drift
  return 0;
}
