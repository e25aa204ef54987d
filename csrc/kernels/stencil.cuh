// The pipelined 2-D stencil (stencil1d maps onto it with ry = 0 or rx = 0).
//
// Output tiles of tile_h x tile_w points stream through the engine's stage ring. A stage holds
//
//   header       TileHeader (the tile's plane and origin), then one int32 byte shift per window
//                row, padded to 16 bytes
//   win_h rows   the tile's padded input window, (tile_h + 2ry) rows of (tile_w + 2rx) elements,
//                `pitch` bytes apart; row i's elements start shifts[i] bytes into its pitch
//
// already resolved through the boundary: each window row is fetched from its mapped source row
// (rows of the zero boundary are filled with zeros), the in-range part of a row moves as one
// async segment, and the few halo columns outside the plane are stored directly (mapped, or
// zero). A row's shift makes it agree with its source modulo 16 bytes (the engine's copy
// precondition). When nx * sizeof(T) % 16 == 0 all rows of a plane share one shift and the
// window's rows inside the plane move as one copy_rows box, their chunks dealt to all copying
// threads; otherwise row by row. The header, zero rows and halo columns are plain stores of the
// ring's store team, published with the stage.
//
// The consumer runs a plain valid stencil out of shared memory and never touches the boundary:
// no index map, no division. A thread owns work items of TH rows x TW consecutive columns (the
// lanes of a warp take consecutive items, so their shared loads are consecutive vectors) and
// accumulates an item in registers (fp32; fp64 for fp64). Taps go in chunks of CK columns and
// passes of DY rows, compile-time sizes, so that any rx and ry run through the same code: a pass
// holds its DY x CK weights in registers, loads each window row it needs once (TW + CK - 1
// values, with the widest vectors the row's shift allows) and applies it to every output row of
// the item that uses it, up to DY of them. Taps past the stencil in a partial chunk or pass are
// skipped, never multiplied by zero (0 * inf would be NaN). Outputs leave as one vector store
// per row where aligned and in range.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <type_traits>
#include <utility>

#include "engine/engine.cuh"
#include "kernels/fast_div.cuh"
#include "kernels/launch_utils.cuh"
#include "kernels/numeric.cuh"
#include "kernels/tensor_map.cuh"

namespace cupipe {
namespace kernels {

constexpr int kStencilThreads = 256;
constexpr int kStencilMaxTileRows = 64;  // tall tiles for narrow planes stop here (row copies)

// The register blocking of the consumer: TH output rows per work item, DY tap rows per pass, CK
// tap columns per chunk. Rows of a 1-D signal, and planes too short for 8-row items, use Row (no
// vertical reuse to exploit). 2-D stencils use the Box whose chunk is the stencil's width (1, 3,
// 5: no tap slot wasted, and no partial chunk to compile), or Box9 for every wider one (9x9
// exact; others run several chunks, the last one partial); taller stencils run several passes.
// Row is a kernel of its own (light, inlined consumer: occupancy for streaming 1-D signals); the
// Boxes share one kernel that calls the one the tile needs.
enum class StencilBlocking : int { Row = 0, Box1 = 1, Box3 = 2, Box5 = 3, Box9 = 4 };

template <int TH_, int DY_, int CK_, bool AnyWidth_>
struct Blocking {
  static constexpr int TH = TH_, DY = DY_, CK = CK_;
  static constexpr bool kAnyWidth = AnyWidth_;  // else only kw == CK
};
using RowBlocking = Blocking<1, 1, 9, true>;
template <int CK>
using BoxBlocking = Blocking<8, 3, CK, CK == 9>;

// The consumer shapes that have a fully compile-time consumer (consume_tile_fixed): every size
// known, one pass, weights loaded once per tile, window rows read as whole aligned vectors. The
// launcher picks one when the tile rows all share one shift and that shift puts the first tap of
// every item at the offset the shape expects (an input whose plane rows are whole 16-byte
// multiples and whose data pointer is vector-aligned: the common case); otherwise the general
// consumer runs.
// Mma: the tensor-core consumer of the 2-byte types (stencil_mma.cuh), which the launcher picks
// over the others where it applies.
// Box9x9: fp32 9x9 boxes, the wide consumer (consume_tile_wide): one pass over 4 x 8 items, the
// weights read per tap row as three broadcast vectors (rows padded to kWideWeightPitch).
enum class StencilFixed : int { None = 0, Row3, Row5, Row7, Row9, Box3x3, Box5x5, Mma, Box9x9 };

struct BlockingShape {
  int th, dy, ck;
};
template <class B>
constexpr BlockingShape shape_of() { return BlockingShape{B::TH, B::DY, B::CK}; }
inline BlockingShape blocking_shape(StencilBlocking b) {
  switch (b) {
    case StencilBlocking::Row: return shape_of<RowBlocking>();
    case StencilBlocking::Box1: return shape_of<BoxBlocking<1>>();
    case StencilBlocking::Box3: return shape_of<BoxBlocking<3>>();
    case StencilBlocking::Box5: return shape_of<BoxBlocking<5>>();
    case StencilBlocking::Box9: break;
  }
  return shape_of<BoxBlocking<9>>();
}

// TW, the outputs a thread computes per row, and the widest shared-memory vector it reads them
// with (TW elements: the lanes of a warp read consecutive vectors): 16 bytes for fp32 and fp64;
// 8 for the 2-byte types, whose 16-byte items would hold 8 x 8 fp32 accumulators (no room left
// for two blocks per SM).
template <typename T>
constexpr int kTW = sizeof(T) == 8 ? 2 : 4;
template <typename T>
constexpr int kVecBytes = kTW<T> * static_cast<int>(sizeof(T));
// The 2-byte types' fixed consumers in the Row kernel (1-D signals) and the narrow 3x3 kernel take
// items of 8 outputs, one 16-byte vector: with 4-output items the fp16 1-D r=4 kernel issued 30
// instructions per output (ncu, H200: issue slots 77% busy, DRAM 51%), 9 of them FMAs and the
// rest the item's conversions, indexing and checks, which wider items share among more outputs;
// the fp16 3x3 box was issue-bound the same way (79% busy, DRAM 58%).
constexpr int kTwoByteTW = 8;

// What the loader tells the consumer about the tile in a stage, before the row shifts.
struct TileHeader {
  int64_t b, y0, x0;  // plane, first output row, first output column
};

}  // namespace kernels
}  // namespace cupipe

#include "kernels/stencil_mma.cuh"  // the tensor-core consumer (reads TileHeader)

namespace cupipe {
namespace kernels {

struct StencilGeom {
  int64_t batch, ny, nx;
  int ry, rx;
  StencilBlocking blocking;
  StencilFixed fixed;      // None unless the launcher finds a fixed consumer for the input
  bool tensor_tiles;       // tma: tiles move as one tensor-map box (see load_stencil_tile)
  int tile_h, tile_w;      // outputs per tile: (tile_h / TH) x (tile_w / TW) work items
  int x_phase;             // tiles start at columns tx * tile_w - x_phase (Mma; else 0)
  int mma_a;               // Mma: window column -mma_a of every row sits on a 16-byte boundary
  int cols_log2;           // log2(tile_w / TW): items per row block, a power of two
  int items;
  int64_t tiles_x, tiles_per_plane, ntiles;
  FastDiv tiles_x_div, per_plane_div;  // ntiles < 2^31: the tile origin without 32-bit divisions
  TileShare share;         // the grid's share of tiles per block (set_block_tiles; each < 0: unset)
  int win_h, win_w;        // padded input window, in elements
  int pitch;               // bytes per smem row
  int hdr_bytes;           // TileHeader + win_h shifts, padded to 16
  int64_t stage_bytes;
  int kh_pad, kw_pad;      // the weights in smem, zero-padded to whole passes and chunks
  int64_t weight_bytes;
  int64_t frag_bytes;      // Mma: the tensor-core consumer's weight fragments, after the weights
  DType wdt;               // of the weights in global memory (StencilParams::weights_dtype)
};

// The tile counts and their divisors, from the tile shape and the column phase.
inline void set_tile_grid(StencilGeom& g) {
  g.tiles_x = (g.nx + g.x_phase + g.tile_w - 1) / g.tile_w;
  g.tiles_per_plane = (g.ny + g.tile_h - 1) / g.tile_h * g.tiles_x;
  g.ntiles = g.batch * g.tiles_per_plane;
  g.share.each = -1;  // until the launcher knows its grid
  if (g.ntiles < (int64_t(1) << 31)) {
    g.tiles_x_div = FastDiv(static_cast<uint32_t>(g.tiles_x));
    g.per_plane_div = FastDiv(static_cast<uint32_t>(g.tiles_per_plane));
  }
}

// Tile shape for `consumers` consuming threads, shrunk until `stages` stages and the weights fit
// `smem_budget` bytes. Box tiles start at one item per thread: 32 items (a warp) across, one
// 8-row block per warp down (64 x 128 outputs for fp32); Row tiles are 32 KiB of one row (2048
// items of fp32 or fp64, 4096 of a 2-byte type), so that a 1-D signal moves in 32 KiB stages: a
// tile's fixed cost (its origin, window and copy setup, the ring's wait) is spread over more
// outputs than at 1024 items (H200, 2^28 r = 4 with primitives/2: fp16 0.70 -> 0.52-0.56 ms, fp32
// unchanged within the runs' spread; BENCHMARKS.md, fourth run). Narrow planes
// trade columns for rows (up to kStencilMaxTileRows), short planes drop rows; when even the
// smallest Box tile does not fit (huge radii), Row's shorter window is tried.
// `align`: of the window rows' start in a stage and of the stage size (16; 128 for tensor-map
// boxes, whose shared-memory destination must be 128-byte aligned). `box_cols`: items across a Box
// tile before narrow planes shrink it (kBoxCols; the 2-byte narrow 3x3's tiles twice that, with
// twice the consumers so that the rows stay: narrow_wide_tiles).
constexpr int kBoxCols = 32;  // items across a Box tile (make_stencil_geom's default)

inline StencilGeom make_stencil_geom(const StencilParams& p, int esz, int acc_size, int consumers,
                                     int64_t smem_budget, int align = 16, int box_cols = kBoxCols) {
  StencilGeom g;
  g.batch = p.batch; g.ny = p.ny; g.nx = p.nx; g.ry = p.ry; g.rx = p.rx;
  g.wdt = p.weights_dtype;
  g.fixed = StencilFixed::None;
  g.tensor_tiles = false;
  g.x_phase = 0;
  g.mma_a = 0;
  g.frag_bytes = 0;
  const int tw = esz == 8 ? 2 : 4;  // kTW
  const int64_t kh = 2 * int64_t(p.ry) + 1, kw = 2 * int64_t(p.rx) + 1;
  g.blocking = p.ry == 0 || p.ny < 8 ? StencilBlocking::Row
               : kw == 1             ? StencilBlocking::Box1
               : kw == 3             ? StencilBlocking::Box3
               : kw == 5             ? StencilBlocking::Box5
                                     : StencilBlocking::Box9;
  // Sizes in 64 bits: radii too large for shared memory must fail the fit (and the launch then
  // says so), not wrap around.
  for (;;) {
    const BlockingShape b = blocking_shape(g.blocking);
    const int64_t kh_pad = (kh + b.dy - 1) / b.dy * b.dy, kw_pad = (kw + b.ck - 1) / b.ck * b.ck;
    g.kh_pad = static_cast<int>(kh_pad);
    g.kw_pad = static_cast<int>(kw_pad);
    g.weight_bytes = engine::align_up(kh_pad * kw_pad * acc_size, 16);
    int cols = b.th == 1 ? static_cast<int>(32768 / (tw * esz)) : box_cols;  // Row: 32 KiB of outputs
    while (cols > 1 && (cols / 2) * int64_t(tw) >= p.nx) cols /= 2;
    int rb = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({(b.th == 1 ? 8 * consumers : consumers) / cols,
                                                                      kStencilMaxTileRows / b.th,
                                                                      (p.ny + b.th - 1) / b.th})));
    auto layout = [&] {
      const int64_t tile_h = int64_t(rb) * b.th, tile_w = int64_t(cols) * tw;
      const int64_t win_h = tile_h + kh - 1, win_w = tile_w + kw - 1;
      // The consumer reads whole vectors up to kw_pad - 1 columns past a tile column, from up to
      // 15 bytes of shift; primitives may zero-fill up to 15 bytes past a row's segment.
      const int64_t pitch = engine::align_up((tile_w + kw_pad) * esz, 16) + 16;
      const int64_t hdr = engine::align_up(static_cast<int64_t>(sizeof(TileHeader)) + 4 * win_h, align);
      g.tile_h = static_cast<int>(tile_h);
      g.tile_w = static_cast<int>(tile_w);
      g.win_h = static_cast<int>(win_h);
      g.win_w = static_cast<int>(win_w);
      g.pitch = static_cast<int>(pitch);
      g.hdr_bytes = static_cast<int>(hdr);
      // 16 bytes of slack: the fixed consumer's last vector of the last row may reach past it,
      // and must not touch the next stage (which the ring may be filling).
      g.stage_bytes = engine::align_up(hdr + win_h * pitch + 16, align);
      return p.stages * g.stage_bytes + g.weight_bytes <= smem_budget;
    };
    bool fits = layout();
    while (!fits && (rb > 1 || cols > 1)) {
      if (rb > 1) rb /= 2;
      else cols /= 2;
      fits = layout();
    }
    g.cols_log2 = 0;
    while ((cols >> g.cols_log2) > 1) ++g.cols_log2;
    g.items = rb << g.cols_log2;
    if (fits || g.blocking == StencilBlocking::Row) break;  // too large even so: the launch says why
    g.blocking = StencilBlocking::Row;
  }
  set_tile_grid(g);
  return g;
}

