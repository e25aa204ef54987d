#include "ops/layout.h"

#include <algorithm>
#include <sstream>

namespace cupipe {
namespace ops {

namespace {

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size(), 1);
  for (int i = static_cast<int>(sizes.size()) - 2; i >= 0; --i)
    s[static_cast<size_t>(i)] = s[static_cast<size_t>(i) + 1] * std::max<int64_t>(sizes[static_cast<size_t>(i) + 1], 1);
  return s;
}

int64_t product(const std::vector<MemDim>& dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= dims[i].size;
  return p;
}

// Appends d to the memory-order list, merged into the last dim when contiguous with it and of its mark.
void push_merged(std::vector<MemDim>& dims, MemDim d) {
  if (!dims.empty() && dims.back().mark == d.mark && dims.back().stride == d.size * d.stride) {
    MemDim& b = dims.back();
    b.size *= d.size;
    b.stride = d.stride;
    b.dims.insert(b.dims.end(), d.dims.begin(), d.dims.end());
  } else {
    dims.push_back(std::move(d));
  }
}

// The list with dims[j] removed, as the contiguous output of a step that reduced it, re-merged.
std::vector<MemDim> drop_dim(const std::vector<MemDim>& dims, size_t j) {
  std::vector<MemDim> rest;
  for (size_t i = 0; i < dims.size(); ++i)
    if (i != j) rest.push_back(dims[i]);
  int64_t stride = 1;
  for (auto it = rest.rbegin(); it != rest.rend(); ++it) {
    it->stride = stride;
    stride *= it->size;
  }
  std::vector<MemDim> merged;
  for (auto& d : rest) push_merged(merged, std::move(d));
  return merged;
}

}  // namespace

MemLayout memory_layout(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                        const std::vector<int>& marks) {
  std::vector<int> order;
  for (int d = 0; d < static_cast<int>(sizes.size()); ++d)
    if (sizes[static_cast<size_t>(d)] != 1) order.push_back(d);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return strides[static_cast<size_t>(a)] > strides[static_cast<size_t>(b)];
  });
  MemLayout out;
  out.dense = true;
  int64_t expected = 1;  // the stride a gap-free block has at this dim, innermost first
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const size_t d = static_cast<size_t>(*it);
    if (strides[d] != expected) out.dense = false;
    expected *= sizes[d];
  }
  for (int d : order) {
    const size_t i = static_cast<size_t>(d);
    push_merged(out.dims, MemDim{sizes[i], strides[i], marks[i], {d}});
  }
  return out;
}

ReduceLayoutPlan plan_reduce_layout(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                                    const std::vector<bool>& reduced) {
  std::vector<int> marks(sizes.size());
  for (size_t d = 0; d < sizes.size(); ++d) marks[d] = reduced[d] ? 1 : 0;
  ReduceLayoutPlan plan;
  MemLayout L = memory_layout(sizes, strides, marks);
  if (!L.dense) {
    plan.copy = true;
    L = memory_layout(sizes, contiguous_strides(sizes), marks);
  }
  std::vector<MemDim> dims = L.dims;
  for (;;) {  // the innermost run of reduced dims first: its step reads the block in order
    size_t j = dims.size();
    for (size_t i = 0; i < dims.size(); ++i)
      if (dims[i].mark == 1) j = i;
    if (j == dims.size()) break;
    plan.steps.push_back(ReduceStep{product(dims, 0, j), dims[j].size, product(dims, j + 1, dims.size())});
    dims = drop_dim(dims, j);
  }
  if (plan.steps.empty()) plan.steps.push_back(ReduceStep{product(dims, 0, dims.size()), 1, 1});
  for (const MemDim& d : dims) plan.out_dims.insert(plan.out_dims.end(), d.dims.begin(), d.dims.end());
  plan.permuted_out = !std::is_sorted(plan.out_dims.begin(), plan.out_dims.end());
  return plan;
}

bool fold_reduce_steps(ReduceLayoutPlan& plan) {
  if (plan.steps.size() < 2 || plan.steps[0].inner != 1 || plan.steps[0].r < 2 || plan.steps[0].fold != 1) return false;
  const ReduceStep rows = plan.steps[0], cols = plan.steps[1];
  // rows' outer is (cols.outer, cols.r, cols.inner) in memory order: x is (outer, r, inner, fold)
  plan.steps[1] = ReduceStep{cols.outer, cols.r, cols.inner * rows.r, rows.r};
  plan.steps.erase(plan.steps.begin());
  return true;
}

