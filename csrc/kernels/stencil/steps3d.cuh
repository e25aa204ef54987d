// Fused time steps of a 3-D stencil (stencil3d with steps=k, depth radius 1, in-plane radii 0..1:
// the 7-point star, the 27-point box and every 3x3x3 weight pattern): k applications in one pass
// over memory, stencil3d's 2.5-D blocking with one register queue a level.
//
// A block owns a plane tile of EH x EW points (a window: the outputs and a halo of k*ry rows and
// k*rx columns, rounded up to a store vector) over a chunk of output planes, and streams the
// chunk's planes and k more each side through the engine's ring, one window a stage (the 2-D
// loader: every mechanism, level 0's in-plane boundary). A thread owns TH x TW points of the tile.
// Level s (1..k) keeps the partial sums of its two pending output planes for those points in
// registers: an arriving plane of level s - 1 adds its 3x3 neighbourhood times each weight slice to
// the three outputs it feeds, and the oldest is then complete. Unlike the 2-D kernel's rows, a
// level's in-plane neighbours belong to other threads: each completed plane (rounded to T, as a
// single step stores it) goes to a shared buffer of its level, the block syncs, and the next level
// reads its neighbourhood there. Level k's plane is stored. Each level computes the whole tile;
// its points within s*r of the tile's edge read clamped neighbours and are wrong, which the halo
// leaves out of the stored outputs.
//
// Boundaries at every level. Circular has no edge (the loader wraps planes and windows; every level
// is shift-invariant). In-plane, zero and the mirrors: level 0's window comes from the loader, and
// a tile that meets the plane's edge reads each later level's points outside the plane as zero or
// as the in-plane point they mirror (which the tile holds: it reaches k*r inside). Along depth,
// planes outside the volume are zero planes at every level, and under replicate or reflect an
// arriving plane near an edge also adds to the outputs whose taps past the edge map to it (as the
// 2-D kernel folds its rows).
#pragma once

#include <cuda.h>  // CUtensorMap

#include "engine/engine.cuh"
#include "kernels/numeric.cuh"
#include "kernels/stencil/consumer_io.cuh"
#include "kernels/stencil/geometry.cuh"
#include "kernels/stencil/steps.cuh"  // steps_mirror
#include "kernels/stencil/tile_loader.cuh"