// Block b of a grid of `grid` takes tiles b, b + grid, ...: its TileShare (worked out on the host).
inline void set_block_tiles(StencilGeom& g, int64_t grid) { g.share = TileShare(g.ntiles, grid); }

// A persistent grid that shares no factor with the tile columns. Block b takes tiles b, b + grid,
// ...; with a grid that is a multiple of tiles_x every block stays in one tile column, and the
// blocks of the edge columns take every edge tile, which cost more (the tensor-core tiles' edge
// columns, partly outside the plane, the last almost wholly, ran ~1.4x an interior tile:
// scripts/probe_stencil_blocks.cu, H200, twenty-fourth run, fp16 5x5 on 16 x 256 tiles, 33
// columns, 528 blocks 0.115 ms, 527 blocks 0.082; a 4096-wide fp16 plane's 32 x 128 tiles are 33
// columns too). A block or a few fewer deal every block tiles of every column; a grid that finds
// no such size within 8 blocks stays as it was.
inline int64_t column_coprime_grid(int64_t grid, int64_t tiles_x) {
  for (int64_t g = grid; g > 1 && g > grid - 8; --g)
    if (std::gcd(g, tiles_x) == 1) return g;
  return grid;
}

#if defined(__CUDACC__)
// This block's tile count: set_block_tiles' share, or the division where a launcher did not set it.
__device__ __forceinline__ int64_t block_tiles(const StencilGeom& g) {
  if (g.share.each >= 0) return g.share.of(blockIdx.x);
  return blockIdx.x < g.ntiles ? (g.ntiles - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
}
#endif

// ---------------------------------------------------------------------------------- loader side

// The source index of a window index outside [0, n) (-1: a zero of the zero boundary). Not
// inlined: only boundary rows and columns get here, and its 64-bit modulo is long code.
static __device__ __noinline__ int64_t map_outside(int64_t i, int64_t n, Boundary b) {
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

// The byte shift (mod 16) of window column 0 of source row `src_row`: the address of
// plane[src_row][xw], which may lie outside the plane (the arithmetic wraps, modulo 16 is exact).
template <typename T>
__device__ __forceinline__ int row_shift(const T* plane, int64_t src_row, int64_t nx, int64_t xw) {
  return static_cast<int>((reinterpret_cast<uintptr_t>(plane) +
                           static_cast<uintptr_t>((src_row * nx + xw) * static_cast<int64_t>(sizeof(T)))) & 15u);
}

static __device__ __noinline__ TileHeader tile_origin_64(int64_t t, int64_t per_plane, int64_t tiles_x, int tile_h,
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

// What the stage fill needs of the geometry, by value (for the out-of-line fill_stage).
struct FillGeom {
  int64_t ny, nx;
  int win_h, win_w, pitch, hdr_bytes;
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
                                row_shift(plane, src_row, g.nx, w.xw));
  };
  if (rank == 0) *reinterpret_cast<TileHeader*>(stage) = w.t;
  int* shifts = reinterpret_cast<int*>(stage + sizeof(TileHeader));
  for (int i = rank; i < g.win_h; i += size) {
    const int64_t src = map_index_dev(w.yw + i, g.ny, g.boundary);
    shifts[i] = row_shift(plane, src < 0 ? w.yw + i : src, g.nx, w.xw);  // a zero row: any shift will do
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
  const int n_halo = n_left + n_right;
  for (int idx = rank; idx < g.win_h * n_halo; idx += size) {
    const int i = idx / n_halo, h = idx - i * n_halo;
    const int64_t src = map_index_dev(w.yw + i, g.ny, g.boundary);
    if (src < 0) continue;  // a zero row, zero-filled above
    const int c = h < n_left ? h : g.win_w - n_right + (h - n_left);
    const int64_t mc = map_index_dev(w.xw + c, g.nx, g.boundary);
    row(i, src)[c] = mc < 0 ? from_acc<T>(A(0)) : plane[src * g.nx + mc];
  }
}

// Fills the stage behind the ring's write handle `w` with tile `tile`'s window: the rows inside
// the plane as async copies (one box when they share a shift), boundary rows from their mapped
// source rows, and the store team's plain stores (header, zero rows, halo columns).
// OneWarpBox: the zero boundary's tensor-map tiles are loaded by warp 0 alone (see below).
template <typename T, bool OneWarpBox = true, class W>
__device__ __forceinline__ void load_stencil_tile(const W& w, const T* x, const StencilGeom& g, Boundary boundary,
                                                  int64_t tile, const void* tmap) {
  constexpr int64_t esz = sizeof(T);
  // A box's x coordinate: the 16-byte boundary at or before window column xw (row shift `shift`
  // bytes), in the map's units (tensor_map_unit).
  auto map_x = [](int64_t xw, int shift) { return static_cast<int>((xw * esz - shift) / tensor_map_unit(esz)); };
  if constexpr (W::kTensorCopies && OneWarpBox) {
    // The zero boundary's tensor-map tiles (every tile one box, see below): one warp does the
    // whole load (thread 0 the copy, the warp the header and shifts), the others nothing but the
    // ring's arrival, where each warp derived the tile's origin and window itself (~150
    // instructions per warp and tile). Probe A/B (H200, 8192^2, thirteenth run): fp16 5x5 narrow
    // tensor-core 0.0850-0.0855 -> 0.0828-0.0830 ms, bf16 general 5x5 0.113 -> 0.107 (sweep); the
    // narrow CUDA-core kernels gained nothing (fp32 3x3, 5x5 even) or lost (fp16 3x3 0.0764 ->
    // 0.0772-0.0778; sweep 0.077 -> 0.079) and keep every warp loading.
    if (g.tensor_tiles && boundary == Boundary::Zero) {
      if (threadIdx.x >= 32) return;
      const TileHeader t = tile_origin(tile, g);
      const int64_t yw = t.y0 - g.ry, xw = t.x0 - g.rx;
      const int shift = row_shift(x + t.b * g.ny * g.nx, yw, g.nx, xw);
      w.copy_tensor_3d(g.hdr_bytes, tmap, map_x(xw, shift), static_cast<int>(yw),
                       static_cast<int>(t.b), static_cast<uint32_t>(g.win_h) * static_cast<uint32_t>(g.pitch));
      if (threadIdx.x == 0) *reinterpret_cast<TileHeader*>(w.stage) = t;
      int* shifts = reinterpret_cast<int*>(w.stage + sizeof(TileHeader));
      for (int i = threadIdx.x; i < g.win_h; i += 32) shifts[i] = shift;
      return;
    }
  }
  // Rows of a multiple of 16 bytes: every row of a plane has the same shift.
  const bool uniform_rows = g.nx * esz % 16 == 0;
  TileWindow tw;
  tw.t = tile_origin(tile, g);
  tw.yw = tw.t.y0 - g.ry;
  tw.xw = tw.t.x0 - g.rx;
  tw.c_lo = max(tw.xw, int64_t(0));
  tw.c_hi = min(tw.xw + g.win_w, g.nx);
  tw.i_lo = static_cast<int>(min(max(-tw.yw, int64_t(0)), int64_t(g.win_h)));
  tw.i_hi = static_cast<int>(min(max(g.ny - tw.yw, int64_t(tw.i_lo)), int64_t(g.win_h)));
  const T* plane = x + tw.t.b * g.ny * g.nx;
  if constexpr (W::kTensorCopies) {
    // One tensor-map box per tile: window rows pitch / esz elements wide from the 16-byte
    // boundary at or before column xw, so that each row lands at its usual shift; rows and
    // columns outside the plane arrive as zeros, which is the zero boundary (other boundaries:
    // interior tiles only). No per-thread address arithmetic, one instruction for the tile.
    const bool interior = tw.i_lo == 0 && tw.i_hi == g.win_h && tw.c_lo == tw.xw && tw.c_hi == tw.xw + g.win_w;
    if (g.tensor_tiles && (interior || (!OneWarpBox && boundary == Boundary::Zero))) {
      const int shift = row_shift(plane, tw.yw, g.nx, tw.xw);  // every row's (nx * esz % 16 == 0)
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
    return g.hdr_bytes + static_cast<int64_t>(i) * g.pitch + row_shift(plane, src_row, g.nx, tw.xw) + seg_off;
  };
  // The rows inside the plane move as one box when they share a shift; every other row with
  // a source row (boundary rows, and all rows of planes whose rows disagree mod 16) alone.
  const int box_lo = tw.i_lo, box_n = uniform_rows ? tw.i_hi - tw.i_lo : 0;
  if (box_n > 0)
    w.copy_rows(seg_at(box_lo, tw.yw + box_lo), g.pitch, plane + (tw.yw + box_lo) * g.nx + tw.c_lo, g.nx * esz,
                seg_bytes, box_n, tail);
  for (int j = 0; j < g.win_h - box_n; ++j) {
    const int i = j < box_lo ? j : j + box_n;
    const int64_t src = map_index_dev(tw.yw + i, g.ny, boundary);
    if (src >= 0) w.copy(seg_at(i, src), plane + src * g.nx + tw.c_lo, seg_bytes, tail);
  }
  const engine::Team st = w.store_team();
  if (st.rank < 0) return;
  if (box_n == g.win_h && tw.c_lo == tw.xw && tw.c_hi == tw.xw + g.win_w) {
    // An interior tile (most of them): no boundary rows, no halo columns, one shift for every
    // row. Only the header and the shifts, without fill_stage's call and its boundary cases.
    if (st.rank == 0) *reinterpret_cast<TileHeader*>(w.stage) = tw.t;
    const int shift = row_shift(plane, tw.yw, g.nx, tw.xw);
    int* shifts = reinterpret_cast<int*>(w.stage + sizeof(TileHeader));
    for (int i = st.rank; i < g.win_h; i += st.size) shifts[i] = shift;
    return;
  }
  const FillGeom fg{g.ny, g.nx, g.win_h, g.win_w, g.pitch, g.hdr_bytes, boundary};
  fill_stage<T>(static_cast<uint32_t>(__cvta_generic_to_shared(w.stage)), plane, tw, fg, st.rank, st.size);
}

// -------------------------------------------------------------------------------- consumer side

// Element E of the shared-memory words w[], in the accumulation type.
template <typename T, int E, int NW>
__device__ __forceinline__ acc_t<T> word_elem(const uint32_t (&w)[NW]) {
  constexpr int kByte = E * static_cast<int>(sizeof(T)), kW = kByte / 4;
  if constexpr (sizeof(T) == 8) {
    return __hiloint2double(static_cast<int>(w[kW + 1]), static_cast<int>(w[kW]));
  } else if constexpr (sizeof(T) == 4) {
    return __uint_as_float(w[kW]);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __uint_as_float(kByte % 4 == 0 ? w[kW] << 16 : w[kW] & 0xffff0000u);  // fp32's top half
  } else {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(kByte % 4 == 0 ? w[kW] : w[kW] >> 16)));
  }
}

template <typename T, int N, int NW, int... K>
__device__ __forceinline__ void unpack(const uint32_t (&w)[NW], acc_t<T> (&x)[N], std::integer_sequence<int, K...>) {
  ((x[K] = word_elem<T, K>(w)), ...);
}

// x[k] = element Off + k of the words w[].
template <typename T, int Off, int N, int NW, int... K>
__device__ __forceinline__ void unpack_from(const uint32_t (&w)[NW], acc_t<T> (&x)[N], std::integer_sequence<int, K...>) {
  ((x[K] = word_elem<T, Off + K>(w)), ...);
}

// x[k] = element k from p on, read with V-byte vectors (p is V-aligned; reads round up to whole
// vectors, which the row pitch leaves room for).
template <typename T, int V, int N>
__device__ __forceinline__ void load_vectors(const char* p, acc_t<T> (&x)[N]) {
  if constexpr (V == 2) {
#pragma unroll
    for (int k = 0; k < N; ++k) x[k] = to_acc<acc_t<T>>(reinterpret_cast<const T*>(p)[k]);
  } else {
    constexpr int kNv = (N * static_cast<int>(sizeof(T)) + V - 1) / V, kPer = V / 4;
    uint32_t w[kNv * kPer];
#pragma unroll
    for (int i = 0; i < kNv; ++i) {
      const engine::vec_t<V> u = reinterpret_cast<const engine::vec_t<V>*>(p)[i];
      if constexpr (V == 16) {
        w[4 * i] = u.x; w[4 * i + 1] = u.y; w[4 * i + 2] = u.z; w[4 * i + 3] = u.w;
      } else if constexpr (V == 8) {
        w[2 * i] = u.x; w[2 * i + 1] = u.y;
      } else {
        w[i] = u;
      }
    }
    unpack<T>(w, x, std::make_integer_sequence<int, N>{});
  }
}

// Loads N consecutive elements of a smem row from p on with the widest vectors p's alignment
// allows: a warp-uniform branch (the row's shift decides), each path writing x directly. A row
// whose data is not vector-aligned (odd radii, unaligned planes) pays with narrower loads
// rather than with register moves: registers can not be indexed at run time.
template <typename T, int V, int N>
__device__ __forceinline__ void load_window(const char* p, acc_t<T> (&x)[N]) {
  if constexpr (V > static_cast<int>(sizeof(T))) {
    if ((reinterpret_cast<uintptr_t>(p) & (V - 1)) != 0) return load_window<T, V / 2>(p, x);
  }
  load_vectors<T, V>(p, x);
}

// One pass of one tap chunk over a work item: tap rows dy0 .. dy0+DY-1 (the first nk < DY
// exist only), tap columns c0 .. c0+CK-1 (the first nc exist when !Full). `rows` points at the
// item's first input of window row o0 + dy0 for this chunk (column j0 + c0); `shifts` at that
// row's shift; `w` at the weight of tap (dy0, c0) in the kw_pad-wide weight rows.
template <typename T, class Blk, bool Full>
__device__ __forceinline__ void stencil_pass(const char* rows, int pitch, const int* shifts, const acc_t<T>* w,
                                             int kw_pad, int nk, int nc, acc_t<T> (&acc)[Blk::TH][kTW<T>]) {
  using A = acc_t<T>;
  constexpr int TH = Blk::TH, DY = Blk::DY, CK = Blk::CK, TW = kTW<T>;
  A wr[DY][CK];
#pragma unroll
  for (int k = 0; k < DY; ++k)
#pragma unroll
    for (int c = 0; c < CK; ++c) wr[k][c] = w[k * kw_pad + c];  // padded: always in bounds
#pragma unroll
  for (int r = 0; r < TH + DY - 1; ++r) {
    // Window row r feeds output rows r - k with tap rows k; rows past TH - 1 only for tap rows
    // that exist (the window ends there).
    if (r >= TH && r - TH + 1 >= nk) break;
    A x[TW + CK - 1];
    load_window<T, kVecBytes<T>>(rows + r * pitch + shifts[r], x);
#pragma unroll
    for (int k = 0; k < DY; ++k) {
      const int o = r - k;
      if (o < 0 || o >= TH) continue;
      if (k >= nk) break;
#pragma unroll
      for (int c = 0; c < CK; ++c) {
        if (!Full && c >= nc) break;
#pragma unroll
        for (int t = 0; t < TW; ++t) acc[o][t] = fma(wr[k][c], x[t + c], acc[o][t]);
      }
    }
  }
}

// Stores TW outputs as one vector (dst aligned to TW elements).
template <typename T, int TW>
__device__ __forceinline__ void store_vector(T* dst, const acc_t<T> (&v)[TW]) {
  if constexpr (sizeof(T) == 8) {
    *reinterpret_cast<double2*>(dst) = make_double2(v[0], v[1]);
  } else if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    uint32_t u[TW / 2];
#pragma unroll
    for (int i = 0; i < TW / 2; ++i) {
      if constexpr (std::is_same_v<T, __half>) {
        const __half2 h = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
        u[i] = *reinterpret_cast<const uint32_t*>(&h);
      } else {
        const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
        u[i] = *reinterpret_cast<const uint32_t*>(&h);
      }
    }
    if constexpr (TW == 8) *reinterpret_cast<uint4*>(dst) = make_uint4(u[0], u[1], u[2], u[3]);
    else *reinterpret_cast<uint2*>(dst) = make_uint2(u[0], u[1]);
  }
}

