// launch_stencil_steps: the passes of stencil/steps.cuh's fused kernel for a stencil's steps=k,
// their band, chunk and grid geometry.
#include "kernels/stencil/steps.cuh"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/kernel_id.h"
#include "kernels/launch_utils.cuh"
#include "kernels/stencil/launch_plan.cuh"  // stencil_l2_promotion, launch_star_pair
#include "kernels/tensor_map.cuh"

namespace cupipe {
namespace kernels {
namespace {

constexpr const char* kStepsHeader = "kernels/stencil/steps.cuh";
// How many inner bands' time a block of an edge band takes, in the grid's cost model: its edge
// strip's warp takes the per-level boundary path (circular: its loader wraps the halo columns), and
// every stage's refill waits for the block's slowest warp. Measured: docs/design.md §4.9.
constexpr int64_t steps_edge_cost(Boundary b) {
  return b == Boundary::Replicate || b == Boundary::Reflect ? 4 : 2;
}

// The loader's geometry of a pass of k steps over (batch, ny, nx) planes with row and plane
// strides xs_row, xs_plane: bands of `warps` strips, windows of win_h rows.
template <typename T>
StepsGeom steps_geom(const StencilParams& p, int k, int warps, int64_t xs_row, int64_t xs_plane, int align) {
  constexpr int64_t esz = sizeof(T);
  const int V = steps_lane_cols(p.ry);
  StepsGeom f{};
  f.k = k;
  f.halo = static_cast<int>(engine::align_up(int64_t(k) * p.rx, V));
  f.warp_w = 32 * V - 2 * f.halo;
  const int rows = p.ry > 0 ? kStepsRows : static_cast<int>(std::min<int64_t>(p.ny, kStepsRowsRy0));
  f.strips = p.ry > 0 ? 1 : kStepsRowsRy0 / rows;
  f.band_w = warps * f.strips * f.warp_w;
  StencilGeom& g = f.g;
  g.batch = p.batch; g.ny = p.ny; g.nx = p.nx;
  g.xs_row = xs_row; g.xs_plane = xs_plane;
  g.ry = 0; g.rx = f.halo; g.step = 1;
  g.wdt = p.weights_dtype;
  g.fixed = StencilFixed::None;
  g.tensor_tiles = false;
  g.tile_w = f.band_w;
  g.tile_h = g.win_h = rows;
  g.win_w = f.band_w + 2 * f.halo;
  g.pitch = static_cast<int>(engine::align_up(g.win_w * esz + 32, 16));
  g.hdr_bytes = static_cast<int>(engine::align_up(static_cast<int64_t>(sizeof(TileHeader)) + 4 * g.win_h, align));
  g.stage_bytes = engine::align_up(g.hdr_bytes + int64_t(g.win_h) * g.pitch + 16, engine::kStageAlign);
  f.bands = (p.nx + f.band_w - 1) / f.band_w;
  f.row_tiles = (p.ny + g.win_h - 1) / g.win_h;
  return f;
}

std::string steps_kernel_id(const StencilParams& p, bool star) {
  std::string id;
  dispatch_dtype(p.dtype, [&](auto tv) {
    id = kernel_id("stencil_steps_kernel", p.mechanism, p.stages, type_c<decltype(tv)>{}, p.ry, p.rx, star);
  });
  return id;
}

}  // namespace

void launch_steps(const StencilParams& p, int64_t steps, void* scratch) {
  const int K = stencil_steps_per_pass(p.ry, p.rx, dtype_size(p.dtype), p.x_step);
  if (K < 2 || steps < 1) throw std::logic_error("cupipe: launch_stencil_steps without a fused kernel for the call");
  if (p.stages < 1 || p.stages > engine::kMaxStages)
    throw std::runtime_error("stages must be 1..8, got " + std::to_string(p.stages));
  if (p.batch * p.ny * p.nx == 0) return;
  dispatch_dtype(p.dtype, [&](auto tv) {
    using T = decltype(tv);
    constexpr int64_t esz = sizeof(T);
    const DeviceInfo dev = device_info(current_device());
    const bool kTma = p.mechanism == engine::Mechanism::Tma;
    const int warps = engine::consumer_threads(p.mechanism, kStepsThreads) / 32;
    const cudaStream_t stream = reinterpret_cast<cudaStream_t>(p.stream);
    // The star pair (steps.cuh) where taps lie off the axes: the star instance first.
    const bool pair = p.ry > 0 && p.rx > 0;
    auto instance = [&](bool star) {
      return kernel_ref<const T*, T*, const void*, StepsGeom, Boundary, int*, CUtensorMap>(
          kStepsHeader, steps_kernel_id(p, star), stream);
    };
    const auto star = pair ? instance(true) : decltype(instance(false)){};
    const auto kernel = instance(false);
    // Passes of as even a share of the steps as K allows; each writes where the last pass's
    // output ends in `out` (they alternate between out and scratch).
    const int64_t passes = (steps + K - 1) / K;
    const T* src = static_cast<const T*>(p.x);
    int64_t xs_row = p.x_row ? p.x_row : p.nx, xs_plane = p.x_plane ? p.x_plane : p.ny * p.nx;
    for (int64_t i = 0; i < passes; ++i) {
      const int k = static_cast<int>(steps / passes + (i < steps % passes ? 1 : 0));
      StepsGeom f = steps_geom<T>(p, k, warps, xs_row, xs_plane, kTma ? 128 : 16);
      StencilGeom& g = f.g;
      constexpr int64_t kMaxCoord = 0x7fffffff;
      g.tensor_tiles = kTma && dev.code_sm >= 90 && rows_of_16(g, esz) && reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                       g.pitch / tensor_map_unit(esz) <= 256 && g.win_h <= 256 && p.nx <= kMaxCoord &&
                       p.ny + kStepsRows + 2 * int64_t(k) * p.ry <= kMaxCoord && p.batch <= kMaxCoord;
      const size_t smem = static_cast<size_t>(p.stages) * g.stage_bytes;
      if (static_cast<int64_t>(smem) > dev.max_smem_optin - 1024)
        throw std::runtime_error("stencil steps: " + std::to_string(p.stages) + " stages of " +
                                 std::to_string(g.stage_bytes) + " bytes do not fit in shared memory");
      prepare_smem(kernel, smem, "stencil steps");
      if (pair) prepare_smem(star, smem, "stencil steps");
      const int64_t resident =
          std::max<int64_t>(1, static_cast<int64_t>(dev.num_sms) * blocks_per_sm(kernel, kStepsThreads, smem));
      int64_t grid = 0;
      if (p.ry > 0) {
        // Chunks of at least 4 * k * ry rows, each streaming 2 * k * ry rows more than it stores.
        // The first and last bands' blocks are slower (steps_edge_cost): their chunks have 1/cost
        // the rows, so that they finish with the inner bands' (the kernel starts them first).
        const int64_t edges = std::min<int64_t>(f.bands, 2), inner = f.bands - edges, fill = 2 * int64_t(k) * p.ry;
        const int64_t cost = steps_edge_cost(p.boundary);
        const int64_t columns = p.batch * (inner + cost * edges);
        f.chunk = streaming_chunk(p.ny, columns, resident, fill, 2 * fill);
        f.nchunks = (p.ny + f.chunk - 1) / f.chunk;
        f.edge_chunk = std::max(std::min(f.chunk, fill), (f.chunk + cost - 1) / cost);  // not mostly fill rows
        f.edge_nchunks = (p.ny + f.edge_chunk - 1) / f.edge_chunk;
        grid = p.batch * (inner * f.nchunks + edges * f.edge_nchunks);
      } else {
        // Independent items: a few waves of blocks, each streaming a run of them through its ring.
        const int64_t items = p.batch * f.row_tiles * f.bands;
        const int64_t blocks = std::max<int64_t>(1, std::min(items, 4 * resident));
        f.items_per_block = (items + blocks - 1) / blocks;
        grid = (items + f.items_per_block - 1) / f.items_per_block;
      }
      if (grid > 0x7fffffff) throw std::runtime_error("stencil steps: the plane needs more than 2^31 - 1 blocks");
      CUtensorMap tmap{};
      if (g.tensor_tiles)
        tmap = make_plane_map(src, p.dtype, static_cast<int>(esz), p.batch, p.ny, p.nx, xs_row, xs_plane, g.pitch,
                              g.win_h, stencil_l2_promotion(dev));
      T* dst = static_cast<T*>((passes - 1 - i) % 2 == 0 ? p.out : scratch);
      launch_star_pair(pair, star, kernel, grid, p.workspace, [&](auto kern, int* flags) {
        launch_kernel(kern, dim3(static_cast<unsigned>(grid)), dim3(kStepsThreads), smem, stream, false, src, dst,
                      p.weights, f, p.boundary, flags, tmap);
      });
      src = dst;
      xs_row = p.nx;
      xs_plane = p.ny * p.nx;
    }
  });
}

}  // namespace kernels

void launch_stencil_steps(const StencilParams& p, int64_t steps, void* scratch) { kernels::launch_steps(p, steps, scratch); }

}  // namespace cupipe
