// launch_stencil3d_steps: the passes of stencil/steps3d.cuh's fused kernel for stencil3d's steps=k,
// their tile, chunk and grid geometry.
#include "kernels/stencil/steps3d.cuh"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/kernel_id.h"
#include "kernels/launch_utils.cuh"
#include "kernels/stencil/launch_plan.cuh"  // stencil_l2_promotion
#include "kernels/tensor_map.cuh"

namespace cupipe {
namespace kernels {
namespace {

constexpr const char* kSteps3dHeader = "kernels/stencil/steps3d.cuh";

// A pass of k steps: tiles of (consumers / kSteps3dItemsX) x kSteps3dItemsX work items, windows
// with a halo of k * ry rows and k * rx columns (rounded up to a work item's width), level buffers
// of the tile with 16 bytes of zero padding either side of a row.
template <typename T>
Steps3dGeom steps3d_geom(const Stencil3dParams& p, int k, int consumers, int align) {
  constexpr int64_t esz = sizeof(T);
  constexpr int TW = steps3d_tw<T>(), PAD = steps3d_pad<T>();
  Steps3dGeom v{};
  v.k = k;
  v.ry = p.ry;
  v.rx = p.rx;
  v.items_y = consumers / kSteps3dItemsX;
  v.eh = v.items_y * kSteps3dTH;
  v.ew = kSteps3dItemsX * TW;
  v.hy = k * p.ry;
  v.hx = static_cast<int>(engine::align_up(int64_t(k) * p.rx, TW));
  StencilGeom& g = v.g;
  g.batch = p.batch * p.nz; g.ny = p.ny; g.nx = p.nx;
  g.xs_row = p.nx; g.xs_plane = p.ny * p.nx;
  g.ry = v.hy; g.rx = v.hx; g.step = 1;
  g.wdt = p.weights_dtype;
  g.fixed = StencilFixed::None;
  g.tensor_tiles = false;
  g.tile_h = v.eh - 2 * v.hy;
  g.tile_w = v.ew - 2 * v.hx;
  g.win_h = v.eh;
  g.win_w = v.ew;
  g.pitch = static_cast<int>(engine::align_up(v.ew * esz + 32, 16));
  g.hdr_bytes = static_cast<int>(engine::align_up(static_cast<int64_t>(sizeof(TileHeader)) + 4 * g.win_h, align));
  g.stage_bytes = engine::align_up(g.hdr_bytes + int64_t(g.win_h) * g.pitch + 16, engine::kStageAlign);
  v.nz = p.nz;
  v.tiles_x = (p.nx + g.tile_w - 1) / g.tile_w;
  v.tiles_per_plane = (p.ny + g.tile_h - 1) / g.tile_h * v.tiles_x;
  v.bpitch = static_cast<int>((v.ew + 2 * PAD) * esz);
  v.buf_bytes = engine::align_up(int64_t(v.eh) * v.bpitch, 16);
  return v;
}

}  // namespace

void launch_steps3d(const Stencil3dParams& p, int64_t steps, void* scratch) {
  const int K = stencil3d_steps_per_pass(p.rz, p.ry, p.rx, dtype_size(p.dtype));
  if (K < 2 || steps < 1) throw std::logic_error("cupipe: launch_stencil3d_steps without a fused kernel for the call");
  if (p.stages < 1 || p.stages > engine::kMaxStages)
    throw std::runtime_error("stages must be 1..8, got " + std::to_string(p.stages));
  if (p.batch * p.nz * p.ny * p.nx == 0) return;
  dispatch_dtype(p.dtype, [&](auto tv) {
    using T = decltype(tv);
    constexpr int64_t esz = sizeof(T);
    const DeviceInfo dev = device_info(current_device());
    const bool kTma = p.mechanism == engine::Mechanism::Tma;
    const int consumers = engine::consumer_threads(p.mechanism, kSteps3dThreads);
    const cudaStream_t stream = reinterpret_cast<cudaStream_t>(p.stream);
    const auto kernel = kernel_ref<const T*, T*, const void*, Steps3dGeom, Boundary, CUtensorMap>(
        kSteps3dHeader, kernel_id("stencil3d_steps_kernel", p.mechanism, p.stages, type_c<T>{}), stream);
    // Passes of as even a share of the steps as K allows; each writes where the last pass's output
    // ends in `out` (they alternate between out and scratch).
    const int64_t passes = (steps + K - 1) / K;
    const T* src = static_cast<const T*>(p.x);
    for (int64_t i = 0; i < passes; ++i) {
      const int k = static_cast<int>(steps / passes + (i < steps % passes ? 1 : 0));
      Steps3dGeom v = steps3d_geom<T>(p, k, consumers, kTma ? 128 : 16);
      StencilGeom& g = v.g;
      constexpr int64_t kMaxCoord = 0x7fffffff;
      g.tensor_tiles = kTma && dev.code_sm >= 90 && rows_of_16(g, esz) && reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                       g.pitch / tensor_map_unit(esz) <= 256 && g.win_h <= 256 && p.nx <= kMaxCoord &&
                       p.ny + g.win_h <= kMaxCoord && g.batch <= kMaxCoord;
      const size_t smem = static_cast<size_t>(p.stages) * g.stage_bytes + static_cast<size_t>(K - 1) * v.buf_bytes;
      if (static_cast<int64_t>(smem) > dev.max_smem_optin - 1024)
        throw std::runtime_error("stencil3d steps: " + std::to_string(p.stages) + " stages of " +
                                 std::to_string(g.stage_bytes) + " bytes and the level buffers do not fit in shared memory");
      prepare_smem(kernel, smem, "stencil3d steps");
      // The chunk count with the shortest estimated time: waves of resident blocks times the planes
      // a block streams (its chunk and 2 * k more), chunks of at least 4 * k planes.
      const int64_t columns = p.batch * v.tiles_per_plane, fill = 2 * int64_t(k);
      const int64_t resident =
          std::max<int64_t>(1, static_cast<int64_t>(dev.num_sms) * blocks_per_sm(kernel, kSteps3dThreads, smem));
      const int64_t max_chunks =
          std::max<int64_t>(1, std::min(p.nz / (2 * fill), 8 * resident / std::max<int64_t>(1, columns)));
      int64_t best = 1, best_cost = -1;
      for (int64_t n = 1; n <= max_chunks; ++n) {
        const int64_t cost = (columns * n + resident - 1) / resident * ((p.nz + n - 1) / n + fill);
        if (best_cost < 0 || cost < best_cost) best = n, best_cost = cost;
      }
      v.chunk = (p.nz + best - 1) / best;
      v.nchunks = (p.nz + v.chunk - 1) / v.chunk;
      const int64_t grid = columns * v.nchunks;
      if (grid > 0x7fffffff) throw std::runtime_error("stencil3d steps: the volume needs more than 2^31 - 1 blocks");
      CUtensorMap tmap{};
      if (g.tensor_tiles)
        tmap = make_plane_map(src, p.dtype, static_cast<int>(esz), g.batch, p.ny, p.nx, g.xs_row, g.xs_plane, g.pitch,
                              g.win_h, stencil_l2_promotion(dev));
      T* dst = static_cast<T*>((passes - 1 - i) % 2 == 0 ? p.out : scratch);
      launch_kernel(kernel, dim3(static_cast<unsigned>(grid)), dim3(kSteps3dThreads), smem, stream, false, src, dst,
                    p.weights, v, p.boundary, tmap);
      src = dst;
    }
  });
}

}  // namespace kernels

void launch_stencil3d_steps(const Stencil3dParams& p, int64_t steps, void* scratch) {
  kernels::launch_steps3d(p, steps, scratch);
}

}  // namespace cupipe