// Stores TW outputs: one vector store when dst is aligned and all of them are in the plane.
template <typename T, int TW>
__device__ __forceinline__ void store_outputs(T* dst, int64_t n_in_range, const acc_t<T> (&v)[TW]) {
  constexpr int kVB = TW * static_cast<int>(sizeof(T));
  if (n_in_range >= TW && (reinterpret_cast<uintptr_t>(dst) & (kVB - 1)) == 0) {
    store_vector<T>(dst, v);
  } else {
#pragma unroll
    for (int t = 0; t < TW; ++t)
      if (t < n_in_range) dst[t] = from_acc<T>(v[t]);
  }
}

// What the consumer needs of the geometry, by value (the out-of-line Box consumers take it as an
// argument; a kernel parameter's address can not be passed on).
struct ConsumerGeom {
  int64_t ny, nx;
  int kh, kw, kw_pad;
  int pitch, hdr_bytes;
  int items, cols_log2;
};

// The tile in `stage`: this thread's work items (rank, rank + size, ...), each TH x TW outputs
// accumulated in registers over all chunks and passes, then stored.
template <typename T, class Blk>
__device__ __forceinline__ void consume_tile(const char* stage, const acc_t<T>* w_s, const ConsumerGeom& g, T* out,
                                             int rank, int size) {
  using A = acc_t<T>;
  constexpr int TH = Blk::TH, DY = Blk::DY, CK = Blk::CK, TW = kTW<T>, esz = sizeof(T);
  const TileHeader t = *reinterpret_cast<const TileHeader*>(stage);
  const int* shifts = reinterpret_cast<const int*>(stage + sizeof(TileHeader));
  const char* rows = stage + g.hdr_bytes;
  T* oplane = out + t.b * g.ny * g.nx;
  for (int p = rank; p < g.items; p += size) {
    const int j0 = (p & ((1 << g.cols_log2) - 1)) * TW, o0 = (p >> g.cols_log2) * TH;
    const int64_t oy = t.y0 + o0, ox = t.x0 + j0;
    if (oy >= g.ny || ox >= g.nx) continue;  // past the plane: nothing to compute
    A acc[TH][TW] = {};
    for (int c0 = 0; c0 < g.kw; c0 += CK) {
      for (int dy0 = 0; dy0 < g.kh; dy0 += DY) {
        const char* r = rows + (o0 + dy0) * g.pitch + (j0 + c0) * esz;
        const A* wp = w_s + dy0 * g.kw_pad + c0;
        if (!Blk::kAnyWidth || g.kw - c0 >= CK)
          stencil_pass<T, Blk, true>(r, g.pitch, shifts + o0 + dy0, wp, g.kw_pad, g.kh - dy0, CK, acc);
        else if constexpr (Blk::kAnyWidth)
          stencil_pass<T, Blk, false>(r, g.pitch, shifts + o0 + dy0, wp, g.kw_pad, g.kh - dy0, g.kw - c0, acc);
      }
    }
#pragma unroll
    for (int o = 0; o < TH; ++o) {
      if (oy + o >= g.ny) break;
      store_outputs<T>(oplane + (oy + o) * g.nx + ox, g.nx - ox, acc[o]);
    }
  }
}