namespace cupipe {
namespace kernels {

constexpr int kSteps3dThreads = 256;
constexpr int kSteps3dItemsX = 16;  // work items across a tile; their rows fill the consumers
constexpr int kSteps3dTH = 2;       // rows of a work item
// Columns of a work item: one 16-byte store of fp32 / fp64, 8 bytes of a 2-byte type.
template <typename T>
constexpr int steps3d_tw() { return sizeof(T) == 8 ? 2 : 4; }
// Elements of zero padding either side of a level buffer's rows (16 bytes): the neighbourhood of a
// tile's edge column reads one past it.
template <typename T>
constexpr int steps3d_pad() { return 16 / static_cast<int>(sizeof(T)); }

struct Steps3dGeom {
  StencilGeom g;            // the loader's: batch * nz planes, windows of eh x ew (halo hy rows, hx columns)
  int64_t nz;
  int64_t tiles_x, tiles_per_plane;
  int64_t chunk, nchunks;   // output planes per block, blocks along the depth
  int items_y;              // rows of work items (consumers / kSteps3dItemsX)
  int eh, ew;               // the tile (window) in points
  int hy, hx;               // its halo: k * ry rows, k * rx columns rounded up to a work item's width
  int ry, rx;               // the stencil's in-plane radii (0 or 1)
  int bpitch;               // bytes per level-buffer row (pads included)
  int64_t buf_bytes;        // one level buffer (eh rows)
  int k;                    // steps this pass, 1..K
};

template <engine::Mechanism M, int S, typename T>
__global__ void __launch_bounds__(kSteps3dThreads, 1)
    stencil3d_steps_kernel(const T* __restrict__ x, T* __restrict__ out, const void* __restrict__ weights,
                           Steps3dGeom v, Boundary boundary, const __grid_constant__ CUtensorMap tmap) {
  if constexpr (!engine::mechanism_in_this_pass(M)) { __trap(); return; }  // tma below sm_90 (mechanism.h)
  using A = acc_t<T>;
  using Ring = engine::Ring<M, S, 16>;
  constexpr int K = stencil3d_steps_per_pass(1, 1, 1, sizeof(T));  // params.h
  constexpr int TH = kSteps3dTH, TW = steps3d_tw<T>(), PAD = steps3d_pad<T>();
  constexpr int64_t esz = sizeof(T);
  extern __shared__ __align__(engine::kStageAlign) char smem[];
  __shared__ engine::RawShared<typename Ring::SharedState> ss;
  __shared__ A w_s[27];
  const StencilGeom& g = v.g;
  char* const bufs = smem + static_cast<int64_t>(S) * g.stage_bytes;  // K - 1 level buffers
  {
    // Weight (a, b, c) of the (3, 2ry+1, 2rx+1) tensor at slot (a, b + 1 - ry, c + 1 - rx); the
    // slots outside the radii are never read.
    const int kh = 2 * v.ry + 1, kw = 2 * v.rx + 1;
    for (int i = threadIdx.x; i < 27; i += blockDim.x) {
      const int a = i / 9, b = i / 3 % 3 - (1 - v.ry), c = i % 3 - (1 - v.rx);
      w_s[i] = b >= 0 && b < kh && c >= 0 && c < kw ? weight_as<A>(weights, g.wdt, (a * kh + b) * kw + c) : A(0);
    }
    // The buffers' pads are read (clamped neighbourhoods) and never written: zero them once.
    uint32_t* b32 = reinterpret_cast<uint32_t*>(bufs);
    for (int64_t i = threadIdx.x; i < (K - 1) * v.buf_bytes / 4; i += blockDim.x) b32[i] = 0u;
  }
  __syncthreads();
  A w_r[27];
#pragma unroll
  for (int i = 0; i < 27; ++i) w_r[i] = w_s[i];
  Ring ring(ss.get(), smem, static_cast<int>(g.stage_bytes));

  // This block's tile and chunk; consecutive blocks take neighbouring tiles of one chunk, so that
  // the windows they share are read from L2 while it still holds them.
  const int k = v.k;
  const int64_t unit = blockIdx.x;
  const int64_t tile = unit % v.tiles_per_plane, bc = unit / v.tiles_per_plane;
  const int64_t chunk = bc % v.nchunks, bi = bc / v.nchunks;
  const int64_t z0 = chunk * v.chunk, z1 = min(v.nz, z0 + v.chunk);
  const int64_t oy0 = tile / v.tiles_x * g.tile_h, ox0 = tile % v.tiles_x * g.tile_w;  // first output
  const int64_t ty0 = oy0 - v.hy, tx0 = ox0 - v.hx;                                      // the window's origin
  const int64_t nplanes = z1 - z0 + 2 * int64_t(k);  // input planes z0 - k .. z1 + k - 1

  const bool circ = boundary == Boundary::Circular;
  const bool mirror = boundary == Boundary::Replicate || boundary == Boundary::Reflect;
  const bool reflect = boundary == Boundary::Reflect;
  // A plane outside the volume (none under circular) is a zero plane: any plane is loaded for it.
  auto load = [&](const auto& w, int64_t t) {
    const int64_t p = z0 - k + t;
    int64_t src = p;
    if (p < 0 || p >= v.nz) src = circ ? map_outside(p, v.nz, boundary) : (p < 0 ? 0 : v.nz - 1);
    load_stencil_window<T>(w, x, g, boundary, [&] { return TileHeader{bi * v.nz + src, oy0, ox0}; }, &tmap);
  };
  // The tile reaches past the plane's edge (block-uniform): later levels map those reads.
  const bool edge = !circ && (ty0 < 0 || ty0 + v.eh > g.ny || tx0 < 0 || tx0 + v.ew > g.nx);

  A P[K][2][TH][TW];  // level s's partial output planes a - 1 + 1 .. a + 1 after arrival a
#pragma unroll
  for (int s = 0; s < K; ++s)
#pragma unroll
    for (int d = 0; d < 2; ++d)
#pragma unroll
      for (int i = 0; i < TH; ++i)
#pragma unroll
        for (int j = 0; j < TW; ++j) P[s][d][i][j] = A(0);

  // acc += weight slice aw times the neighbourhood (nb[r][c]: tile row iy*TH - 1 + r, column
  // ix*TW - 1 + c); taps outside the radii are skipped (block-uniform).
  auto taps = [&](A(&acc)[TH][TW], int aw, const A(&nb)[TH + 2][TW + 2]) {
#pragma unroll
    for (int b = 0; b < 3; ++b) {
      if (b < 1 - v.ry || b > 1 + v.ry) continue;
#pragma unroll
      for (int c = 0; c < 3; ++c) {
        if (c < 1 - v.rx || c > 1 + v.rx) continue;
        const A wv = w_r[aw * 9 + b * 3 + c];
#pragma unroll
        for (int i = 0; i < TH; ++i)
#pragma unroll
          for (int j = 0; j < TW; ++j) acc[i][j] = fma(wv, nb[i + b][j + c], acc[i][j]);
      }
    }
  };

  auto consume = [&](const char* stage, int64_t t, engine::Team team) {
    const int ix = team.rank % kSteps3dItemsX, iy = team.rank / kSteps3dItemsX;
    const bool live = iy < v.items_y;  // threads past the tile's rows only join the syncs
    const int ly0 = iy * TH, lx0 = ix * TW;
    A nb[TH + 2][TW + 2];
    // Level 0's neighbourhood: the stage's window (the loader's boundary), rows clamped to it.
    if (live) {
      const int* shifts = reinterpret_cast<const int*>(stage + sizeof(TileHeader));
#pragma unroll
      for (int r = 0; r < TH + 2; ++r) {
        const int ly = min(max(ly0 - 1 + r, 0), v.eh - 1);
        load_window<T, 16>(stage + g.hdr_bytes + static_cast<int64_t>(ly) * g.pitch + shifts[ly] + (lx0 - 1) * esz,
                           nb[r]);
      }
    }
    int64_t a = z0 - k + t;  // the plane nb holds, at the level reached
#pragma unroll
    for (int s = 0; s < K; ++s) {
      if (s >= k) break;
      const bool real = circ || (a >= 0 && a < v.nz);
      A n[TH][TW];
      if (live) {
        if (!real) {
#pragma unroll
          for (int r = 0; r < TH + 2; ++r)
#pragma unroll
            for (int c = 0; c < TW + 2; ++c) nb[r][c] = A(0);
        }
        // Output plane a - 1 + d takes plane a as tap slice 2 - d; d = 0 completes it.
#pragma unroll
        for (int d = 0; d < 3; ++d) {
          A(&acc)[TH][TW] = d == 0 ? n : P[s][d > 0 ? d - 1 : 0];
#pragma unroll
          for (int i = 0; i < TH; ++i)
#pragma unroll
            for (int j = 0; j < TW; ++j) acc[i][j] = d < 2 ? P[s][d][i][j] : A(0);
          taps(acc, 2 - d, nb);
        }
        // Near a depth edge, the outputs whose taps past it map to plane a take it again as those taps.
        if (mirror && real && (a <= 1 || a >= v.nz - 2)) {
#pragma unroll
          for (int d = 0; d < 3; ++d) {
            const int64_t r = a - 1 + d;
            if (r < 0 || r >= v.nz) continue;
#pragma unroll
            for (int aw = 0; aw < 3; ++aw) {
              const int64_t gz = r + aw - 1;
              if (aw != 2 - d && (gz < 0 || gz >= v.nz) && steps_mirror(gz, v.nz, reflect) == a)
                taps(d == 0 ? n : P[s][d > 0 ? d - 1 : 0], aw, nb);
            }
          }
        }
        const bool real_out = circ || (a - 1 >= 0 && a - 1 < v.nz);
#pragma unroll
        for (int i = 0; i < TH; ++i)
#pragma unroll
          for (int j = 0; j < TW; ++j) n[i][j] = real_out ? to_acc<A>(from_acc<T>(n[i][j])) : A(0);
      }
      a -= 1;  // n: level s + 1's plane a
      if (s + 1 < k) {
        // To this level's buffer, then the next level's neighbourhood from it.
        char* buf = bufs + s * v.buf_bytes;
        if (live) {
#pragma unroll
          for (int i = 0; i < TH; ++i)
            store_vector<T, TW>(reinterpret_cast<T*>(buf + static_cast<int64_t>(ly0 + i) * v.bpitch) + PAD + lx0, n[i]);
        }
        engine::team_sync(team);
        if (live) {
          if (!edge) {
#pragma unroll
            for (int r = 0; r < TH + 2; ++r) {
              const int ly = min(max(ly0 - 1 + r, 0), v.eh - 1);
              load_window<T, 16>(buf + static_cast<int64_t>(ly) * v.bpitch + (PAD + lx0 - 1) * esz, nb[r]);
            }
          } else {
            // Points outside the plane read as zero or as the point they mirror, in the tile. The
            // tile index of plane index i (n: the plane's extent, t0: the tile's origin, e: its
            // extent), clamped; `zero`: the point reads as zero.
            auto tile_index = [&](int64_t i, int64_t n, int64_t t0, int e, bool& zero) {
              zero = (i < 0 || i >= n) && !mirror;
              if (i < 0 || i >= n) i = steps_mirror(i, n, reflect);
              return static_cast<int>(min(max(i - t0, int64_t(0)), int64_t(e - 1)));
            };
#pragma unroll
            for (int r = 0; r < TH + 2; ++r) {
              bool zy, zx;
              const int ly = tile_index(ty0 + ly0 - 1 + r, g.ny, ty0, v.eh, zy);
#pragma unroll
              for (int c = 0; c < TW + 2; ++c) {
                const int lx = tile_index(tx0 + lx0 - 1 + c, g.nx, tx0, v.ew, zx);
                nb[r][c] = zy || zx ? A(0)
                                    : to_acc<A>(*reinterpret_cast<const T*>(buf + static_cast<int64_t>(ly) * v.bpitch +
                                                                            (PAD + lx) * esz));
              }
            }
          }
        }
      } else if (live && a >= z0 && a < z1) {
        // Level k's plane a: the tile's outputs.
        T* oplane = out + (bi * v.nz + a) * g.ny * g.nx;
        const int64_t gx = tx0 + lx0;
        if (lx0 >= v.hx && lx0 < v.hx + g.tile_w && gx < g.nx) {
#pragma unroll
          for (int i = 0; i < TH; ++i) {
            const int ly = ly0 + i;
            const int64_t gy = ty0 + ly;
            if (ly >= v.hy && ly < v.hy + g.tile_h && gy < g.ny) store_outputs<T, TW>(oplane + gy * g.nx + gx, g.nx - gx, n[i]);
          }
        }
      }
    }
    // The next plane's level 1 rewrites the first buffer, which the levels above may still read.
    engine::team_sync(team);
  };
  engine::run_ring(ring, nplanes, load, consume);
}

}  // namespace kernels
}  // namespace cupipe
