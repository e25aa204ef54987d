// The stencil's tile loader: one tile's padded input window into a stage, already resolved
// through the boundary. Each window row is fetched from its mapped source row (rows of the zero
// boundary are zero-filled), the in-range part of a row moves as one async segment, and the few
// halo columns outside the plane are plain stores. x's rows lie xs_row elements apart (nx, or a
// pitch when x is a crop of a larger tensor). When xs_row * sizeof(T) % 16 == 0 all rows of a
// plane share one shift and the rows inside the plane move as one copy_rows box (tma: one
// tensor-map box); otherwise row by row. The header, zero rows and halo columns are stored by the
// ring's store team and published with the stage, so consumers never see the boundary.
#pragma once

#include "engine/common.cuh"
#include "engine/mbarrier.cuh"
#include "kernels/numeric.cuh"
#include "kernels/stencil/geometry.cuh"

namespace cupipe {
namespace kernels {

// The source index of a window index outside [0, n) (-1: a zero of the zero boundary). Not
// inlined: only boundary rows and columns get here, and its 64-bit modulo is long code. Not
// static either (here and below): a static callee's name carries its file's, and the name alone
// changed ptxas's code, so a first-use compile would not match the ahead-of-time one.
inline __device__ __noinline__ int64_t map_outside(int64_t i, int64_t n, Boundary b) {
  switch (b) {
    case Boundary::Zero: return -1;
    case Boundary::Replicate: return i < 0 ? 0 : n - 1;
    case Boundary::Circular: { int64_t m = i % n; return m < 0 ? m + n : m; }
    case Boundary::Reflect: {
      if (n == 1) return 0;
      const int64_t period = 2 * (n - 1);
      int64_t m = i % period;
      if (m < 0) m += period;
      return m < n ? m : period - m;
    }
  }
  return -1;
}

__device__ __forceinline__ int64_t map_index_dev(int64_t i, int64_t n, Boundary b) {
  return i >= 0 && i < n ? i : map_outside(i, n, b);
}

// The source column of window column e of a row of nx elements, points of `step` values each: the
// boundary maps e's point, e keeps its place within the point.
__device__ __forceinline__ int64_t map_column_dev(int64_t e, int64_t nx, int step, Boundary b) {
  if (e >= 0 && e < nx) return e;
  if (step == 1) return map_outside(e, nx, b);
  const int64_t q = e >= 0 ? e / step : -((-e + step - 1) / step);
  const int64_t m = map_outside(q, nx / step, b);
  return m < 0 ? -1 : m * step + (e - q * step);
}

// The byte shift (mod 16) of window column 0 of source row `src_row`: the address of
// plane[src_row][xw], which may lie outside the plane (the arithmetic wraps, modulo 16 is exact).
template <typename T>
__device__ __forceinline__ int row_shift(const T* plane, int64_t src_row, int64_t nx, int64_t xw) {
  return static_cast<int>((reinterpret_cast<uintptr_t>(plane) +
                           static_cast<uintptr_t>((src_row * nx + xw) * static_cast<int64_t>(sizeof(T)))) & 15u);
}

inline __device__ __noinline__ TileHeader tile_origin_64(int64_t t, int64_t per_plane, int64_t tiles_x, int tile_h,
                                                         int tile_w, int x_phase) {
  const int64_t r = t % per_plane;
  return TileHeader{t / per_plane, r / tiles_x * tile_h, r % tiles_x * tile_w - x_phase};
}

// Tile t of the batch in row-major tile order; below 2^31 tiles by multiply-and-shift division.
__device__ __forceinline__ TileHeader tile_origin(int64_t t, const StencilGeom& g) {
  if (g.ntiles >= (int64_t(1) << 31))
    return tile_origin_64(t, g.tiles_per_plane, g.tiles_x, g.tile_h, g.tile_w, g.x_phase);
  uint32_t b, r, ty, tx;
  g.per_plane_div.divmod(static_cast<uint32_t>(t), b, r);
  g.tiles_x_div.divmod(r, ty, tx);
  return TileHeader{b, static_cast<int64_t>(ty) * g.tile_h, static_cast<int64_t>(tx) * g.tile_w - g.x_phase};
}

// One tile's place in its stage: window row i of the tile comes from source row yw + i (rows
// [i_lo, i_hi) lie inside the plane), window column c from source column xw + c (columns
// [c_lo, c_hi) lie inside it).
struct TileWindow {
  TileHeader t;
  int64_t yw, xw, c_lo, c_hi;
  int i_lo, i_hi;
};

// What the stage fill needs of the geometry, by value (for the out-of-line fill_stage). reach:
// how far past the plane's columns the taps of a stored output reach (rx * step).
struct FillGeom {
  int64_t ny, nx, xs_row;
  int win_h, win_w, pitch, hdr_bytes, step, reach;
  Boundary boundary;
};

// The plain stores of a load, by the store team (rank, size): the header (tile origin, row
// shifts), the rows of the zero boundary, and the halo columns outside the plane. Out of line:
// the drivers produce at two places, and this part does not depend on the ring.
template <typename T>
__device__ __noinline__ void fill_stage(uint32_t stage_smem, const T* plane, TileWindow w, FillGeom g, int rank,
                                        int size) {
  using A = acc_t<T>;
  char* stage = static_cast<char*>(__cvta_shared_to_generic(stage_smem));
  auto row = [&](int i, int64_t src_row) {  // window row i, filled from source row src_row
    return reinterpret_cast<T*>(stage + g.hdr_bytes + static_cast<int64_t>(i) * g.pitch +
                                row_shift(plane, src_row, g.xs_row, w.xw));
  };
  if (rank == 0) *reinterpret_cast<TileHeader*>(stage) = w.t;
  int* shifts = reinterpret_cast<int*>(stage + sizeof(TileHeader));
  for (int i = rank; i < g.win_h; i += size) {
    const int64_t src = map_index_dev(w.yw + i, g.ny, g.boundary);
    shifts[i] = row_shift(plane, src < 0 ? w.yw + i : src, g.xs_row, w.xw);  // a zero row: any shift will do
  }
  const int n_inside = w.i_hi - w.i_lo;
  if (g.boundary == Boundary::Zero) {
    for (int j = 0; j < g.win_h - n_inside; ++j) {
      const int i = j < w.i_lo ? j : j + n_inside;
      T* r = row(i, w.yw + i);
      for (int c = rank; c < g.win_w; c += size) r[c] = from_acc<T>(A(0));
    }
  }
  const int n_left = static_cast<int>(w.c_lo - w.xw), n_right = static_cast<int>(w.xw + g.win_w - w.c_hi);
  // Halo columns beyond reach (a window hanging far past the plane's edge, as the last band of the
  // fused steps does) feed no stored output: zeros (a tensor-core consumer multiplies them by a
  // zero weight, so they must be finite), stored a row at a time without mapping or loading.
  const int far_l = max(n_left - g.reach, 0), far_r = max(n_right - g.reach, 0), n_far = far_l + far_r;
  if (n_far > 0) {
    for (int i = 0; i < g.win_h; ++i) {
      const int64_t src = map_index_dev(w.yw + i, g.ny, g.boundary);
      if (src < 0) continue;  // a zero row, zero-filled above
      T* r = row(i, src);
      for (int h = rank; h < n_far; h += size) r[h < far_l ? h : g.win_w - far_r + (h - far_l)] = from_acc<T>(A(0));
    }
  }
  const int near_l = n_left - far_l, n_halo = near_l + n_right - far_r;
  for (int idx = rank; idx < g.win_h * n_halo; idx += size) {
    const int i = idx / n_halo, h = idx - i * n_halo;
    const int64_t src = map_index_dev(w.yw + i, g.ny, g.boundary);
    if (src < 0) continue;
    const int c = h < near_l ? far_l + h : g.win_w - n_right + (h - near_l);
    const int64_t mc = map_column_dev(w.xw + c, g.nx, g.step, g.boundary);
    row(i, src)[c] = mc < 0 ? from_acc<T>(A(0)) : plane[src * g.xs_row + mc];
  }
}

// Fills the stage behind the ring's write handle `w` with the window of the tile origin() gives
// (a TileHeader: plane, first output row and column): the rows inside the plane as async copies
// (one box when they share a shift), boundary rows from their mapped source rows, and the store
// team's plain stores (header, zero rows, halo columns). origin() is called where the header is
// needed, so that threads that leave early never derive it. OneWarpBox: the zero boundary's
// tensor-map tiles are loaded by warp 0 alone (see below). Rows: the copies compiled for the rows
// inside the plane (Any: the box and the rows each at its own shift, by x's row stride; Uniform: the
// box, rows of other strides one at a time; Each: rows each at its own shift): a kernel tight on
// registers takes the one its launcher knows it needs.
enum class PlaneRows { Any, Uniform, Each };
template <typename T, bool OneWarpBox = true, PlaneRows Rows = PlaneRows::Any, class W, class Origin>
__device__ __forceinline__ void load_stencil_window(const W& w, const T* x, const StencilGeom& g, Boundary boundary,
                                                    Origin&& origin, const void* tmap) {
  constexpr int64_t esz = sizeof(T);
  // A box's x coordinate: the 16-byte boundary at or before window column xw (row shift `shift`
  // bytes), in the map's units (tensor_map_unit) from its base, map_lead bytes before x.
  const int lead = g.map_lead;
  auto map_x = [lead](int64_t xw, int shift) {
    return static_cast<int>((xw * esz - shift + lead) / tensor_map_unit(esz));
  };
  if constexpr (W::kTensorCopies && OneWarpBox) {
    // The zero boundary's tensor-map tiles (every tile one box): one warp does the whole load
    // (thread 0 the copy, the warp the header and shifts) instead of every warp deriving the
    // tile's origin and window. Faster for the Box and Mma kernels; the narrow CUDA-core kernels
    // gained nothing or lost, and keep every warp loading (docs/design.md).
    if (g.tensor_tiles && boundary == Boundary::Zero) {
      if (threadIdx.x >= 32) return;
      const TileHeader t = origin();
      const int64_t yw = t.y0 - g.ry, xw = t.x0 - int64_t(g.rx) * g.step;
      const int shift = row_shift(x + t.b * g.xs_plane, yw, g.xs_row, xw);
      w.copy_tensor_3d(g.hdr_bytes, tmap, map_x(xw, shift), static_cast<int>(yw),
                       static_cast<int>(t.b), static_cast<uint32_t>(g.win_h) * static_cast<uint32_t>(g.pitch));
      if (threadIdx.x == 0) *reinterpret_cast<TileHeader*>(w.stage) = t;
      int* shifts = reinterpret_cast<int*>(w.stage + sizeof(TileHeader));
      for (int i = threadIdx.x; i < g.win_h; i += 32) shifts[i] = shift;
      return;
    }
  }
  // Rows a multiple of 16 bytes apart: every row of a plane has the same shift.
  const bool uniform_rows = Rows != PlaneRows::Each && rows_share_shift(g.xs_row, esz);
  TileWindow tw;
  tw.t = origin();
  tw.yw = tw.t.y0 - g.ry;
  tw.xw = tw.t.x0 - int64_t(g.rx) * g.step;
  tw.c_lo = max(tw.xw, int64_t(0));
  tw.c_hi = min(tw.xw + g.win_w, g.nx);
  tw.i_lo = static_cast<int>(min(max(-tw.yw, int64_t(0)), int64_t(g.win_h)));
  tw.i_hi = static_cast<int>(min(max(g.ny - tw.yw, int64_t(tw.i_lo)), int64_t(g.win_h)));
  const T* plane = x + tw.t.b * g.xs_plane;
  if constexpr (W::kTensorCopies) {
    // One tensor-map box per tile: window rows pitch / esz elements wide from the 16-byte
    // boundary at or before column xw, so that each row lands at its usual shift; rows and
    // columns outside the plane arrive as zeros, which is the zero boundary (other boundaries:
    // interior tiles only). No per-thread address arithmetic, one instruction for the tile.
    const bool interior = tw.i_lo == 0 && tw.i_hi == g.win_h && tw.c_lo == tw.xw && tw.c_hi == tw.xw + g.win_w;
    if (g.tensor_tiles && (interior || (!OneWarpBox && boundary == Boundary::Zero))) {
      const int shift = row_shift(plane, tw.yw, g.xs_row, tw.xw);  // every row's (rows_of_16)
      w.copy_tensor_3d(g.hdr_bytes, tmap, map_x(tw.xw, shift), static_cast<int>(tw.yw),
                       static_cast<int>(tw.t.b), static_cast<uint32_t>(g.win_h) * static_cast<uint32_t>(g.pitch));
      const engine::Team st = w.store_team();
      if (st.rank < 0) return;
      if (st.rank == 0) *reinterpret_cast<TileHeader*>(w.stage) = tw.t;
      int* shifts = reinterpret_cast<int*>(w.stage + sizeof(TileHeader));
      for (int i = st.rank; i < g.win_h; i += st.size) shifts[i] = shift;
      return;
    }
  }
  const int64_t seg_off = (tw.c_lo - tw.xw) * esz, seg_bytes = (tw.c_hi - tw.c_lo) * esz;
  // Halo columns stored directly right of the segment must not be zero-filled over.
  const auto tail = tw.xw + g.win_w > g.nx ? engine::TailMode::Exact : engine::TailMode::MayOverwrite;
  auto seg_at = [&](int i, int64_t src_row) {  // the segment of window row i, from source row src_row
    return g.hdr_bytes + static_cast<int64_t>(i) * g.pitch + row_shift(plane, src_row, g.xs_row, tw.xw) + seg_off;
  };
  // The rows inside the plane move as one box when they share a shift, else each at its own;
  // boundary rows from their source rows, alone. (Uniform's branch is the others' first one as the
  // one-path loader wrote it: stencil3d's aligned kernels compile to the same machine code.)
  const int box_lo = tw.i_lo, inside = tw.i_hi - tw.i_lo;
  const int moved = Rows == PlaneRows::Uniform && !uniform_rows ? 0 : inside;  // the rows copied here
  if constexpr (Rows == PlaneRows::Uniform) {
    if (moved > 0)
      w.copy_rows(seg_at(box_lo, tw.yw + box_lo), g.pitch, plane + (tw.yw + box_lo) * g.xs_row + tw.c_lo,
                  g.xs_row * esz, seg_bytes, moved, tail);
  } else if (inside > 0 && uniform_rows) {
    w.copy_rows(seg_at(box_lo, tw.yw + box_lo), g.pitch, plane + (tw.yw + box_lo) * g.xs_row + tw.c_lo, g.xs_row * esz,
                seg_bytes, inside, tail);
  } else if (inside > 0) {
    // By value: a lambda holding references keeps what it refers to in memory (a stack frame).
    const int64_t yw = tw.yw, xw = tw.xw, c_lo = tw.c_lo, xs_row = g.xs_row, pitch = g.pitch, hdr = g.hdr_bytes;
    w.template copy_each_row<engine::RowDeal::ByChunk>(inside, seg_bytes, [=](int j) {
      const int64_t src = yw + box_lo + j;
      return engine::RowCopy{hdr + (box_lo + j) * pitch + row_shift(plane, src, xs_row, xw) + seg_off,
                             plane + src * xs_row + c_lo};
    }, tail);
  }
  for (int j = 0; j < g.win_h - moved; ++j) {
    const int i = j < box_lo ? j : j + moved;
    const int64_t src = map_index_dev(tw.yw + i, g.ny, boundary);
    if (src >= 0) w.copy(seg_at(i, src), plane + src * g.xs_row + tw.c_lo, seg_bytes, tail);
  }
  const engine::Team st = w.store_team();
  if (st.rank < 0) return;
  const bool whole = Rows == PlaneRows::Uniform ? moved == g.win_h : uniform_rows && inside == g.win_h;
  if (whole && tw.c_lo == tw.xw && tw.c_hi == tw.xw + g.win_w) {
    // An interior tile (most of them): no boundary rows, no halo columns, one shift for every
    // row. Only the header and the shifts, without fill_stage's call and its boundary cases.
    if (st.rank == 0) *reinterpret_cast<TileHeader*>(w.stage) = tw.t;
    const int shift = row_shift(plane, tw.yw, g.xs_row, tw.xw);
    int* shifts = reinterpret_cast<int*>(w.stage + sizeof(TileHeader));
    for (int i = st.rank; i < g.win_h; i += st.size) shifts[i] = shift;
    return;
  }
  const FillGeom fg{g.ny, g.nx, g.xs_row, g.win_h, g.win_w, g.pitch, g.hdr_bytes, g.step, g.rx * g.step, boundary};
  fill_stage<T>(static_cast<uint32_t>(__cvta_generic_to_shared(w.stage)), plane, tw, fg, st.rank, st.size);
}

// Tensor tiles mapped from before x (map_lead): a window's columns left of the plane that fall in
// those lead bytes arrive as x's neighbours in memory, not the zero boundary's zeros (columns
// further left are outside the map, zeros). The consuming team zeroes them in a left-edge tile's
// stage before it reads it. Tile-uniform; every thread of the team calls it.
template <typename T, bool AsyncWrites>
__device__ __forceinline__ void zero_lead_columns(char* stage, const StencilGeom& g, engine::Team team) {
  constexpr int esz = sizeof(T);
  const TileHeader t = *reinterpret_cast<const TileHeader*>(stage);
  const int64_t xw = t.x0 - int64_t(g.rx) * g.step;
  const int64_t c0 = max(xw, -int64_t(g.map_lead / esz));  // the first such column
  if (c0 >= 0) return;
  const int bytes = static_cast<int>(-c0) * esz, first = static_cast<int>(c0 - xw) * esz;
  const int* shifts = reinterpret_cast<const int*>(stage + sizeof(TileHeader));
  for (int k = team.rank; k < g.win_h * bytes; k += team.size) {
    const int i = k / bytes;
    stage[g.hdr_bytes + static_cast<int64_t>(i) * g.pitch + shifts[i] + first + (k - i * bytes)] = 0;
  }
  if constexpr (AsyncWrites) engine::sm90::fence_proxy_async_shared();  // the stage's next fill is a bulk copy
  engine::team_sync(team);
}

// The window of tile `tile` of the 2-D stencil's tile grid (tile_origin).
template <typename T, bool OneWarpBox = true, class W>
__device__ __forceinline__ void load_stencil_tile(const W& w, const T* x, const StencilGeom& g, Boundary boundary,
                                                  int64_t tile, const void* tmap) {
  load_stencil_window<T, OneWarpBox>(w, x, g, boundary, [&] { return tile_origin(tile, g); }, tmap);
}

}  // namespace kernels
}  // namespace cupipe