// A Box consumer out of line: it does not depend on the mechanism or the stage count, so cicc
// compiles it once per translation unit and element type, and the Box kernel carries all four
// widths at the cost of one call per tile. Shared memory comes as 32-bit shared addresses (the
// loads stay LDS).
template <typename T, int CK>
__device__ __noinline__ void consume_box_tile(uint32_t stage, uint32_t w_s, ConsumerGeom g, T* out, int rank,
                                              int size) {
  consume_tile<T, BoxBlocking<CK>>(static_cast<const char*>(__cvta_shared_to_generic(stage)),
                                   static_cast<const acc_t<T>*>(__cvta_shared_to_generic(w_s)), g, out, rank, size);
}

// The fixed consumer: a KH x KW stencil in one pass over items of TH x TW outputs, every size a
// compile-time constant. Preconditions (the launcher's StencilFixed choice): all rows of the tile
// share the shift in the header's first slot, and window column 0 then lies M elements past a
// V-byte boundary, where M = (-rx) mod (V / sizeof(T)) -- so every item's first tap column sits M
// elements into an aligned vector (items start at multiples of TW elements, TW elements = V
// bytes). Each window row is then NV aligned V-byte loads (no narrow loads, no bank conflicts:
// the lanes of a warp read consecutive vectors) and the elements are picked at compile-time
// offsets. The weights are loaded into registers once per tile, not once per item. The vectors
// read up to V - 1 bytes past the row's last tap, which the pitch and the stage's slack cover.
// TW: outputs per item, kTW<T> (the tile's own items) or, for the 2-byte types (kTwoByteTW), items
// twice as wide: the caller then passes half the items (cols_log2 one less).
template <typename T, int TH, int KH, int KW, int TW = kTW<T>>
__device__ __noinline__ void consume_tile_fixed(uint32_t stage_s, uint32_t w_s, ConsumerGeom g, T* out, int rank,
                                                int size) {
  using A = acc_t<T>;
  constexpr int esz = sizeof(T), V = TW * esz, kPerVec = TW;
  static_assert(V == 8 || V == 16, "items of one 8- or 16-byte vector");
  constexpr int M = (kPerVec - (KW / 2) % kPerVec) % kPerVec;
  constexpr int NX = TW + KW - 1;                    // window elements an item row needs
  constexpr int NV = (M + NX + kPerVec - 1) / kPerVec;  // aligned vectors that hold them
  const char* stage = static_cast<const char*>(__cvta_shared_to_generic(stage_s));
  const A* w = static_cast<const A*>(__cvta_shared_to_generic(w_s));
  A wr[KH][KW];
#pragma unroll
  for (int k = 0; k < KH; ++k)
#pragma unroll
    for (int c = 0; c < KW; ++c) wr[k][c] = w[k * g.kw_pad + c];
  const TileHeader t = *reinterpret_cast<const TileHeader*>(stage);
  const int shift = *reinterpret_cast<const int*>(stage + sizeof(TileHeader));
  const char* rows = stage + g.hdr_bytes + shift - M * esz;  // V-aligned
  T* oplane = out + t.b * g.ny * g.nx;
  // Rows of whole 16-byte multiples (the fixed consumers' precondition): every item's first output
  // is vector-aligned when the output is.
  const bool out_vec_aligned = (reinterpret_cast<uintptr_t>(out) & (V - 1)) == 0;
  for (int p = rank; p < g.items; p += size) {
    const int j0 = (p & ((1 << g.cols_log2) - 1)) * TW, o0 = (p >> g.cols_log2) * TH;
    const int64_t oy = t.y0 + o0, ox = t.x0 + j0;
    if (oy >= g.ny || ox >= g.nx) continue;  // past the plane: nothing to compute
    const char* item = rows + o0 * g.pitch + j0 * esz;
    A acc[TH][TW] = {};
#pragma unroll
    for (int r = 0; r < TH + KH - 1; ++r) {
      uint32_t words[NV * V / 4];
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        const engine::vec_t<V> u = reinterpret_cast<const engine::vec_t<V>*>(item + r * g.pitch)[i];
        if constexpr (V == 16) {
          words[4 * i] = u.x; words[4 * i + 1] = u.y; words[4 * i + 2] = u.z; words[4 * i + 3] = u.w;
        } else {
          words[2 * i] = u.x; words[2 * i + 1] = u.y;
        }
      }
      A x[NX];
      unpack_from<T, M>(words, x, std::make_integer_sequence<int, NX>{});
#pragma unroll
      for (int k = 0; k < KH; ++k) {
        const int o = r - k;  // window row r feeds output row r - k through tap row k
        if (o < 0 || o >= TH) continue;
#pragma unroll
        for (int c = 0; c < KW; ++c)
#pragma unroll
          for (int tt = 0; tt < TW; ++tt) acc[o][tt] = fma(wr[k][c], x[tt + c], acc[o][tt]);
      }
    }
    T* dst = oplane + oy * g.nx + ox;
    if (out_vec_aligned && oy + TH <= g.ny && ox + TW <= g.nx) {  // inside the plane (most items)
#pragma unroll
      for (int o = 0; o < TH; ++o) store_vector<T>(dst + o * g.nx, acc[o]);
    } else {
#pragma unroll
      for (int o = 0; o < TH; ++o) {
        if (oy + o >= g.ny) break;
        store_outputs<T>(dst + o * g.nx, g.nx - ox, acc[o]);
      }
    }
  }
}

// The wide consumer (StencilFixed::Box9x9): an fp32 KH x KW box too wide for consume_tile_fixed
// (81 weights do not fit in registers beside the accumulators), in one pass. The general consumer
// ran the 9x9 box in three passes of three tap rows, reloading window rows and weights per pass
// (ncu, H200, 8192^2 tma/2: 28% of the instructions were not FMAs, the FMA pipe 50% busy). Here an
// item is TH rows x TW columns; each of its KH + TH - 1 window rows is read once, as aligned 16-byte
// vectors (the preconditions of consume_tile_fixed, M elements into a vector), and applied to
// every output row that uses it, with that tap row's weights read as broadcast 16-byte vectors
// from rows padded to kWideWeightPitch: the kernel's non-FMA share fell from 28% to 15% (the rest
// is mostly the loader and the ring), 9x9 0.335 -> 0.247 ms (BENCHMARKS.md, eighth run).
// Two item shapes. The general Box kernel's (kWideTH x kWideTW, 4 x 8) on the Box tile (64 x 128
// outputs): the same number of items, two per former item across and half as many down, so the
// launcher passes cols_log2 one less. The narrow 9x9 kernel's (kNarrowWideTH x kNarrowWideTW,
// 3 x 12) on tiles of their own (narrow_wide_geom): at 8-column items a quarter warp's lanes sit
// 32 bytes apart and two share each bank group (8 wavefronts per window load where 4 would do);
// 12 columns put them 48 bytes apart, conflict-free, and share each weight load among 12 outputs
// (scripts/probe_box9_items.cu, thirty-fourth run, 8192^2 tma/2: shared-load wavefronts 36.2 M
// -> 21.5 M, 2.6% fewer cycles; held at the 700 W power cap, where the FFMAs' energy sets the
// time, H100 0.2603-0.2638 -> 0.2551-0.2605 ms, H200 0.2551-0.2573 -> 0.2515-0.2525). Lost: 2 x 12
// (window rows reread), 3 x 8 (the conflicts back), 4 x 12 (145 registers, three blocks per SM),
// each tap row's weights read once per item (twice the code; instruction-fetch stalls).
constexpr int kWideTH = 4, kWideTW = 8, kWideWeightPitch = 12;
constexpr int kNarrowWideTH = 3, kNarrowWideTW = 12;