std::string ReduceLayoutPlan::describe() const {
  std::ostringstream s;
  s << (copy ? "x is not dense (gaps, overlaps or zero strides): the kernels read a contiguous copy"
             : "the kernels read x's memory in place, in memory order");
  for (size_t i = 0; i < steps.size(); ++i) {
    const ReduceStep& t = steps[i];
    s << (i == 0 ? "; " : ", then ") << (t.r == 1 ? "copy" : t.inner == 1 ? "rows" : "columns")
      << " (outer, r, inner) = (" << t.outer << ", " << t.r << ", " << t.inner << ")";
    if (t.fold > 1) s << " with the last " << t.fold << " of each inner row reduced too (two runs of reduced dims in one pass)";
  }
  if (steps.size() > 1) s << " (one step per run of reduced dims in memory, each reading the last one's output)";
  if (permuted_out) s << "; the kept dims lie in another order in memory: the result is permuted into place (a copy of the output)";
  return s.str();
}

namespace {

StencilLayoutPlan logical_stencil(const std::vector<int64_t>& sizes, int first, int last, int ry, int rx, int esz,
                                  const char* why) {
  // Logical (batch, ny, nx) of x.contiguous(): dims [first, last] filtered, the rest outer or inner.
  StencilLayoutPlan p;
  p.copy = true;
  p.why = why;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < first; ++d) outer *= sizes[static_cast<size_t>(d)];
  for (int d = last + 1; d < static_cast<int>(sizes.size()); ++d) inner *= sizes[static_cast<size_t>(d)];
  if (first == last) {  // stencil1d: rows (the inner dims a step within them when narrow), or planes
    const int64_t n = sizes[static_cast<size_t>(first)];
    if (inner * esz < kMinPlaneRowBytes) { p.batch = 1; p.ny = outer; p.nx = n * inner; p.step = inner; p.ry = 0; p.rx = ry; }
    else { p.batch = outer; p.ny = n; p.nx = inner; p.ry = ry; p.rx = 0; }
  } else {
    p.batch = outer; p.ny = sizes[static_cast<size_t>(first)]; p.nx = sizes[static_cast<size_t>(last)];
    p.ry = ry; p.rx = rx;
  }
  return p;
}

constexpr const char* kNotDense =
    "x is not dense (gaps, overlaps or zero strides): the kernels read a contiguous copy";

// Folds a batch dim lying innermost (stride 1) right inside the plane's x dim into x's rows, when
// x's stride is the batch's extent (rows without gaps) and a point's values span fewer than
// `below` bytes: rows of (x, batch), taps a step of the batch's extent apart. Returns the step
// (1: nothing folded).
int64_t fold_inner_batch(MemLayout& L, int esz, int64_t below) {
  const size_t n = L.dims.size();
  if (n < 2) return 1;
  MemDim &x = L.dims[n - 2], &b = L.dims[n - 1];
  if (b.mark != 0 || x.mark == 0 || b.stride != 1 || x.stride != b.size || b.size * esz >= below) return 1;
  const int64_t step = b.size;
  x.size *= step;
  x.stride = 1;
  x.dims.insert(x.dims.end(), b.dims.begin(), b.dims.end());
  L.dims.pop_back();
  return step;
}

// A non-dense x whose memory still holds the kernels' planes as pitched rows: the innermost memory
// dim (stride 1) is the plane's x, the next its y (any positive stride), and the rest merge into
// one batch dim of positive stride. `inner_mark`, `outer_mark`: the marks x and y must have.
bool pitched_planes(const MemLayout& L, int inner_mark, int outer_mark, StencilLayoutPlan& p) {
  const size_t n = L.dims.size();
  if (n < 2 || n > 3) return false;
  const MemDim &dx = L.dims[n - 1], &dy = L.dims[n - 2];
  if (dx.mark != inner_mark || dy.mark != outer_mark || dx.stride != 1 || dy.stride <= 0) return false;
  if (n == 3 && (L.dims[0].mark != 0 || L.dims[0].stride <= 0)) return false;
  p.copy = false;
  p.batch = n == 3 ? L.dims[0].size : 1;
  p.ny = dy.size;
  p.nx = dx.size;
  p.xs_row = dy.stride;
  p.xs_plane = n == 3 ? L.dims[0].stride : dy.stride * dy.size;
  return true;
}

}  // namespace

std::string StencilLayoutPlan::describe() const {
  std::ostringstream s;
  s << why << "; (batch, ny, nx) = (" << batch << ", " << ny << ", " << nx << "), window (" << 2 * ry + 1
    << ", " << 2 * rx + 1 << ")";
  if (step > 1) s << ", taps " << step << " elements apart (" << nx / step << " points a row)";
  if (xs_row != 0) s << ", row stride " << xs_row << ", plane stride " << xs_plane;
  return s.str();
}

