// The 2-D stencil's tile geometry: blockings, the tile a stage holds, the tile grid.
//
// Output tiles of tile_h x tile_w points stream through the engine's stage ring. A stage holds a
// TileHeader (the tile's plane and origin), one int32 byte shift per window row (padded to 16
// bytes), then the tile's padded input window: (tile_h + 2ry) rows of (tile_w + 2rx * step)
// elements, `pitch` bytes apart, row i's elements starting shifts[i] bytes into its pitch (so that
// the row agrees with its source modulo 16 bytes, the engine's copy precondition). x's taps lie
// `step` elements apart: 1, or the extent of a batch dim inside the rows (channels_last's C), whose
// values the consumers keep apart and the boundary maps point by point.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "engine/engine.cuh"
#include "kernels/fast_div.cuh"

namespace cupipe {
namespace kernels {

constexpr int kStencilMaxTileRows = 64;  // tall tiles for narrow planes stop here (row copies)

// The general consumer's register blocking: TH output rows per work item, DY tap rows per pass,
// CK tap columns per chunk. Row serves 1-D signals and planes too short for 8-row items (no
// vertical reuse); 2-D stencils take the Box whose chunk is the stencil's width (1, 3, 5: no tap
// slot wasted), or Box9 for every wider one (several chunks, the last partial).
enum class StencilBlocking : int { Row = 0, Box1 = 1, Box3 = 2, Box5 = 3, Box9 = 4 };

template <int TH_, int DY_, int CK_, bool AnyWidth_>
struct Blocking {
  static constexpr int TH = TH_, DY = DY_, CK = CK_;
  static constexpr bool kAnyWidth = AnyWidth_;  // else only kw == CK
};
using RowBlocking = Blocking<1, 1, 9, true>;
template <int CK>
using BoxBlocking = Blocking<8, 3, CK, CK == 9>;

// The consumer a tile runs when its shape has a compile-time one (choose_fixed: rows of whole
// 16-byte multiples and a vector-aligned pointer, the common case): Row3..Row9, Box3x3/Box5x5 and
// the columns Col3..Col9 (one tap column: 1-D along a strided dim; consumer_fixed.cuh), Box9x9
// (fp32, consumer_wide.cuh), Mma (2-byte, consumer_mma.cuh). None: the general consumer
// (consumer_general.cuh).
enum class StencilFixed : int { None = 0, Row3, Row5, Row7, Row9, Box3x3, Box5x5, Mma, Box9x9, Col3, Col5, Col7, Col9 };

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

// TW, the outputs a thread computes per row, read as one shared-memory vector (lanes of a warp
// read consecutive vectors): 16 bytes for fp32 and fp64, 8 for the 2-byte types (16-byte items
// would need 8 x 8 fp32 accumulators: no room for two blocks per SM).
template <typename T>
constexpr int kTW = sizeof(T) == 8 ? 2 : 4;
template <typename T>
constexpr int kVecBytes = kTW<T> * static_cast<int>(sizeof(T));
// The 2-byte types' fixed consumers in the Row and Narrow3 kernels take items of 8 outputs (one
// 16-byte vector): 4-output items were issue-bound on per-item overhead (docs/design.md).
constexpr int kTwoByteTW = 8;

// What the loader tells the consumer about the tile in a stage, before the row shifts.
struct TileHeader {
  int64_t b, y0, x0;  // plane, first output row, first output column
};

struct StencilGeom {
  int64_t batch, ny, nx;
  int64_t xs_row, xs_plane;  // x's row and plane strides in elements (nx and ny * nx when dense)
  int ry, rx;
  int step;                // elements between x taps (StencilParams::x_step; nx a multiple of it)
  StencilBlocking blocking;
  StencilFixed fixed;      // None unless the launcher finds a fixed consumer for the input
  bool half_items;         // 2-byte fixed consumers on items of kTW outputs (8-byte vectors), not
                           // kTwoByteTW: x only 8-byte aligned (a crop 4 elements in)
  bool tensor_tiles;       // tma: tiles move as one tensor-map box (see load_stencil_tile)
  int map_lead;            // tensor tiles: bytes between the map's base and x (0, or 8 for an x 8
                           // bytes off 16), whose columns the zero boundary's edge tiles zero
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

// x's rows a multiple of 16 bytes apart: every window row of a plane has the same shift.
__host__ __device__ inline bool rows_share_shift(int64_t xs_row, int esz) { return xs_row * esz % 16 == 0; }

// Rows of x and of out whole 16-byte multiples, and x's row and plane strides too: every window
// row of every plane then has the same shift (the fixed consumers' and tensor maps' condition).
inline bool rows_of_16(const StencilGeom& g, int esz) {
  return g.nx * esz % 16 == 0 && g.xs_row * esz % 16 == 0 && g.xs_plane * esz % 16 == 0;
}

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
// `smem_budget` bytes. Box tiles start at one item per thread: a warp's 32 items across, an 8-row
// block per warp down (64 x 128 outputs for fp32); Row tiles are 32 KiB of one row, so that a
// tile's fixed cost is spread over many outputs. Narrow planes trade columns for rows (up to
// kStencilMaxTileRows), short planes drop rows; when even the smallest Box tile does not fit
// (huge radii), Row's shorter window is tried.
// `align`: of the window rows' start in a stage and of the stage size (16; 128 for tensor-map
// boxes, whose shared-memory destination must be 128-byte aligned). `box_cols`: items across a Box
// tile before narrow planes shrink it (kBoxCols; the 2-byte narrow 3x3's tiles twice that, with
// twice the consumers so that the rows stay). `stepped_halos`: a stepped Box tile's halos across.
constexpr int kBoxCols = 32;  // items across a Box tile (make_stencil_geom's default)

inline StencilGeom make_stencil_geom(const StencilParams& p, int esz, int acc_size, int consumers,
                                     int64_t smem_budget, int align = 16, int box_cols = kBoxCols,
                                     int stepped_halos = 16) {
  StencilGeom g;
  g.batch = p.batch; g.ny = p.ny; g.nx = p.nx; g.ry = p.ry; g.rx = p.rx;
  g.step = p.x_step > 1 ? static_cast<int>(p.x_step) : 1;
  g.xs_row = p.x_row > 0 ? p.x_row : p.nx;
  g.xs_plane = p.x_row > 0 ? p.x_plane : p.ny * p.nx;
  g.wdt = p.weights_dtype;
  g.fixed = StencilFixed::None;
  g.half_items = false;
  g.tensor_tiles = false;
  g.map_lead = 0;
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
    // Stepped Box tiles: at least stepped_halos halos of columns across and two items down, so
    // that the window's halo (rx * step columns a side) stays a small part of what a tile reads.
    const int64_t halo = int64_t(p.rx) * g.step;
    const bool stepped_box = g.step > 1 && b.th > 1;
    if (stepped_box)
      while (cols < 1024 && int64_t(cols) * tw < stepped_halos * halo) cols *= 2;
    while (cols > 1 && (cols / 2) * int64_t(tw) >= p.nx) cols /= 2;
    int rb = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({(b.th == 1 ? 8 * consumers : consumers) / cols,
                                                                      kStencilMaxTileRows / b.th,
                                                                      (p.ny + b.th - 1) / b.th})));
    if (stepped_box) rb = static_cast<int>(std::min<int64_t>(std::max(rb, 2), (p.ny + b.th - 1) / b.th));
    auto layout = [&] {
      const int64_t tile_h = int64_t(rb) * b.th, tile_w = int64_t(cols) * tw;
      const int64_t win_h = tile_h + kh - 1, win_w = tile_w + (kw - 1) * g.step;
      // The consumer reads whole vectors up to kw_pad - 1 columns past a tile column (stepped: its
      // last tap's vector), from up to 15 bytes of shift; primitives may zero-fill up to 15 bytes
      // past a row's segment.
      const int64_t reach = g.step == 1 ? kw_pad : std::max<int64_t>(kw_pad, (kw - 1) * g.step + tw);
      const int64_t pitch = engine::align_up((tile_w + reach) * esz, 16) + 16;
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
// blocks of the edge columns take every (costlier) edge tile. A block or a few fewer deal every
// block tiles of every column; a grid that finds no such size within 8 blocks stays as it was.
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

}  // namespace kernels
}  // namespace cupipe