template <int KH, int KW, int TH, int TW>
__device__ __noinline__ void consume_tile_wide(uint32_t stage_s, uint32_t w_s, ConsumerGeom g, float* out, int rank,
                                               int size) {
  constexpr int kPerVec = 4;
  static_assert(TW % kPerVec == 0, "items of whole output vectors");
  constexpr int M = (kPerVec - (KW / 2) % kPerVec) % kPerVec;
  constexpr int NX = TW + KW - 1;
  constexpr int NV = (M + NX + kPerVec - 1) / kPerVec;
  constexpr int KWV = (KW + kPerVec - 1) / kPerVec;  // weight vectors per tap row
  static_assert(KWV * kPerVec <= kWideWeightPitch, "weight rows wider than their pitch");
  const char* stage = static_cast<const char*>(__cvta_shared_to_generic(stage_s));
  const float4* w = static_cast<const float4*>(__cvta_shared_to_generic(w_s));
  const TileHeader t = *reinterpret_cast<const TileHeader*>(stage);
  const int shift = *reinterpret_cast<const int*>(stage + sizeof(TileHeader));
  const char* rows = stage + g.hdr_bytes + shift - M * 4;  // 16-byte aligned
  float* oplane = out + t.b * g.ny * g.nx;
  const bool out_vec_aligned = (reinterpret_cast<uintptr_t>(out) & 15) == 0;
  for (int p = rank; p < g.items; p += size) {
    const int j0 = (p & ((1 << g.cols_log2) - 1)) * TW, o0 = (p >> g.cols_log2) * TH;
    const int64_t oy = t.y0 + o0, ox = t.x0 + j0;
    if (oy >= g.ny || ox >= g.nx) continue;  // past the plane: nothing to compute
    const char* item = rows + o0 * g.pitch + j0 * 4;
    float acc[TH][TW] = {};
    // Window row r into the output rows o that use it (tap row k = r - o in [0, KH)); `checked`
    // skips the others, which only the first and last TH - 1 rows have.
    auto apply_row = [&](int r, auto checked) {
      uint32_t words[NV * 4];
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        const uint4 u = reinterpret_cast<const uint4*>(item + r * g.pitch)[i];
        words[4 * i] = u.x; words[4 * i + 1] = u.y; words[4 * i + 2] = u.z; words[4 * i + 3] = u.w;
      }
      float x[NX];
#pragma unroll
      for (int e = 0; e < NX; ++e) x[e] = __uint_as_float(words[M + e]);
#pragma unroll
      for (int o = 0; o < TH; ++o) {
        const int k = r - o;
        if (decltype(checked)::value && (k < 0 || k >= KH)) continue;
        float wk[KWV * kPerVec];
#pragma unroll
        for (int i = 0; i < KWV; ++i) {
          const float4 v = w[k * (kWideWeightPitch / kPerVec) + i];
          wk[4 * i] = v.x; wk[4 * i + 1] = v.y; wk[4 * i + 2] = v.z; wk[4 * i + 3] = v.w;
        }
#pragma unroll
        for (int c = 0; c < KW; ++c)
#pragma unroll
          for (int tt = 0; tt < TW; ++tt) acc[o][tt] = fma(wk[c], x[tt + c], acc[o][tt]);
      }
    };
    // Unrolled where an output row starts or ends its taps (the skips are then compile-time);
    // rows TH - 1 .. KH - 1 feed every output row and run as a loop: the fully unrolled item was
    // ~2700 instructions, and the first version's ncu showed instruction-fetch stalls (0.70 per
    // issue, "no_instruction").
#pragma unroll
    for (int r = 0; r < TH - 1; ++r) apply_row(r, std::true_type{});
#pragma unroll 1
    for (int r = TH - 1; r < KH; ++r) apply_row(r, std::false_type{});
#pragma unroll
    for (int r = KH; r < KH + TH - 1; ++r) apply_row(r, std::true_type{});
    float* dst = oplane + oy * g.nx + ox;
    if (out_vec_aligned && oy + TH <= g.ny && ox + TW <= g.nx) {  // inside the plane (most items)
#pragma unroll
      for (int o = 0; o < TH; ++o)
#pragma unroll
        for (int v = 0; v < TW / kPerVec; ++v)
          reinterpret_cast<float4*>(dst + o * g.nx)[v] =
              make_float4(acc[o][4 * v], acc[o][4 * v + 1], acc[o][4 * v + 2], acc[o][4 * v + 3]);
    } else {
#pragma unroll
      for (int o = 0; o < TH; ++o) {
        if (oy + o >= g.ny) break;
#pragma unroll
        for (int v = 0; v < TW / kPerVec; ++v) {
          if (ox + 4 * v >= g.nx) break;
          const float q[4] = {acc[o][4 * v], acc[o][4 * v + 1], acc[o][4 * v + 2], acc[o][4 * v + 3]};
          store_outputs<float>(dst + o * g.nx + 4 * v, g.nx - ox - 4 * v, q);
        }
      }
    }
  }
}

// The wide consumer over a Box tile (StencilFixed::Box9x9): items twice as wide as the Box
// item, so one less column bit.
__device__ __forceinline__ void consume_box9x9(uint32_t st, uint32_t ws, ConsumerGeom g, float* out, int rank,
                                               int size) {
  g.cols_log2 -= 1;
  consume_tile_wide<9, 9, kWideTH, kWideTW>(st, ws, g, out, rank, size);
}

// The item width of the fixed consumers in the Row kernel and the narrow kernels (kTwoByteTW for
// the 2-byte types; the Box kernel's keep kTW<T>), and a tile's ConsumerGeom, counted in kTW<T>
// items, recounted in items of it: half as many across (choose_fixed asks tile_w % kTwoByteTW).
template <typename T>
constexpr int kItemTW = sizeof(T) == 2 ? kTwoByteTW : kTW<T>;
template <typename T>
__device__ __forceinline__ ConsumerGeom in_item_tw(ConsumerGeom g) {
  static_assert(kItemTW<T> == kTW<T> || kItemTW<T> == 2 * kTW<T>, "items of one or two tile items");
  if constexpr (kItemTW<T> != kTW<T>) {
    g.cols_log2 -= 1;
    g.items >>= 1;
  }
  return g;
}

// Runs the fixed consumer the launcher chose (see StencilFixed): the Row shapes in the Row kernel,
// the Box shapes in the Box kernel (each compiled under its kernel's register budget).
template <typename T, bool Box>
__device__ __forceinline__ void consume_fixed(StencilFixed f, uint32_t st, uint32_t ws, const ConsumerGeom& cg, T* out,
                                              int rank, int size) {
  if constexpr (Box) {
    if constexpr (std::is_same_v<T, float>) {
      if (f == StencilFixed::Box9x9) {
        consume_box9x9(st, ws, cg, out, rank, size);
        return;
      }
    }
    if (f == StencilFixed::Box3x3) consume_tile_fixed<T, BoxBlocking<3>::TH, 3, 3>(st, ws, cg, out, rank, size);
    else consume_tile_fixed<T, BoxBlocking<5>::TH, 5, 5>(st, ws, cg, out, rank, size);
  } else {
    constexpr int TW = kItemTW<T>;
    const ConsumerGeom rg = in_item_tw<T>(cg);
    switch (f) {
      case StencilFixed::Row3: consume_tile_fixed<T, 1, 1, 3, TW>(st, ws, rg, out, rank, size); break;
      case StencilFixed::Row5: consume_tile_fixed<T, 1, 1, 5, TW>(st, ws, rg, out, rank, size); break;
      case StencilFixed::Row7: consume_tile_fixed<T, 1, 1, 7, TW>(st, ws, rg, out, rank, size); break;
      default: consume_tile_fixed<T, 1, 1, 9, TW>(st, ws, rg, out, rank, size); break;
    }
  }
}

// The fixed consumer for this launch, or None (see StencilFixed): shapes with one, tiles whose
// rows share one shift (rows of whole 16-byte multiples), and a data pointer aligned to the
// consumer's vectors (then the shift puts the first taps where the consumer expects them).
inline StencilFixed choose_fixed(const StencilGeom& g, const void* x, int esz) {
  // The consumers' vectors are 16 bytes (kVecBytes, and the 2-byte types' items of kTwoByteTW
  // outputs where the Row and narrow 3x3 kernels take them; those need tiles of whole items).
  if (g.nx * esz % 16 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0) return StencilFixed::None;
  if (esz == 2 && g.tile_w % kTwoByteTW != 0) return StencilFixed::None;
  const int kh = 2 * g.ry + 1, kw = 2 * g.rx + 1;
  if (g.blocking == StencilBlocking::Row) {
    if (kh != 1) return StencilFixed::None;
    switch (kw) {
      case 3: return StencilFixed::Row3;
      case 5: return StencilFixed::Row5;
      case 7: return StencilFixed::Row7;
      case 9: return StencilFixed::Row9;
      default: return StencilFixed::None;
    }
  }
  if (g.blocking == StencilBlocking::Box3 && kh == 3) return StencilFixed::Box3x3;
  if (g.blocking == StencilBlocking::Box5 && kh == 5) return StencilFixed::Box5x5;
  // The wide consumer: items 8 columns wide (tiles of at least two fp32 Box items across).
  if (g.blocking == StencilBlocking::Box9 && kh == 9 && kw == 9 && esz == 4 && g.tile_w % kWideTW == 0)
    return StencilFixed::Box9x9;
  return StencilFixed::None;
}

// The wide consumer reads its tap rows as 16-byte vectors: weight rows padded to
// kWideWeightPitch. False (and g unchanged) when the larger weights would not fit beside the
// stages.
inline bool widen_weight_rows(StencilGeom& g, int stages, int64_t smem_budget) {
  const int64_t bytes = engine::align_up(int64_t(g.kh_pad) * kWideWeightPitch * 4, 16);
  if (stages * g.stage_bytes + bytes > smem_budget) return false;
  g.kw_pad = kWideWeightPitch;
  g.weight_bytes = bytes;
  return true;
}

// The narrow 9x9 kernel's tiles (NarrowK = 9): 24 x 192 outputs, 8 x 16 items of kNarrowWideTH x
// kNarrowWideTW (make_stencil_geom counts in 8 x 4 Box items and gives a tile as many of them as
// it has consumers: 3 rows of 48), fewer columns and more rows for narrow planes. False (g
// unchanged) where the input has no wide consumer or the plane's size leaves tiles that are not
// whole items, a power of two of them across (the general kernel then runs the 4 x 8 items on its
// own tiles).
inline bool narrow_wide_geom(StencilGeom& g, const StencilParams& p, int64_t smem_budget, int align) {
  constexpr int kItemRows = 8, kItemCols = 16;  // items down and across a tile
  constexpr int kBoxRows = kItemRows * kNarrowWideTH / 8, kBoxColsWide = kItemCols * kNarrowWideTW / 4;
  static_assert(kItemRows * kNarrowWideTH % 8 == 0 && kItemCols * kNarrowWideTW % 4 == 0, "whole Box items");
  StencilGeom n = make_stencil_geom(p, 4, 4, kBoxRows * kBoxColsWide, smem_budget, align, kBoxColsWide);
  n.fixed = choose_fixed(n, p.x, 4);
  const int across = n.tile_w / kNarrowWideTW;
  if (n.fixed != StencilFixed::Box9x9 || n.tile_h % kNarrowWideTH != 0 || n.tile_w % kNarrowWideTW != 0 ||
      (across & (across - 1)) != 0)
    return false;
  n.cols_log2 = 0;
  while ((1 << n.cols_log2) < across) ++n.cols_log2;
  n.items = (n.tile_h / kNarrowWideTH) << n.cols_log2;
  g = n;
  return true;
}

