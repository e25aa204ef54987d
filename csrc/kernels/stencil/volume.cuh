// The 3-D stencil kernel (stencil3d): 2.5-D blocking on the engine's stage ring. A block owns a
// column of the volume: one 2-D tile of the plane (with its halo) over a chunk of consecutive
// output planes. The input planes of the chunk (and RZ more on each side) stream through the ring
// one tile window a stage, loaded by the 2-D stencil's tile loader (every mechanism, every
// boundary within the plane); the depth boundary maps a plane index to the plane loaded.
//
// A thread keeps 2*RZ+1 partial output tiles in registers (a queue): a landed input plane p adds
// its 2-D correlation with weight slice a to the output plane p + RZ - a, for every a at once
// (each window value is read from shared memory once and used by every slice). After plane p the
// oldest entry, output plane p - RZ, is complete: it is stored, and the queue moves up by one. So
// the volume is read once and written once, with one plane tile a stage on chip.
//
// RZ is the depth radius (1..4; rz = 0 is a batch of 2-D stencils and runs as stencil2d); R the
// in-plane radius class (1, 2 or 4: the window the loops unroll over), ry, rx <= R at run time.
#pragma once

#include <cuda.h>  // CUtensorMap

#include <type_traits>

#include "engine/engine.cuh"
#include "kernels/numeric.cuh"
#include "kernels/stencil/consumer_io.cuh"
#include "kernels/stencil/geometry.cuh"
#include "kernels/stencil/star_pair.cuh"
#include "kernels/stencil/tile_loader.cuh"

