// The layout planner: how a call's input lies in memory, and the views of that memory the kernels
// read. Every op plans here, from sizes and strides alone (no data, no torch types): the CUDA and
// CPU paths, the tuning table's shape and cupipe.explain all read the same plan
// (docs/design.md, section 7).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cupipe {
namespace ops {

// One dim of a tensor as it lies in memory: logical dims of the same mark that are contiguous with
// each other, merged. `dims`: the logical dims it holds, outermost first.
struct MemDim {
  int64_t size = 1, stride = 1;
  int mark = 0;  // what the op does along it: 0 nothing; reduce 1; stencils 1 (H / the dim), 2 (W)
  std::vector<int> dims;
};

// x's dims in memory order (largest stride first; equal strides keep their logical order), size-1
// dims dropped, neighbours merged where stride[i] == size[i+1] * stride[i+1] and the marks agree.
// dense: the dims tile one gap-free block starting at the first element (no zero strides, no
// overlap, no holes), so reading the block in order reads x in memory order.
struct MemLayout {
  std::vector<MemDim> dims;
  bool dense = false;
};
MemLayout memory_layout(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                        const std::vector<int>& marks);

// A reduction as reduce kernels over contiguous (outer, r, inner) views. The first step reads x's
// memory block (dense) or its contiguous copy (not dense); each further step reads the previous
// step's output (outer * inner values). One step per run of reduced dims in memory, innermost run
// first; no reduced dim of size > 1: one step with r = 1. A folded step (fold > 1) fuses the first
// two, where the innermost run lies innermost in memory: (outer, r, inner) with the last `fold`
// elements of each inner row reduced too, outer * inner / fold values out (fold_reduce_steps).
struct ReduceStep {
  int64_t outer = 1, r = 1, inner = 1, fold = 1;
  int64_t outputs() const { return outer * inner / fold; }
  // A folded step as the two it fuses: rows over the fold, then columns over r.
  ReduceStep fold_rows() const { return ReduceStep{outer * r * (inner / fold), fold, 1, 1}; }
  ReduceStep fold_columns() const { return ReduceStep{outer, r, inner / fold, 1}; }
};
struct ReduceLayoutPlan {
  bool copy = false;                // x is not dense: the steps read x.contiguous()
  std::vector<ReduceStep> steps;
  std::vector<int> out_dims;        // the kept dims of size > 1, in the order the last step writes them
  bool permuted_out = false;        // out_dims not in logical order: the result is permuted into place
  std::string describe() const;     // for explain: "rows (outer, r, inner) = ..., then ..."
};
ReduceLayoutPlan plan_reduce_layout(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                                    const std::vector<bool>& reduced);
// Fuses the plan's first two steps into one folded step where the first reduces rows (its run lies
// innermost in memory) and another step follows. Returns whether it did.
bool fold_reduce_steps(ReduceLayoutPlan& plan);

// A stencil over x's memory as the kernels' (batch, ny, nx) planes, window (2ry+1, 2rx+1).
// stencil1d marks its dim 1; stencil2d marks H (dim -2) 1 and W (dim -1) 2. `transposed`: W lies
// outside H in memory, so the kernels' y is W and the weights go transposed. `step`: a batch dim
// lies innermost, right inside the plane's x (channels_last's C; stencil1d's dims inside the
// filtered one when narrower than kMinPlaneRowBytes): the kernels' rows hold `step` values per
// point, x's taps lie `step` elements apart and the boundary applies to points (nx / step of a
// row). `copy`: x's layout has no such view (not dense and not pitched, a batch dim between the
// plane's dims, an inner batch wider than kMaxStepBytes, a filtered dim of size 1): the kernels
// read x.contiguous() in logical order.
struct StencilLayoutPlan {
  bool copy = false;
  bool transposed = false;
  int64_t batch = 1, ny = 1, nx = 1;
  int64_t step = 1;
  // Element strides of the kernels' rows and planes in x's memory; 0: dense (nx, ny * nx). A plane
  // x reads in place though x is not dense (a crop, a step over rows or planes) has them.
  int64_t xs_row = 0, xs_plane = 0;
  int ry = 0, rx = 0;
  const char* why = "";  // for explain (static text: planning runs on every call)
  std::string describe() const;  // why, with the view's extents
};
// stencil1d: planes whose rows (the filtered dim's inner extent) are narrower than this (bytes)
// give the Box tiles fewer items than threads (32 items across, up to 64 rows); the inner dims
// become a step within rows instead.
constexpr int64_t kMinPlaneRowBytes = 512;
// stencil2d: an inner batch dim (channels_last's C) up to this many bytes per point becomes a step
// within rows; a wider one would need tiles of too few points for their halo (a copy instead).
constexpr int64_t kMaxStepBytes = 1024;
StencilLayoutPlan plan_stencil1d_layout(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                                        int dim, int r, int esz);
StencilLayoutPlan plan_stencil2d_layout(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                                        int ry, int rx, int esz);

}  // namespace ops
}  // namespace cupipe