// The tensor-core consumer for a 2-byte input where it applies (see stencil_mma.cuh): sm_80+,
// 2-D boxes of at least kMmaMinTaps taps (3 <= kw <= 9, kh <= kMmaMaxKh), rows of whole 16-byte
// multiples (one shift for every row), tiles a multiple of 128 outputs wide, room for the
// fragments, and a column phase that lines the window rows up with ldmatrix (choose_mma_phase).
// Re-derives the tile grid for the phase. CUPIPE_STENCIL_MMA=0 turns it off (to compare).
//
// Measured (H200, 8192^2 fp16, tma/2, 2026-11-23): 7x7 0.378 -> 0.138 ms and 9x9 0.355 -> 0.162
// on the tensor cores, but 3x3 0.081 -> 0.097 and 5x5 0.111 -> 0.121: the MMA loop is
// latency-bound (ncu: "wait" stalls, tensor pipe 22% busy, 1.2 eligible warps per scheduler at
// two blocks per SM), and each tap row costs about as much as the CUDA cores' whole 3x3 item.
// 1-D rows (the Row kernel) measured even (r = 4: 0.336 against 0.333 ms) and stay on the CUDA
// cores.
inline void choose_mma(StencilGeom& g, const StencilParams& p, const DeviceInfo& dev, int stages,
                       int min_taps = kMmaMinTaps) {
  const char* env = std::getenv("CUPIPE_STENCIL_MMA");
  if (env != nullptr && env[0] == '0') return;
  const int kh = 2 * g.ry + 1, kw = 2 * g.rx + 1, esz = 2;
  if (dev.code_sm < 80 || g.blocking == StencilBlocking::Row || kh * kw < min_taps || kw < 3 || kw > 9 ||
      kh > kMmaMaxKh || g.nx * esz % 16 != 0 || g.tile_w % kMmaUnit != 0 ||
      reinterpret_cast<uintptr_t>(p.out) % 4 != 0 || reinterpret_cast<uintptr_t>(p.x) % esz != 0)
    return;
  const int64_t frag = mma_fragment_bytes(kh, 2);  // kMmaTerms
  if (stages * g.stage_bytes + g.weight_bytes + frag > dev.max_smem_optin - 1024) return;
  int phase = 0, a = 0;
  if (!choose_mma_phase(static_cast<int>(reinterpret_cast<uintptr_t>(p.x) % 128 / esz), g.rx, kw, g.pitch, phase, a))
    return;
  g.fixed = StencilFixed::Mma;
  g.x_phase = phase;
  g.mma_a = a;
  g.frag_bytes = frag;
  set_tile_grid(g);
}

// --------------------------------------------------------------------------------------- kernel

// Weight i of `w` (dtype t) in the accumulation type A: the conversion the op's weights.to(A)
// did before (round to nearest for fp64 -> fp32; exact otherwise), once per block as the
// weights are staged.
template <typename A>
__device__ __forceinline__ A weight_as(const void* w, DType t, int i) {
  switch (t) {
    case DType::F16: return static_cast<A>(__half2float(static_cast<const __half*>(w)[i]));
    case DType::BF16: return static_cast<A>(__bfloat162float(static_cast<const __nv_bfloat16*>(w)[i]));
    case DType::F64: return static_cast<A>(static_cast<const double*>(w)[i]);
    case DType::F32: break;
  }
  return static_cast<A>(static_cast<const float*>(w)[i]);
}

// Register budgets: Row kernels 85 (three blocks per SM: 1-D signals stream); Box kernels 128
// (two blocks: a 9-wide pass keeps 27 weights and up to 8 x 4 accumulators live), fp64 Box
// kernels all they need (one block; their 9-wide passes would spill at 128).
// Narrow kernels (Box only, NarrowK = 3 or 5) compile one fixed K x K consumer alone, in items of
// kNarrowTH rows: the 3x3 at 80 registers, the 5x5 at 102. ncu of the 3x3 box at 8192^2 fp32
// (H200, primitives/2, eleventh run): DRAM reads exactly the input (the halos hit L2), 24% of
// warps active, barrier stalls on top. With 8-row items the narrow 3x3 spilled (76 bytes) and
// lost (fp32 0.149 -> 0.170 ms); with 4-row items it has no spills: fp16/bf16 3x3 and 5-point
// 0.080 -> 0.076 ms (tma/2), fp32 0.149 -> 0.146 (primitives/2). BENCHMARKS.md, eleventh run.
// Their block size (scripts/probe_stencil_blocks.cu, H200, twelfth run, 8192^2, ms): 4-byte
// types run 128-thread blocks on 32-row tiles, six (3x3) or five (5x5) blocks per SM: fp32 3x3
// tma with one tile per block 0.1415-0.1417 against 0.1428-0.1433 at 256 threads (0.90 -> 0.91x
// of cudaMemcpyAsync), fp32 5x5 tma, two tiles per block, narrow at 128 threads 0.1435 against
// the general kernel's 0.1474-0.1498 (0.86 -> 0.90x). The 2-byte types kept 256 threads then
// (fp16 3x3 tma/2 0.0772 against 0.0786-0.0797 at 128, on 32 x 128 tiles) until tiles of twice
// the columns turned it (narrow_wide_tiles, twenty-fourth run); their 5x5 runs the tensor cores.
constexpr int kNarrowTH = 4;
// The L2 promotion of the stencils' tensor maps (how much the L2 fetches from DRAM around a missed
// sector), by the DRAM's peak rate: 128 bytes where it is 4 TB/s or more, 256 below. The same
// kernels, same SMs and L2, prefer opposite settings on the two Hoppers measured
// (scripts/tma_promotion_ab.sh, 8192^2, tma, the launchers' configurations, ms, twenty-ninth run):
// on an H200 (4.9 TB/s; these kernels fill its L2, fifteenth run) 128 B won: fp16/bf16 3x3 (32 x
// 256 tiles, a tile per block) 0.0750-0.0754 against 0.0762-0.0768, fp32 3x3 0.1401-0.1402
// against 0.1410-0.1413, fp32 5x5 (two tiles per block) 0.1394-0.1398 against 0.1425-0.1429; on
// an H100 (3.35 TB/s: DRAM-bound) 256 B won: fp16 3x3 0.0988-0.0990 against 0.0999-0.1007, fp32
// 3x3 0.1881-0.1884 against 0.1903-0.1904, fp32 5x5 0.1859-0.1861 against 0.1867-0.1869 (a tile
// per block). The fp32 9x9 and the tensor-core 5x5 were even on both. No promotion and 64 B ran the
// fp32 3x3 3% slower on the H200. Other devices take the rule unmeasured.
inline CUtensorMapL2promotion stencil_l2_promotion(const DeviceInfo& dev) {
  return dev.dram_peak_gbps >= 4000.0 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
}
// Resident warps per SM each kernel is compiled for (the register budget: 65536 / (32 x warps)
// registers per thread): Row 24 (85), narrow 3x3 24 (80), narrow 5x5 20 (102), Box, narrow 9x9
// and narrow tensor-core 16 (128), fp64 Box 8 (all they need).
template <typename T, bool Box, int NarrowK = 0>
constexpr int stencil_min_warps() {
  return !Box ? 24 : NarrowK == 3 ? 24 : NarrowK == 5 ? 20 : NarrowK == 9 || NarrowK < 0 ? 16 : sizeof(T) == 8 ? 8 : 16;
}
template <typename T, bool Box, int NarrowK = 0, int Threads = kStencilThreads,
          int Warps = stencil_min_warps<T, Box, NarrowK>()>
constexpr int stencil_min_blocks() {
  return std::max(1, Warps / (Threads / 32));
}
// The narrow kernels' block size (see above): 128 for every type since the twenty-fourth run.
template <typename T>
constexpr int narrow_threads() { return 128; }
// Tiles of the 2-byte narrow 3x3 kernel: the rows of its consumers (32), twice the columns of the
// others (256: window rows of 544 bytes, the fp32 tiles' 512 + 32, through the tensor map's 8-byte
// units), so two 8-output items per thread and tile. scripts/probe_stencil_blocks.cu with
// PROBE_WIDE=1 (H200, twenty-fourth run, 8192^2, tma, ms; cudaMemcpyAsync 0.067): fp16 3x3 one
// tile per block 0.0765 (two stages) / 0.0762 (one) against 0.0788-0.0796 for the 256-thread
// kernel's persistent 64 x 128 tiles (the launcher's before), bf16 0.0765 / 0.0763 against
// 0.0792-0.0795 (0.85 -> 0.88x); persistent 0.080, 256-thread blocks on 32 x 256 or 64 x 256
// tiles 0.077-0.080, 128-thread blocks on 32 x 128 0.082-0.084, 16 x 256 0.080. The fp32 3x3 and
// 5x5 gain nothing from wider tiles (0.1407-0.1409 against 0.1414 ms): their 512-byte rows
// already meet five lines for four of data, the 2-byte 128-column tiles' 288-byte rows four for
// two.
template <typename T>
constexpr bool narrow_wide_tiles(int k) { return sizeof(T) == 2 && k == 3; }

