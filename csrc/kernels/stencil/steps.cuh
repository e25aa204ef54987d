// Fused time steps of a 2-D stencil (stencil2d / stencil1d with steps=k): k applications in one
// pass over memory, as a register pipeline streamed down the rows (temporal blocking).
//
// A warp owns a strip of 32 * V columns (V consecutive columns a lane) and streams rows down it.
// Row q of x arrives at level 0. Level s keeps 2 * RY partial output rows in registers, a queue as
// stencil3d keeps along depth: an arriving row of level s - 1 is added to the 2 * RY + 1 outputs it
// feeds, and the oldest is then complete. That row of level s (q - RY), rounded to T as a single
// step stores it, arrives at level s + 1 in the same iteration; level k's row is stored. So the
// strip is read once and written once for k steps. Along a row, an arriving row's RX values on
// either side come from the neighbour lanes (shuffles), and each strip recomputes a halo of
// k * RX columns a side (rounded up to V): its outputs are the middle 32 * V - 2 * halo columns.
//
// A block owns a band of columns (its consumer warps' strips side by side) over a chunk of rows.
// The rows stream through the engine's stage ring, a few window rows a stage, loaded by the 2-D
// loader (every mechanism; level 0's boundary), with k * RY rows before and after the chunk that
// fill and drain the pipeline (their outputs are not stored). Rows of a 1-D stencil along the rows
// (RY = 0) are independent: a block takes a run of (row window, band) items instead.
//
// The boundary holds at every level. Circular has no edge: the loader wraps, and every level is
// shift-invariant. Zero: rows outside the plane add nothing, columns outside are zeroed. Replicate
// and reflect: an arriving row near a plane edge also adds to the outputs whose taps past the edge
// map to it (the ghost rows folded onto their sources), and the RX columns past a column edge are
// copied from the columns they mirror.
#pragma once

#include <cuda.h>  // CUtensorMap

#include "engine/engine.cuh"
#include "kernels/numeric.cuh"
#include "kernels/stencil/consumer_io.cuh"
#include "kernels/stencil/geometry.cuh"
#include "kernels/stencil/star_pair.cuh"
#include "kernels/stencil/tile_loader.cuh"