StencilLayoutPlan plan_stencil1d_layout(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                                        int dim, int r, int esz) {
  if (sizes[static_cast<size_t>(dim)] == 1)
    return logical_stencil(sizes, dim, dim, r, 0, esz, "the filtered dim has size 1: x read in logical order");
  std::vector<int> marks(sizes.size(), 0);
  marks[static_cast<size_t>(dim)] = 1;
  MemLayout L = memory_layout(sizes, strides, marks);
  // Inner dims narrower than a useful plane row fold into the filtered dim's rows.
  const int64_t step = fold_inner_batch(L, esz, kMinPlaneRowBytes);
  if (!L.dense) {
    StencilLayoutPlan p;
    p.rx = r;
    p.step = step;
    if (pitched_planes(L, 1, 0, p)) {  // rows along the filtered dim, a pitch apart
      p.why = step > 1 ? "the kernels read x's memory in place: rows along the filtered dim, a pitch apart, the "
                         "dims inside it a step within the rows"
                       : "the kernels read x's memory in place: rows along the filtered dim, a pitch apart";
      return p;
    }
    p = StencilLayoutPlan{};
    p.ry = r;
    if (step == 1 && pitched_planes(L, 0, 1, p)) {
      p.why = "the kernels read x's memory in place: planes (the filtered dim, the dims inside), pitched";
      return p;
    }
    return logical_stencil(sizes, dim, dim, r, 0, esz, kNotDense);
  }
  size_t j = 0;
  while (L.dims[j].mark != 1) ++j;
  StencilLayoutPlan p;
  const int64_t outer = product(L.dims, 0, j), n = L.dims[j].size, inner = product(L.dims, j + 1, L.dims.size());
  if (inner == 1) { p.batch = 1; p.ny = outer; p.nx = n; p.ry = 0; p.rx = r; p.step = step; }
  else { p.batch = outer; p.ny = n; p.nx = inner; p.ry = r; p.rx = 0; }
  p.why = step > 1    ? "the kernels read x's memory in place: rows along the filtered dim, the dims inside it a "
                        "step within the rows"
          : inner == 1 ? "the kernels read x's memory in place: rows along the filtered dim"
                       : "the kernels read x's memory in place: planes (dims outside, the filtered dim, dims inside)";
  return p;
}

StencilLayoutPlan plan_stencil2d_layout(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                                        int ry, int rx, int esz) {
  const int nd = static_cast<int>(sizes.size());
  const int h = nd - 2, w = nd - 1;
  if (sizes[static_cast<size_t>(h)] == 1 || sizes[static_cast<size_t>(w)] == 1)
    return logical_stencil(sizes, h, w, ry, rx, esz, "a plane dim has size 1: x read in logical order");
  std::vector<int> marks(sizes.size(), 0);
  marks[static_cast<size_t>(h)] = 1;
  marks[static_cast<size_t>(w)] = 2;
  MemLayout L = memory_layout(sizes, strides, marks);
  // A batch dim innermost (channels_last's C) folds into the rows of the plane dim outside it.
  const int64_t step = fold_inner_batch(L, esz, kMaxStepBytes + 1);
  if (!L.dense) {
    StencilLayoutPlan p;
    p.ry = ry; p.rx = rx; p.step = step;
    if (pitched_planes(L, 2, 1, p)) {
      p.why = step > 1 ? "the kernels read x's memory in place: planes whose rows lie a pitch apart, a batch dim "
                         "inside W (as in channels_last) a step within the rows"
                       : "the kernels read x's memory in place: planes whose rows lie a pitch apart";
      return p;
    }
    p.ry = rx; p.rx = ry;
    if (pitched_planes(L, 1, 2, p)) {
      p.transposed = true;
      p.why = step > 1 ? "the kernels read x's memory in place: planes whose rows lie a pitch apart, transposed (W "
                         "outside H), a batch dim inside H a step within the rows; the weights transposed"
                       : "the kernels read x's memory in place: planes whose rows lie a pitch apart, transposed (W "
                         "outside H), filtered with the weights transposed";
      return p;
    }
    return logical_stencil(sizes, h, w, ry, rx, esz, kNotDense);
  }
  const size_t n = L.dims.size();
  if (L.dims[n - 1].mark == 0 || L.dims[n - 2].mark == 0)
    return logical_stencil(sizes, h, w, ry, rx, esz,
                           "a batch dim lies between the plane's dims in memory, or inside them with more than "
                           "kMaxStepBytes a point: the kernels read a contiguous copy, and the result is copied "
                           "into x's layout");
  StencilLayoutPlan p;
  p.transposed = L.dims[n - 1].mark == 1;
  p.batch = product(L.dims, 0, n - 2);
  p.ny = L.dims[n - 2].size;
  p.nx = L.dims[n - 1].size;
  p.step = step;
  p.ry = p.transposed ? rx : ry;
  p.rx = p.transposed ? ry : rx;
  p.why = step > 1 ? (p.transposed ? "the kernels read x's memory in place: the plane lies transposed (W outside H) "
                                     "with a batch dim inside it (a step within the rows); the weights transposed"
                                   : "the kernels read x's memory in place: a batch dim inside the plane's rows (as "
                                     "in channels_last) is a step within them")
          : p.transposed ? "the kernels read x's memory in place: the plane lies transposed (W outside H), so "
                           "they filter it with the weights transposed"
                         : "the kernels read x's memory in place";
  return p;
}

}  // namespace ops
}  // namespace cupipe