// Narrow tensor-core kernels (NarrowK = -KH: consume_tile_mma_rows alone, KH tap rows at compile
// time) for 2-byte boxes of KH = 5, 7 or 9 tap rows and 5 to 9 columns, two stages, in 128-thread
// blocks (four per SM at 128 registers), rounds of 8 rows (halved for KH = 9, whose fragments
// need the registers; fp16 7x7 still spills 20 bytes and still ran faster than with rounds of 4).
// scripts/probe_stencil_blocks.cu with PROBE_MMA=1 (H200, thirteenth run, fp16 8192^2, tma,
// persistent blocks, ms; cudaMemcpyAsync 0.067): 5x5 0.0844 (0.80x) against the CUDA cores' 0.110
// and the general kernel's tensor-core consumer 0.121; 7x7 0.102 against 0.138; 9x9 0.119 against
// 0.162. Rounds of 4 rows: 5x5 0.0893; 256-thread blocks 0.0886, 64-thread 0.0890; 3 or 4 stages
// 0.100-0.102; 64-row tiles 0.105; blocks of a few tiles 0.103-0.110 (each block builds its
// fragments and zeroes its stages). The 3x3 stays on the CUDA cores (0.0818 against the narrow
// 3x3's 0.076-0.077). With the one-warp loader (load_stencil_tile) the sweep's fp16 5x5 runs 0.085
// ms (0.113 before these kernels), 7x7 0.100 (0.138), 9x9 0.123 (0.162). Weights given in x's dtype
// run kernels compiled for one weight term (Terms = 1, fourteenth run, probe): fp16 5x5/7x7/9x9
// 0.0815/0.0820/0.0842, bf16 5x5 0.0830, 9x9 0.0860 ms. bf16 with fp32 weights, two terms since
// the fifteenth run (stencil_mma.cuh): 5x5 0.083, 7x7 0.094, 9x9 0.115 (probe). What bounds them
// (fifteenth run, probe, fp16 5x5): without MMAs they run as fast (0.080 ms); their loads alone
// take 0.043 (with choose_mma_phase's line count; 0.056 before), their stores alone 0.054.
// Their set-up (weights, fragments) runs while the first tile loads where every tile is one
// tensor-map box (see stencil_kernel); with the weights' scale found by warps (stencil_mma.cuh)
// blocks of one tile ran 0.137 -> 0.106 ms on 32 x 128 tiles and 0.0885 -> 0.0806 on 32 x 256 at
// one stage, against 0.0800-0.0816 for the persistent 32 x 128 blocks, which stay (fp16 5x5, one
// term, probe with PROBE_WIDE=2, twenty-fifth run). Compiled for 24 or 32 resident warps (80 or
// 64 registers, rounds of 4 rows, spills) they lost everywhere (0.094-0.157 ms).
constexpr int kMmaNarrowThreads = 128;
// Rows per round for KH tap rows (warps: the resident warps a kernel is compiled for; fewer
// registers than the 16 warps' 128 take the short rounds).
constexpr int mma_round_rows(int kh, int warps = 16) { return kh <= 7 && warps <= 16 ? 8 : 4; }
// The narrow tensor-core kernel's KH for a 2-byte box, or 0 (choose_mma still has to agree).
inline int narrow_mma_rows(const StencilGeom& g, int stages, int sm) {
  const int kh = 2 * g.ry + 1, kw = 2 * g.rx + 1;
  if (stages != 2 || sm < 80 || g.blocking == StencilBlocking::Row || kw < 5 || kw > 9) return 0;
  return kh == 5 || kh == 7 || kh == 9 ? kh : 0;
}
// The narrow kernel for a box the launcher found a fixed consumer for: K, or 0 for none. One or
// two stages (deeper rings do not fit the narrow kernels' blocks per SM at these tiles, so they
// keep the general kernel, and the instantiations stay few); 3x3 for 2- and 4-byte types, 5x5 for
// fp32 (the 2-byte 5x5 gains nothing); fp64 keeps its one-block kernel. 9: the fp32 9x9 box's wide
// consumer alone, two stages, persistent 128-thread blocks (four per SM; 4 x 8 items on 32 x 128
// tiles at 118 registers then, 3 x 12 on 24 x 192 since the thirty-fourth run, see
// consume_tile_wide): scripts/probe_stencil_wide.cu (H200, twenty-third run, 8192^2,
// ms, two rounds): tma 0.2364-0.2367 against the general kernel's 0.2484-0.2505 (43.7 -> 46.0
// TFLOP/s), primitives 0.289 against 0.313; 256-thread narrow blocks 0.245-0.246, blocks of 1, 2
// or 4 tiles 0.244-0.259. ncu (tma, narrow): issue slots 83% busy, the FMA pipe 72% (the general
// kernel: 76% and 67%, twenty-second run): four blocks per SM meet their tiles' barriers less in
// step than two. Loading each window row while the row before it is applied (two row buffers) ran
// slower: 0.246 narrow, 0.261 general.
template <typename T>
int narrow_box(StencilFixed f, int stages) {
  if (stages > 2 || sizeof(T) > 4) return 0;
  if (f == StencilFixed::Box3x3) return 3;
  if (f == StencilFixed::Box5x5 && std::is_same_v<T, float>) return 5;
  if (f == StencilFixed::Box9x9 && std::is_same_v<T, float> && stages == 2) return 9;
  return 0;
}

// NarrowK (Box only): 0, the general kernel; 3 or 5, the fixed K x K consumer alone in items of
// kNarrowTH rows (the launcher's precondition: g.fixed is that box); 9 (fp32), the wide consumer
// alone (precondition: g.fixed is Box9x9, its weight rows widened); -KH (2-byte types), the
// tensor-core consumer alone with KH tap rows (precondition: g.fixed is Mma, see
// narrow_mma_rows). Threads: the block size (the launcher's: narrow_threads or kMmaNarrowThreads
// for narrow kernels, else kStencilThreads; the probe compares others).
// Terms (narrow tensor-core kernels): the weight terms the consumer multiplies, kMmaTerms<T> or 1
// (the launcher's choice for weights that came in x's dtype; a block whose fragments need more, as
// scaled weights that lost bits to fp16's subnormals can, computes its tiles on the exact path).
// One kernel holding both consumers spilled and ran fp16 5x5 0.0930 ms against 0.0833 (probe).
// Warps: the resident warps per SM the register budget is compiled for (stencil_min_warps; the
// probe compares others).
template <engine::Mechanism M, int S, typename T, bool Box, int NarrowK = 0,
          int Threads = (NarrowK > 0 ? narrow_threads<T>() : NarrowK < 0 ? kMmaNarrowThreads : kStencilThreads),
          int Terms = kMmaTerms<T>, int Warps = stencil_min_warps<T, Box, NarrowK>()>
__global__ void __launch_bounds__(Threads, stencil_min_blocks<T, Box, NarrowK, Threads, Warps>())
    stencil_kernel(const T* __restrict__ x, T* __restrict__ out, const void* __restrict__ weights,
                   StencilGeom g, Boundary boundary, const __grid_constant__ CUtensorMap tmap) {
  if constexpr (!engine::mechanism_in_this_pass(M)) { __trap(); return; }  // tma below sm_90 (mechanism.h)
  using A = acc_t<T>;
  using Ring = engine::Ring<M, S, 16>;
  extern __shared__ __align__(engine::kStageAlign) char smem[];
  __shared__ engine::RawShared<typename Ring::SharedState> ss;
  const int kh = 2 * g.ry + 1, kw = 2 * g.rx + 1;
  // The weights live in shared memory after the stages, loaded once per block and zero-padded to
  // whole passes and chunks: any radius fits (kernel parameters would cap it near 4 KiB), and a
  // pass reads its DY x CK weights once into registers with broadcast loads.
  A* w_s = reinterpret_cast<A*>(smem + static_cast<int64_t>(S) * g.stage_bytes);
  auto stage_weights = [&] {
    for (int i = threadIdx.x; i < g.kh_pad * g.kw_pad; i += blockDim.x) {
      const int a = i / g.kw_pad, c = i - a * g.kw_pad;
      w_s[i] = a < kh && c < kw ? weight_as<A>(weights, g.wdt, a * kw + c) : A(0);
    }
    __syncthreads();
  };
  // Narrow kernels run short-lived blocks of one or two tiles: they stage the weights while the
  // first tile loads (run_ring's ready) instead of waiting for the weights' global load before
  // issuing a copy (fp32 5x5 0.1435 -> 0.1424 ms, 3x3 0.1417 -> 0.1413). The general kernel's
  // persistent blocks stage them first: in the hook their code ran the fp16 5x5 at 0.1125 ms
  // against 0.1102 (H200, one machine, twelfth run).
  // The narrow tensor-core kernels whose every tile is one tensor-map box (tma, zero boundary): a
  // box writes every byte of its stage rows, so no stage needs zeroing, and the weights and
  // fragments are built while the first tile loads (run_ring's ready), as the CUDA-core narrow
  // kernels stage their weights.
  bool late_setup = false;
  if constexpr (NarrowK < 0 && M == engine::Mechanism::Tma) late_setup = g.tensor_tiles && boundary == Boundary::Zero;
  uint2* frag_s = reinterpret_cast<uint2*>(smem + static_cast<int64_t>(S) * g.stage_bytes + g.weight_bytes);
  if constexpr (NarrowK <= 0) {
    if (!late_setup) stage_weights();
  }
  // The tensor-core consumer: its weight fragments, and the stages zeroed once, for the bytes the
  // loads leave unwritten that its 16-byte runs read and multiply by zero weights (finite, they
  // add nothing; left as they were, a NaN there would send units to the exact path).
  // (Nothing of it stays in registers across the ring: the kernels are at their register budget.)
  if constexpr (sizeof(T) == 2 && Box && NarrowK <= 0) {
    if ((NarrowK < 0 || g.fixed == StencilFixed::Mma) && !late_setup) {
      build_mma_fragments<T>(w_s, kh, kw, g.kw_pad, g.mma_a, frag_s, threadIdx.x, blockDim.x);
      for (int64_t i = threadIdx.x; i < S * g.stage_bytes / 16; i += blockDim.x)
        reinterpret_cast<uint4*>(smem)[i] = make_uint4(0, 0, 0, 0);
      if constexpr (M == engine::Mechanism::Tma) engine::sm90::fence_proxy_async_shared();  // bulk copies follow
      __syncthreads();
    }
  }
  Ring ring(ss.get(), smem, static_cast<int>(g.stage_bytes));

  const int64_t mine = block_tiles(g);
  auto load = [&](const auto& w, int64_t k) {
    load_stencil_tile<T, (NarrowK <= 0)>(w, x, g, boundary, blockIdx.x + k * gridDim.x, &tmap);
  };

  const ConsumerGeom cg{g.ny, g.nx, kh, kw, g.kw_pad, g.pitch, g.hdr_bytes, g.items, g.cols_log2};
  auto consume = [&](const char* stage, int64_t, engine::Team team) {
    if constexpr (NarrowK < 0) {
      constexpr int KH = -NarrowK;
      const MmaGeom mg{g.ny, g.nx, kh, kw, g.kw_pad, g.pitch, g.hdr_bytes, g.tile_h, g.cols_log2 - 5, g.mma_a};
      const uint32_t ws = static_cast<uint32_t>(__cvta_generic_to_shared(w_s));
      const uint32_t st = static_cast<uint32_t>(__cvta_generic_to_shared(stage));
      const uint32_t fs = ws + static_cast<uint32_t>(g.weight_bytes);
      consume_tile_mma_rows<T, KH, mma_round_rows(KH, Warps), Terms>(st, fs, ws, mg, out, team.rank, team.size);
    } else if constexpr (NarrowK == 9) {
      static_assert(std::is_same_v<T, float>, "the narrow 9x9 kernel is the fp32 wide consumer's");
      consume_tile_wide<9, 9, kNarrowWideTH, kNarrowWideTW>(static_cast<uint32_t>(__cvta_generic_to_shared(stage)),
                                                            static_cast<uint32_t>(__cvta_generic_to_shared(w_s)), cg,
                                                            out, team.rank, team.size);
    } else if constexpr (NarrowK > 0) {
      static_assert(BoxBlocking<3>::TH == BoxBlocking<5>::TH, "narrow items split the Box item");
      ConsumerGeom ng = cg;
      ng.items = cg.items * (BoxBlocking<3>::TH / kNarrowTH);  // the same tile in items of kNarrowTH rows
      ng = in_item_tw<T>(ng);
      consume_tile_fixed<T, kNarrowTH, NarrowK, NarrowK, kItemTW<T>>(
          static_cast<uint32_t>(__cvta_generic_to_shared(stage)), static_cast<uint32_t>(__cvta_generic_to_shared(w_s)),
          ng, out, team.rank, team.size);
    } else {
      if constexpr (sizeof(T) == 2 && Box) {
        if (g.fixed == StencilFixed::Mma) {
          const MmaGeom mg{g.ny, g.nx, kh, kw, g.kw_pad, g.pitch, g.hdr_bytes, g.tile_h, g.cols_log2 - 5, g.mma_a};
          const uint32_t ws = static_cast<uint32_t>(__cvta_generic_to_shared(w_s));
          consume_tile_mma<T, 4>(static_cast<uint32_t>(__cvta_generic_to_shared(stage)),
                              ws + static_cast<uint32_t>(g.weight_bytes), ws, mg, out, team.rank, team.size);
          return;
        }
      }
      if (g.fixed != StencilFixed::None) {
        consume_fixed<T, Box>(g.fixed, static_cast<uint32_t>(__cvta_generic_to_shared(stage)),
                         static_cast<uint32_t>(__cvta_generic_to_shared(w_s)), cg, out, team.rank, team.size);
      } else if constexpr (!Box) {
        consume_tile<T, RowBlocking>(stage, w_s, cg, out, team.rank, team.size);
      } else {
        const uint32_t st = static_cast<uint32_t>(__cvta_generic_to_shared(stage));
        const uint32_t ws = static_cast<uint32_t>(__cvta_generic_to_shared(w_s));
        switch (g.blocking) {
          case StencilBlocking::Box1: consume_box_tile<T, 1>(st, ws, cg, out, team.rank, team.size); break;
          case StencilBlocking::Box3: consume_box_tile<T, 3>(st, ws, cg, out, team.rank, team.size); break;
          case StencilBlocking::Box5: consume_box_tile<T, 5>(st, ws, cg, out, team.rank, team.size); break;
          default: consume_box_tile<T, 9>(st, ws, cg, out, team.rank, team.size); break;
        }
      }
    }
  };
  if constexpr (NarrowK > 0) {
    engine::run_ring(ring, mine, load, consume, stage_weights);
  } else if constexpr (NarrowK < 0) {
    engine::run_ring(ring, mine, load, consume, [&] {
      if (!late_setup) return;  // block-uniform
      stage_weights();
      build_mma_fragments<T>(w_s, kh, kw, g.kw_pad, g.mma_a, frag_s, threadIdx.x, blockDim.x);
      __syncthreads();  // the fragments' tail, written by thread 0
    });
  } else {
    engine::run_ring(ring, mine, load, consume);
  }
}