namespace cupipe {
namespace kernels {

constexpr int kStepsThreads = 128;
// Blocks an SM: 4 (128 registers) where the queue takes 32 registers; 3 (168) for 64, which spilled at 128.
constexpr int steps_min_blocks(int ry, int esz) { return stencil_steps_queue_regs(ry, esz) == 32 ? 4 : 3; }
// Columns a lane owns: 4 where the levels keep partial rows, 8 for a stencil along the rows (none).
constexpr int steps_lane_cols(int ry) { return ry == 0 ? 8 : 4; }
constexpr int kStepsRowsRy0 = 4;  // window rows a stage: of a 1-D stencil along the rows
constexpr int kStepsRows = 8;     // of the others

// The source of index i outside [0, n) under replicate or reflect (map_outside's), inline and
// without a division: a call inside the level loop would spill its queue around the call.
__device__ __forceinline__ int64_t steps_mirror(int64_t i, int64_t n, bool reflect) {
  if (!reflect || n == 1) return i < 0 ? 0 : n - 1;
  while (i < 0 || i >= n) i = i < 0 ? -i : 2 * (n - 1) - i;
  return i;
}

struct StepsGeom {
  StencilGeom g;            // the loader's: windows of win_h rows, band_w + 2 * halo columns (ry 0, rx halo)
  int64_t bands;            // column bands of a plane
  int64_t chunk, nchunks;   // RY > 0: output rows of a block, blocks along a plane's rows (inner bands)
  int64_t edge_chunk, edge_nchunks;  // the same for the first and last band, whose edge strips are slower
  int64_t row_tiles;        // RY = 0: row windows of a plane
  int64_t items_per_block;  // RY = 0: consecutive (plane, row window, band) items of a block
  int band_w;               // output columns of a band: consumer warps x strips x warp_w
  int strips;               // strips a warp (RY = 0: as many as fill kStepsRowsRy0 rows; else 1)
  int warp_w;               // output columns of a strip: 32 * V - 2 * halo
  int halo;                 // columns recomputed each side: k * rx rounded up to V
  int k;                    // steps this pass, 1..K
};

// Star: the star pair's axis-taps instance (star_pair.cuh). Its check sum takes the block's level-k
// rows, every lane's. That suffices: the two bodies' values agree until conv's 0 x Inf first makes
// a NaN the star lacks, and the Inf or NaN it multiplied, at a level s and a point of the plane,
// reaches level k under the star's taps too (its centre and vertical taps carry it at most RY rows
// a level towards the block's rows [y0, y1), in its column; every lane computes every level).
template <engine::Mechanism M, int S, typename T, int RY, int RX, bool Star>
__global__ void __launch_bounds__(kStepsThreads, steps_min_blocks(RY, sizeof(T)))
    stencil_steps_kernel(const T* __restrict__ x, T* __restrict__ out, const void* __restrict__ weights, StepsGeom f,
                         Boundary boundary, int* __restrict__ flags, const __grid_constant__ CUtensorMap tmap) {
  if constexpr (!engine::mechanism_in_this_pass(M)) { __trap(); return; }  // tma below sm_90 (mechanism.h)
  static_assert(RY >= 0 && RY <= 4 && RX >= 0 && RX <= 4, "radii 0..4");
  using A = acc_t<T>;
  using Ring = engine::Ring<M, S, 16>;
  constexpr int V = steps_lane_cols(RY), K = stencil_steps_per_pass(RY, RX, sizeof(T), 1);  // params.h
  constexpr int KY = 2 * RY + 1, KX = 2 * RX + 1, NW = KY * KX, PQ = RY > 0 ? 2 * RY : 1;
  constexpr bool kRegWeights = NW <= 25;  // the 9x9 box's 81 would crowd out the queue
  // Output chunks a store moves as one vector: 16 bytes (8 of a 2-byte type with 4 a lane).
  constexpr int CW = sizeof(T) == 8 ? 2 : sizeof(T) == 4 ? 4 : (V >= 8 ? 8 : 4);
  static_assert(V % CW == 0 && RX <= V, "a lane's columns split into store vectors and cover a halo");
  extern __shared__ __align__(engine::kStageAlign) char smem[];
  __shared__ engine::RawShared<typename Ring::SharedState> ss;
  __shared__ A w_s[NW];
  const StencilGeom& g = f.g;
  static_assert(!Star || (RY > 0 && RX > 0), "a star pair where taps lie off the axes");
  bool off_axis_zero = true;
  for (int i = threadIdx.x; i < NW; i += blockDim.x) {
    w_s[i] = weight_as<A>(weights, g.wdt, i);
    off_axis_zero &= i / KX == RY || i % KX == RX || w_s[i] == A(0);
  }
  if (star_pair_skips_block<Star>(flags, off_axis_zero)) return;
  A seen = A(0);  // the star's check sum
  A w_r[kRegWeights ? NW : 1];
#pragma unroll
  for (int i = 0; i < (kRegWeights ? NW : 1); ++i) w_r[i] = kRegWeights ? w_s[i] : A(0);
  Ring ring(ss.get(), smem, static_cast<int>(g.stage_bytes));

  // The block's stream. RY > 0: plane b, band, rows [y0, y1) out, rows y0 - k*RY .. y1 - 1 + k*RY
  // in. RY = 0: items [item0, item0 + ntiles), each one stage.
  const int k = f.k;
  int64_t b = 0, band = 0, y0 = 0, y1 = g.ny, ntiles = 0, item0 = 0;
  if constexpr (RY > 0) {
    // A plane's blocks: the edge bands' first (first and last alternating), whose chunks are shorter
    // where the edge strips cost more (launch_steps), then the inner bands' (band fastest).
    const int64_t edges = min(f.bands, int64_t(2)), inner = f.bands - edges;
    const int64_t per_plane = edges * f.edge_nchunks + inner * f.nchunks;
    const int64_t unit = blockIdx.x;
    b = unit / per_plane;
    const int64_t u = unit - b * per_plane;
    int64_t chunk, len;
    if (u < edges * f.edge_nchunks) {
      band = u % edges == 0 ? 0 : f.bands - 1;
      chunk = u / edges;
      len = f.edge_chunk;
    } else {
      const int64_t v = u - edges * f.edge_nchunks;
      band = 1 + v % inner;
      chunk = v / inner;
      len = f.chunk;
    }
    y0 = chunk * len;
    y1 = min(g.ny, y0 + len);
    ntiles = (y1 - y0 + 2 * int64_t(k) * RY + g.win_h - 1) / g.win_h;
  } else {
    item0 = static_cast<int64_t>(blockIdx.x) * f.items_per_block;
    ntiles = min(f.items_per_block, g.batch * f.row_tiles * f.bands - item0);
  }
  // Stage t's plane, first row and band origin.
  auto tile_at = [&](int64_t t) {
    if constexpr (RY > 0) {
      return TileHeader{b, y0 - int64_t(k) * RY + t * g.win_h, band * f.band_w};
    } else {
      const int64_t item = item0 + t, bnd = item % f.bands, rt = item / f.bands;
      return TileHeader{rt / f.row_tiles, rt % f.row_tiles * g.win_h, bnd * f.band_w};
    }
  };
  auto load = [&](const auto& w, int64_t t) {
    load_stencil_window<T>(w, x, g, boundary, [&] { return tile_at(t); }, &tmap);
  };

  const bool circ = boundary == Boundary::Circular;
  const bool mirror = boundary == Boundary::Replicate || boundary == Boundary::Reflect;
  const bool reflect = boundary == Boundary::Reflect;
  A P[K][PQ][V];  // level s's partial rows q - RY + 1 .. q + RY (after arrival q)
#pragma unroll
  for (int s = 0; s < K; ++s)
#pragma unroll
    for (int d = 0; d < PQ; ++d)
#pragma unroll
      for (int e = 0; e < V; ++e) P[s][d][e] = A(0);

  // acc += tap row a of the weights times the arriving row (xv: RX columns either side).
  auto tap_row = [&](A(&acc)[V], int a, const A(&xv)[V + 2 * RX]) {
#pragma unroll
    for (int c = 0; c < KX; ++c) {
      if (Star && a != RY && c != RX) continue;
      const A wv = kRegWeights ? w_r[a * KX + c] : w_s[a * KX + c];
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] = fma(wv, xv[e + c], acc[e]);
    }
  };

