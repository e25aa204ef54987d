// launch_stencil3d: the tile and chunk geometry of stencil/volume.cuh's kernel, and its launch.
#include "kernels/stencil/volume.cuh"

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

constexpr const char* kVolumeHeader = "kernels/stencil/volume.cuh";

// The geometry for `consumers` consuming threads: tiles of kVolumeItemsX x items_y work items,
// each TH x TW outputs; the window (ry, rx of halo) as the 2-D loader lays it out, rows pitched
// for the consumer's reach (R - rx columns either side of the window, whole vectors past it).
// `align`: of the window's first row in a stage (128 where a tensor-map box lands there).
template <typename T>
VolumeGeom volume_geom(const Stencil3dParams& p, int consumers, int R, int align) {
  constexpr int64_t esz = sizeof(T);
  VolumeGeom v{};
  StencilGeom& g = v.g;
  g.batch = p.batch * p.nz; g.ny = p.ny; g.nx = p.nx;
  g.xs_row = p.nx; g.xs_plane = p.ny * p.nx;
  g.ry = p.ry; g.rx = p.rx; g.step = 1;
  g.wdt = p.weights_dtype;
  g.fixed = StencilFixed::None;
  g.tensor_tiles = false;
  v.items_y = consumers / kVolumeItemsX;
  g.tile_w = kVolumeItemsX * kVolumeTW<T>;
  g.tile_h = v.items_y * volume_item_rows(p.rz, R, esz);
  g.win_h = g.tile_h + 2 * p.ry;
  g.win_w = g.tile_w + 2 * p.rx;
  g.pitch = static_cast<int>(engine::align_up((g.tile_w + 2 * int64_t(R)) * esz + 32, 16));
  g.hdr_bytes = static_cast<int>(engine::align_up(static_cast<int64_t>(sizeof(TileHeader)) + 4 * g.win_h, align));
  g.stage_bytes = engine::align_up(g.hdr_bytes + int64_t(g.win_h) * g.pitch + 16, engine::kStageAlign);
  v.nz = p.nz;
  v.rz = p.rz;
  v.tiles_x = (p.nx + g.tile_w - 1) / g.tile_w;
  v.tiles_per_plane = (p.ny + g.tile_h - 1) / g.tile_h * v.tiles_x;
  const int64_t K = 2 * R + 1;
  v.weight_bytes = engine::align_up((2 * int64_t(p.rz) + 1) * K * K * static_cast<int64_t>(sizeof(acc_t<T>)), 16);
  return v;
}

template <typename T>
std::string volume_kernel_id(engine::Mechanism m, int stages, int rz, int R, bool odd_rows, bool star) {
  return kernel_id("stencil3d_kernel", m, stages, type_c<T>{}, rz, R, odd_rows, star);
}

}  // namespace

void launch_stencil3d_plan(const Stencil3dParams& p) {
  if (p.stages < 1 || p.stages > engine::kMaxStages)
    throw std::runtime_error("stages must be 1..8, got " + std::to_string(p.stages));
  if (p.rz < 1 || p.rz > 4 || p.ry < 0 || p.ry > 4 || p.rx < 0 || p.rx > 4)
    throw std::logic_error("cupipe: stencil3d's kernel takes depth radii 1..4 and plane radii 0..4");
  dispatch_dtype(p.dtype, [&](auto tv) {
    using T = decltype(tv);
    const DeviceInfo dev = device_info(current_device());
    const int R = volume_radius_class(p.ry, p.rx);
    constexpr int64_t esz = sizeof(T);
    const bool kTma = p.mechanism == engine::Mechanism::Tma;
    VolumeGeom v = volume_geom<T>(p, engine::consumer_threads(p.mechanism, kVolumeThreads), R, kTma ? 128 : 16);
    // tma moves a window as one tensor-map box of the planes' map where the map can describe x,
    // as the 2-D stencil does (launch_plan.cuh): the loader falls back to row copies elsewhere.
    constexpr int64_t kMaxCoord = 0x7fffffff;
    v.g.tensor_tiles = kTma && dev.code_sm >= 90 && rows_of_16(v.g, esz) &&
                       reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && v.g.pitch / tensor_map_unit(esz) <= 256 &&
                       v.g.win_h <= 256 && p.nx <= kMaxCoord && p.ny <= kMaxCoord && v.g.batch <= kMaxCoord;
    const size_t smem = static_cast<size_t>(p.stages) * v.g.stage_bytes + v.weight_bytes;
    if (static_cast<int64_t>(smem) > dev.max_smem_optin - 1024)
      throw std::runtime_error("stencil3d: " + std::to_string(p.stages) + " stages of " +
                               std::to_string(v.g.stage_bytes) + " bytes do not fit in shared memory");
    const cudaStream_t stream = reinterpret_cast<cudaStream_t>(p.stream);
    // The star pair (volume.cuh) wherever the radii have taps off the axes (the lean plane's, only
    // the radius class's own): the star instance first.
    const bool pair = (p.ry > 0 || p.rx > 0) && (!volume_lean<T>() || (p.ry == R && p.rx == R));
    const bool odd = !rows_share_shift(v.g.xs_row, esz);
    auto instance = [&](bool star) {
      const auto k = kernel_ref<const T*, T*, const void*, VolumeGeom, Boundary, int*, CUtensorMap>(
          kVolumeHeader, volume_kernel_id<T>(p.mechanism, p.stages, p.rz, R, odd, star), stream);
      prepare_smem(k, smem, "stencil3d");
      return k;
    };
    const auto star = pair ? instance(true) : decltype(instance(false)){};
    const auto kernel = instance(false);
    // Chunks of at least 8 depth radii, each streaming 2 * rz planes more than it stores.
    const int64_t columns = p.batch * v.tiles_per_plane;
    const int64_t resident =
        std::max<int64_t>(1, static_cast<int64_t>(dev.num_sms) * blocks_per_sm(kernel, kVolumeThreads, smem));
    v.chunk = streaming_chunk(p.nz, columns, resident, 2 * int64_t(p.rz), 8 * int64_t(p.rz));
    v.nchunks = (p.nz + v.chunk - 1) / v.chunk;
    const int64_t grid = columns * v.nchunks;
    if (grid > 0x7fffffff) throw std::runtime_error("stencil3d: the volume needs more than 2^31 - 1 blocks");
    CUtensorMap tmap{};
    if (v.g.tensor_tiles)
      tmap = make_plane_map(p.x, p.dtype, static_cast<int>(esz), v.g.batch, p.ny, p.nx, v.g.xs_row, v.g.xs_plane,
                            v.g.pitch, v.g.win_h, stencil_l2_promotion(dev));
    launch_star_pair(pair, star, kernel, grid, p.workspace, [&](auto k, int* flags) {
      launch_kernel(k, dim3(static_cast<unsigned>(grid)), dim3(kVolumeThreads), smem, stream, false,
                    static_cast<const T*>(p.x), static_cast<T*>(p.out), p.weights, v, p.boundary, flags, tmap);
    });
  });
}

}  // namespace kernels

void launch_stencil3d(const Stencil3dParams& p) {
  if (p.batch * p.nz * p.ny * p.nx == 0) return;
  kernels::launch_stencil3d_plan(p);
}

}  // namespace cupipe