template <engine::Mechanism M>
void launch_stencil_mechanism(const StencilParams& p) {
  dispatch_stages(p.stages, [&](auto s) {
    constexpr int S = decltype(s)::value;
    dispatch_dtype(p.dtype, [&](auto tv) {
      using T = decltype(tv);
      using A = acc_t<T>;
      const DeviceInfo dev = device_info(current_device());
      constexpr bool kTma = M == engine::Mechanism::Tma;
      constexpr int64_t esz = sizeof(T);
      const int64_t smem_budget = dev.max_smem_optin - 1024, align = kTma ? 128 : 16;
      // A narrow kernel of another block size tiles for its own consumer count (the fixed
      // consumer's choice does not depend on the tile); wide: tiles of twice the columns at the
      // same rows (narrow_wide_tiles).
      auto geom_for = [&](int block, bool wide = false) {
        const int consumers = engine::consumer_threads(M, block) * (wide ? 2 : 1);
        StencilGeom gb = make_stencil_geom(p, esz, sizeof(A), consumers, smem_budget, align,
                                           wide ? 2 * kBoxCols : kBoxCols);
        gb.fixed = choose_fixed(gb, p.x, esz);
        return gb;
      };
      StencilGeom g = geom_for(kStencilThreads);
      // narrow: K of a narrow CUDA-core kernel, -KH of a narrow tensor-core kernel, 0 for none.
      int narrow = g.blocking == StencilBlocking::Row ? 0 : narrow_box<T>(g.fixed, S);
      int threads = narrow > 0 ? narrow_threads<T>() : kStencilThreads;
      if (narrow == 9) {
        if (!narrow_wide_geom(g, p, smem_budget, align)) {
          narrow = 0;
          threads = kStencilThreads;
        }
      } else if (threads != kStencilThreads) {
        g = geom_for(threads, narrow_wide_tiles<T>(narrow));
      }
      if constexpr (esz == 2) {
        if (const int kh = narrow == 0 ? narrow_mma_rows(g, S, dev.code_sm) : 0; kh > 0) {
          StencilGeom gm = geom_for(kMmaNarrowThreads);
          choose_mma(gm, p, dev, S, 0);
          if (gm.fixed == StencilFixed::Mma) {
            g = gm;
            narrow = -kh;
            threads = kMmaNarrowThreads;
          }
        }
      }
      if (g.fixed == StencilFixed::Box9x9 && !widen_weight_rows(g, S, smem_budget)) {
        g.fixed = StencilFixed::None;
        if (narrow == 9) {  // the general kernel and consumer, on its own tiles
          g = geom_for(kStencilThreads);
          g.fixed = StencilFixed::None;
          narrow = 0;
          threads = kStencilThreads;
        }
      }
      // tma moves a 2-D tile as one tensor-map box when the map can describe the input: rows of
      // whole 16-byte multiples from a 16-byte aligned pointer, boxes of at most 256 x 256.
      CUtensorMap tmap{};
      constexpr int64_t kMaxCoord = 0x7fffffff;
      g.tensor_tiles = kTma && dev.code_sm >= 90 && g.blocking != StencilBlocking::Row && p.nx * esz % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && g.pitch / tensor_map_unit(esz) <= 256 &&
                       g.win_h <= 256 &&
                       p.nx <= kMaxCoord && p.ny <= kMaxCoord && p.batch <= kMaxCoord;
      if constexpr (esz == 2) {
        if (narrow == 0) choose_mma(g, p, dev, S);
      }
      if (g.tensor_tiles)
        tmap = make_plane_map(p.x, p.dtype, static_cast<int>(esz), p.batch, p.ny, p.nx, g.pitch, g.win_h,
                              stencil_l2_promotion(dev));
      auto launch = [&](auto kernel) {
        const size_t smem = static_cast<size_t>(S) * g.stage_bytes + g.weight_bytes + g.frag_bytes;
        prepare_smem(kernel, smem, "stencil");
        // One wave of persistent blocks; free_sms leaves SMs for another stream's kernels (the
        // halo exchange of cupipe.distributed's overlap), which could not start before it ends.
        // With tiles_per_block, more blocks than one wave (the scheduler balances the SMs; see
        // resolve_stencil) except when SMs are to stay free: later waves would fill them.
        const int sms = std::max(1, dev.num_sms - std::max(0, p.free_sms));
        int64_t grid = static_cast<int64_t>(sms) * blocks_per_sm(kernel, threads, smem);
        if (p.blocks > 0) grid = p.blocks;
        else if (p.tiles_per_block > 0 && p.free_sms <= 0)
          grid = std::max(grid, (g.ntiles + p.tiles_per_block - 1) / p.tiles_per_block);
        if (grid > g.ntiles) grid = g.ntiles;
        if (grid < 1) grid = 1;
        if (p.blocks <= 0 && p.tiles_per_block <= 0 && grid < g.ntiles && g.blocking != StencilBlocking::Row)
          grid = column_coprime_grid(grid, g.tiles_x);  // one wave of persistent 2-D blocks
        set_block_tiles(g, grid);
        kernel<<<static_cast<unsigned>(grid), threads, smem, reinterpret_cast<cudaStream_t>(p.stream)>>>(
            static_cast<const T*>(p.x), static_cast<T*>(p.out), p.weights, g, p.boundary, tmap);
        CUPIPE_LAUNCH_CHECK();
      };
      if (g.blocking == StencilBlocking::Row) {
        launch(stencil_kernel<M, S, T, false>);
        return;
      }
      // The tensor-core consumer in kernels of their own (see narrow_mma_rows).
      if constexpr (S == 2 && sizeof(T) == 2) {
        constexpr int Th = kMmaNarrowThreads;
        if (p.weights_exact) {
          if (narrow == -5) return launch(stencil_kernel<M, S, T, true, -5, Th, 1>);
          if (narrow == -7) return launch(stencil_kernel<M, S, T, true, -7, Th, 1>);
          if (narrow == -9) return launch(stencil_kernel<M, S, T, true, -9, Th, 1>);
        }
        if (narrow == -5) return launch(stencil_kernel<M, S, T, true, -5>);
        if (narrow == -7) return launch(stencil_kernel<M, S, T, true, -7>);
        if (narrow == -9) return launch(stencil_kernel<M, S, T, true, -9>);
      }
      // The fixed 3x3, 5x5 and (fp32) 9x9 consumers in kernels of their own (see narrow_box).
      if constexpr (S <= 2 && sizeof(T) <= 4) {
        if (narrow == 3) {
          launch(stencil_kernel<M, S, T, true, 3>);
          return;
        }
        if constexpr (std::is_same_v<T, float>) {
          if (narrow == 5) {
            launch(stencil_kernel<M, S, T, true, 5>);
            return;
          }
          if constexpr (S == 2) {
            if (narrow == 9) {
              launch(stencil_kernel<M, S, T, true, 9>);
              return;
            }
          }
        }
      }
      launch(stencil_kernel<M, S, T, true>);
    });
  });
}

}  // namespace kernels
}  // namespace cupipe