  auto consume = [&](const char* stage, int64_t t, engine::Team team) {
    const int lane = team.rank & 31;
    const TileHeader th = tile_at(t);
    // The band's strips: one a warp (RY > 0: its register queue); the rows of a 1-D stencil along
    // the rows take f.strips a warp, so that a stage is a longer stretch of a short row.
    for (int m = 0; m < (RY > 0 ? 1 : f.strips); ++m) {
      const int strip = m * (team.size >> 5) + (team.rank >> 5);
      const int64_t cw = th.x0 - f.halo + int64_t(strip) * f.warp_w;  // the strip's first column
      if (cw + f.halo >= g.nx) continue;  // no outputs in the plane (warp-uniform)
      const int64_t cl = cw + lane * V;   // this lane's first column
      const bool xedge = !circ && (cw < 0 || cw + 32 * V > g.nx);
      const bool writes = lane * V >= f.halo && lane * V < 32 * V - f.halo;  // whole lanes: halo % V == 0
      const int* shifts = reinterpret_cast<const int*>(stage + sizeof(TileHeader));
      const int64_t rows_left = RY > 0 ? y1 - y0 + 2 * int64_t(k) * RY - t * g.win_h : g.ny - th.y0;
      const int rows = static_cast<int>(min(int64_t(g.win_h), rows_left));
      // The k levels of one arriving row. kSimple: every row it meets at every level lies in the
      // plane, none within reach of a row edge, and the strip is away from the column edges (most
      // rows of most strips): the taps alone, no row bookkeeping, no boundary work.
      // Called with a constant kSimple at both places, each inlined: two bodies.
      auto levels = [&](A(&v)[V], int64_t& q, const bool kSimple) __attribute__((always_inline)) {
        bool real = circ || (q >= 0 && q < g.ny);
#pragma unroll
        for (int s = 0; s < K; ++s) {
          if (s >= k) break;
          A xv[V + 2 * RX];
#pragma unroll
          for (int j = 0; j < RX; ++j) {
            xv[j] = __shfl_up_sync(0xffffffffu, v[V - RX + j], 1);
            xv[RX + V + j] = __shfl_down_sync(0xffffffffu, v[j], 1);
          }
#pragma unroll
          for (int e = 0; e < V; ++e) xv[RX + e] = v[e];
          A n[V];
#pragma unroll
          for (int d = 0; d <= 2 * RY; ++d) {  // output row q - RY + d takes q as tap row 2RY - d
            A(&acc)[V] = d == 0 ? n : P[s][d > 0 ? d - 1 : 0];
#pragma unroll
            for (int e = 0; e < V; ++e) acc[e] = d < 2 * RY ? P[s][d][e] : A(0);
            tap_row(acc, 2 * RY - d, xv);
          }
          if (kSimple) {
#pragma unroll
            for (int e = 0; e < V; ++e) v[e] = to_acc<A>(from_acc<T>(n[e]));  // a step's output is a T
          } else {
            // Near an edge, the outputs whose taps past it map to q take it again as those taps.
            if (RY > 0 && mirror && real && (q <= RY || q >= g.ny - 1 - RY)) {
#pragma unroll
              for (int d = 0; d <= 2 * RY; ++d) {
                const int64_t r = q - RY + d;
                if (r < 0 || r >= g.ny) continue;
#pragma unroll
                for (int a = 0; a <= 2 * RY; ++a) {
                  const int64_t gy = r + a - RY;
                  if (a != 2 * RY - d && (gy < 0 || gy >= g.ny) && steps_mirror(gy, g.ny, reflect) == q)
                    tap_row(d == 0 ? n : P[s][d > 0 ? d - 1 : 0], a, xv);
                }
              }
            }
            q -= RY;
            real = circ || (q >= 0 && q < g.ny);
#pragma unroll
            for (int e = 0; e < V; ++e) n[e] = real ? to_acc<A>(from_acc<T>(n[e])) : A(0);
            if (xedge) {  // the columns past an edge of the plane, at this level
              if (boundary == Boundary::Zero) {
#pragma unroll
                for (int e = 0; e < V; ++e)
                  if (cl + e < 0 || cl + e >= g.nx) n[e] = A(0);
              } else {
#pragma unroll
                for (int j = 1; j <= RX; ++j) {
#pragma unroll
                  for (int side = 0; side < 2; ++side) {
                    const int64_t gc = side ? g.nx - 1 + j : -j;  // warp-uniform: ghost and source columns
                    const int64_t pg = gc - cw, pm = steps_mirror(gc, g.nx, reflect) - cw;
                    if (pg < 0 || pg >= 32 * V || pm < 0 || pm >= 32 * V) continue;
                    A val = n[0];
#pragma unroll
                    for (int e = 1; e < V; ++e)
                      if (pm % V == e) val = n[e];
                    val = __shfl_sync(0xffffffffu, val, static_cast<int>(pm / V));
#pragma unroll
                    for (int e = 0; e < V; ++e)
                      if (lane == pg / V && pg % V == e) n[e] = val;
                  }
                }
              }
            }
#pragma unroll
            for (int e = 0; e < V; ++e) v[e] = n[e];
          }
        }
        if (kSimple) q -= int64_t(k) * RY;
      };
      for (int i = 0; i < rows; ++i) {
        const T* src = reinterpret_cast<const T*>(stage + g.hdr_bytes + static_cast<int64_t>(i) * g.pitch + shifts[i]) +
                       strip * f.warp_w + lane * V;
        int64_t q = th.y0 + i;  // the row v holds, at the level reached
        // A row outside the plane (none under circular) is a row of zeros at every level: it adds
        // nothing, with no branch in the taps (its ghost taps are folded onto their sources).
        const bool real = circ || (q >= 0 && q < g.ny);
        A v[V];
#pragma unroll
        for (int e = 0; e < V; ++e) v[e] = real ? to_acc<A>(src[e]) : A(0);
        if (!xedge && (RY == 0 || circ || (q - int64_t(k) * RY > RY && q < g.ny - 1 - RY)))
          levels(v, q, true);
        else
          levels(v, q, false);
        if (Star && q >= y0 && q < y1) {
#pragma unroll
          for (int e = 0; e < V; ++e) seen += v[e];
        }
        // v: level k's row q. Stored where it is this block's and the lane's.
        if (writes && q >= (RY > 0 ? y0 : 0) && q < y1 && cl < g.nx) {
          T* dst = out + (th.b * g.ny + q) * g.nx + cl;
#pragma unroll
          for (int j = 0; j < V / CW; ++j) {
            A c[CW];
#pragma unroll
            for (int e = 0; e < CW; ++e) c[e] = v[j * CW + e];
            store_outputs<T, CW>(dst + j * CW, g.nx - cl - j * CW, c);
          }
        }
      }
    }
  };
  engine::run_ring(ring, ntiles, load, consume);
  star_pair_flag<Star>(flags, seen);
}

}  // namespace kernels
}  // namespace cupipe