namespace cupipe {
namespace kernels {

constexpr int kVolumeThreads = 256;
constexpr int kVolumeItemsX = 16;  // work items across a tile; the rows of items fill the consumers
// The outputs of a work item along x: one 16-byte vector of fp32/fp64, 8 bytes of a 2-byte type.
template <typename T>
constexpr int kVolumeTW = sizeof(T) == 8 ? 2 : 4;

// The 7- and 27-point class (rz = 1, in-plane class 1) below fp64 keeps its 27 weights in
// registers and takes work items of 4 rows, so that a plane's fixed costs (its wait, load and
// stores) spread over more outputs; 2 rows where the register queue is deeper, the window rows
// wider or the values twice the registers.
constexpr bool volume_small_class(int rz, int r, int esz) { return rz == 1 && r == 1 && esz <= 4; }
constexpr int volume_item_rows(int rz, int r, int esz) { return volume_small_class(rz, r, esz) ? 4 : 2; }

// The in-plane radius class a call's radii (ry, rx) run in.
constexpr int volume_radius_class(int ry, int rx) {
  return ry <= 1 && rx <= 1 ? 1 : ry <= 2 && rx <= 2 ? 2 : 4;
}

struct VolumeGeom {
  StencilGeom g;           // the loader's view: batch * nz planes of ny x nx, windows of the tiles
  int64_t nz;
  int rz;
  int64_t tiles_x, tiles_per_plane;
  int64_t chunk, nchunks;  // output planes per block, blocks along the depth
  int items_y;             // rows of work items in a tile (consumers / kVolumeItemsX)
  int64_t weight_bytes;    // (2rz+1) x (2R+1)^2 weights in the accumulation type, in shared memory
};

// Resident blocks per SM the register budget is compiled for: a block is 8 warps, one alone is too
// few to hide its per-plane latency. Depth radius 1 gets the 128 registers of two (the fp32 and
// 2-byte 7-/27-point class spills a little there, design.md §4.8); deeper queues need the whole budget.
constexpr int volume_min_blocks(int rz) { return rz == 1 ? 2 : 1; }

// The lean plane for 2-byte types: one row base a plane, unchecked vector stores of whole items,
// and a star instance for the radius class's full radii only (the host pairs no other call). It
// speeds bf16 up and slows fp32's star down (design.md §4.8), so 4- and 8-byte types keep the plain one.
template <typename T>
__host__ __device__ constexpr bool volume_lean() { return sizeof(T) == 2; }

// A tap of the (KZ, K, K) slots on the stencil's axes: the centre's column through the planes, the
// cross in the centre plane.
template <int RZ, int R>
__host__ __device__ constexpr bool volume_axis_tap(int a, int b, int c) {
  return (b == R && c == R) || (a == RZ && (b == R || c == R));
}

// Star: the star pair's axis-taps instance (star_pair.cuh). Its check sum takes every window value the
// general body would multiply (the item's whole window rows): the halo's corners are no output's
// axis taps, so the outputs alone would miss a non-finite value there.
template <engine::Mechanism M, int S, typename T, int RZ, int R, bool OddRows, bool Star>
__global__ void __launch_bounds__(kVolumeThreads, volume_min_blocks(RZ))
    stencil3d_kernel(const T* __restrict__ x, T* __restrict__ out, const void* __restrict__ weights, VolumeGeom v,
                     Boundary boundary, int* __restrict__ flags, const __grid_constant__ CUtensorMap tmap) {
  if constexpr (!engine::mechanism_in_this_pass(M)) { __trap(); return; }  // tma below sm_90 (mechanism.h)
  static_assert(RZ >= 1 && (R == 1 || R == 2 || R == 4), "depth radius 1..4, in-plane classes 1, 2, 4");
  using A = acc_t<T>;
  using Ring = engine::Ring<M, S, 16>;
  constexpr int KZ = 2 * RZ + 1, K = 2 * R + 1, TH = volume_item_rows(RZ, R, sizeof(T)), TW = kVolumeTW<T>;
  constexpr bool kLean = volume_lean<T>();
  extern __shared__ __align__(engine::kStageAlign) char smem[];
  __shared__ engine::RawShared<typename Ring::SharedState> ss;
  const StencilGeom& g = v.g;

  // Weights (a, b, c) of the (2rz+1, 2ry+1, 2rx+1) tensor at slot (a, b + R - ry, c + R - rx) of
  // a K x K plane; the slots outside the radii are never multiplied (an input's Inf times a
  // padded zero would be NaN).
  A* w_s = reinterpret_cast<A*>(smem + static_cast<int64_t>(S) * g.stage_bytes);
  bool off_axis_zero = true;
  {
    const int kh = 2 * g.ry + 1, kw = 2 * g.rx + 1;
    for (int i = threadIdx.x; i < KZ * K * K; i += blockDim.x) {
      const int a = i / (K * K), b = i / K % K - (R - g.ry), c = i % K - (R - g.rx);
      w_s[i] = b >= 0 && b < kh && c >= 0 && c < kw ? weight_as<A>(weights, g.wdt, (a * kh + b) * kw + c) : A(0);
      off_axis_zero &= volume_axis_tap<RZ, R>(a, i / K % K, i % K) || w_s[i] == A(0);
    }
  }
  if (star_pair_skips_block<Star>(flags, kLean ? off_axis_zero && g.ry == R && g.rx == R : off_axis_zero)) return;
  A seen = A(0);  // the star's check sum
  constexpr bool kRegWeights = volume_small_class(RZ, R, sizeof(T));
  constexpr int kNw = kRegWeights ? KZ * K * K : 1;
  A w_r[kNw];
#pragma unroll
  for (int i = 0; i < kNw; ++i) w_r[i] = kRegWeights ? w_s[i] : A(0);
  Ring ring(ss.get(), smem, static_cast<int>(g.stage_bytes));

  // This block's column and chunk; consecutive blocks take neighbouring tiles of one chunk, so
  // that the halos they share are read from L2 while it still holds them.
  const int64_t unit = blockIdx.x;
  const int64_t tile = unit % v.tiles_per_plane, bc = unit / v.tiles_per_plane;
  const int64_t chunk = bc % v.nchunks, bi = bc / v.nchunks;
  const int64_t z0 = chunk * v.chunk, z1 = min(v.nz, z0 + v.chunk);
  const int64_t y0 = tile / v.tiles_x * g.tile_h, x0 = tile % v.tiles_x * g.tile_w;
  const int64_t nplanes = z1 - z0 + 2 * RZ;  // input planes z0 - RZ .. z1 + RZ - 1

  auto load = [&](const auto& w, int64_t k) {
    const int64_t p = z0 - RZ + k;
    int64_t src = p >= 0 && p < v.nz ? p : map_outside(p, v.nz, boundary);
    if (src < 0) src = p < 0 ? 0 : v.nz - 1;  // a zero plane: any plane will do, it is not read
    load_stencil_window<T, true, OddRows ? PlaneRows::Each : PlaneRows::Uniform>(
        w, x, g, boundary, [&] { return TileHeader{bi * v.nz + src, y0, x0}; }, &tmap);
  };

  A acc[KZ][TH][TW];
#pragma unroll
  for (int a = 0; a < KZ; ++a)
#pragma unroll
    for (int i = 0; i < TH; ++i)
#pragma unroll
      for (int j = 0; j < TW; ++j) acc[a][i][j] = A(0);

  // One plane's taps. kFull (ry == rx == R, the radius class's own) fixes the window's halo and the
  // tap ranges at compile time: no run-time tap checks or window offsets. It pays for 2-byte types
  // and radius classes above 1; the fp32 and fp64 3x3x3 class keeps the one body, which a second
  // body's registers slowed (design.md §4.8).
  auto plane = [&](const char* stage, int64_t k, engine::Team team, auto full) {
    constexpr bool kFull = decltype(full)::value;
    const int iy = team.rank / kVolumeItemsX, ix = team.rank % kVolumeItemsX;
    const int64_t p = z0 - RZ + k;
    const bool zero_plane = boundary == Boundary::Zero && (p < 0 || p >= v.nz);
    const int* shifts = reinterpret_cast<const int*>(stage + sizeof(TileHeader));
    // (kLean: a Uniform instance's rows share one shift, x's rows being 16-byte multiples apart)
    const char* wcol = nullptr;
    if constexpr (kLean) {
      __builtin_assume(g.pitch % 16 == 0);
      wcol = stage + g.hdr_bytes + (OddRows ? 0 : shifts[0]) +
             (static_cast<int64_t>(ix) * TW - (R - (kFull ? R : g.rx))) * static_cast<int64_t>(sizeof(T));
    }
    if (!zero_plane && iy < v.items_y) {
      // Each window row the item reaches is read once and feeds every (output row, tap row) pair
      // it belongs to: TH + 2R row reads a plane, and one row's values live at a time.
#pragma unroll
      for (int r = 0; r < TH + 2 * R; ++r) {
        // Rows no tap row of the radius meets; wr: the window row (the window has ry rows of halo).
        if (r < R - (kFull ? R : g.ry) || r > R + (kFull ? R : g.ry) + TH - 1) continue;
        const int wr = iy * TH + r - (R - (kFull ? R : g.ry));
        A xv[TW + 2 * R];
        if constexpr (kLean)
          load_window<T, 16>(wcol + static_cast<int64_t>(wr) * g.pitch + (OddRows ? shifts[wr] : 0), xv);
        else
          load_window<T, 16>(stage + g.hdr_bytes + static_cast<int64_t>(wr) * g.pitch + shifts[wr] +
                                 (static_cast<int64_t>(ix) * TW - (R - (kFull ? R : g.rx))) * static_cast<int64_t>(sizeof(T)),
                             xv);
        if constexpr (Star) {
          // (columns beyond the rx halo are the stage's padding, never multiplied)
#pragma unroll
          for (int j = 0; j < TW + 2 * R; ++j)
            if (j >= R - (kFull ? R : g.rx) && j < TW + R + (kFull ? R : g.rx)) seen += xv[j];
        }
#pragma unroll
        for (int i = 0; i < TH; ++i) {
          const int b = r - i;  // the tap row that takes window row r to output row i
          if (b < 0 || b >= K) continue;
          if (b < R - (kFull ? R : g.ry) || b > R + (kFull ? R : g.ry)) continue;  // block-uniform
#pragma unroll
          for (int c = 0; c < K; ++c) {
            if (c < R - (kFull ? R : g.rx) || c > R + (kFull ? R : g.rx)) continue;  // block-uniform
#pragma unroll
            for (int a = 0; a < KZ; ++a) {
              if (Star && !volume_axis_tap<RZ, R>(a, b, c)) continue;
              const A wv = kRegWeights ? w_r[(a * K + b) * K + c] : w_s[(a * K + b) * K + c];
#pragma unroll
              for (int j = 0; j < TW; ++j) acc[a][i][j] += wv * xv[j + c];
            }
          }
        }
      }
    }
    // Plane p completed output plane p - RZ (the last slice's); the first 2*RZ planes only fill
    // the queue.
    if (kLean && k >= 2 * RZ && iy < v.items_y) {
      const int64_t z = p - RZ, yi = y0 + iy * TH, xo = x0 + static_cast<int64_t>(ix) * TW;
      T* o = out + ((bi * v.nz + z) * g.ny + yi) * g.nx + xo;
      // An item whose rows are all whole aligned vectors in the plane (every item of a plane
      // whose rows are whole vectors, but the last row and column of tiles) stores them unchecked.
      if (yi + TH <= g.ny && xo + TW <= g.nx && g.nx % TW == 0 &&
          reinterpret_cast<uintptr_t>(out) % (TW * sizeof(T)) == 0) {
#pragma unroll
        for (int i = 0; i < TH; ++i) store_vector<T, TW>(o + i * g.nx, acc[KZ - 1][i]);
      } else {
#pragma unroll
        for (int i = 0; i < TH; ++i)
          if (yi + i < g.ny && xo < g.nx) store_outputs<T, TW>(o + i * g.nx, g.nx - xo, acc[KZ - 1][i]);
      }
    } else if (!kLean && k >= 2 * RZ && iy < v.items_y) {
      const int64_t z = p - RZ;
      T* oplane = out + (bi * v.nz + z) * g.ny * g.nx;
#pragma unroll
      for (int i = 0; i < TH; ++i) {
        const int64_t y = y0 + iy * TH + i, xo = x0 + static_cast<int64_t>(ix) * TW;
        if (y < g.ny && xo < g.nx) store_outputs<T, TW>(oplane + y * g.nx + xo, g.nx - xo, acc[KZ - 1][i]);
      }
    }
#pragma unroll
    for (int a = KZ - 1; a > 0; --a)
#pragma unroll
      for (int i = 0; i < TH; ++i)
#pragma unroll
        for (int j = 0; j < TW; ++j) acc[a][i][j] = acc[a - 1][i][j];
#pragma unroll
    for (int i = 0; i < TH; ++i)
#pragma unroll
      for (int j = 0; j < TW; ++j) acc[0][i][j] = A(0);
  };
  constexpr bool kFullPath = sizeof(T) == 2 || R >= 2;
  const bool full = kFullPath && g.ry == R && g.rx == R;
  auto consume = [&](const char* stage, int64_t k, engine::Team team) {
    if constexpr (kLean && Star) {
      plane(stage, k, team, std::true_type{});
    } else {
      if constexpr (kFullPath) {
        if (full) return plane(stage, k, team, std::true_type{});
      }
      plane(stage, k, team, std::false_type{});
    }
  };
  engine::run_ring(ring, nplanes, load, consume);
  star_pair_flag<Star>(flags, seen);
}

}  // namespace kernels
}  // namespace cupipe
