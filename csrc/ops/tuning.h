// What "auto" (mechanism="auto", stages=0 / vec_bytes=0) resolves to on CUDA: a small table read
// off this project's own measurements (docs/design.md); explicit arguments always win. The CUDA
// ops and cupipe.explain / cupipe.tune (through cupipe._C) all resolve through this file.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ops/args.h"

namespace cupipe {
namespace ops {

struct CopyConfig {
  engine::Mechanism mechanism = engine::Mechanism::Sync;
  int stages = 2;
  int vec_bytes = 16;
  // Stencils: grids of about ntiles / tiles_per_block blocks (at least one wave), the block
  // scheduler balancing the SMs; 0: one wave of persistent blocks. Only with the table's own
  // mechanism and stages (an explicit other choice runs persistent).
  int tiles_per_block = 0;
  // Why the table makes its own choice for this case (kept when explicit arguments override it):
  // what cupipe.explain reports.
  const char* why = "";
};

CopyConfig resolve_stream_copy(const DeviceInfo& dev, MechanismArg mech, int64_t stages,
                               int64_t vec_bytes, int64_t bytes);
CopyConfig resolve_stencil(const DeviceInfo& dev, MechanismArg mech, int64_t stages,
                           const StencilGeometry& g);
CopyConfig resolve_stencil3d(const DeviceInfo& dev, MechanismArg mech, int64_t stages);
// steps=k of stencil1d/stencil2d where the fused kernel runs (stencil_steps_per_pass > 1).
CopyConfig resolve_stencil_steps(const DeviceInfo& dev, MechanismArg mech, int64_t stages);
// Whether an (outer, r, inner) view's reduced rows (inner 1) or columns start on 16-byte boundaries: x
// aligned (`aligned`) and whole 16-byte vectors a row (columns: inner's; rows: r's, or one row).
inline bool reduce_rows16(int64_t outer, int64_t r, int64_t inner, int esz, bool aligned) {
  return aligned && (inner > 1 ? inner * esz % 16 == 0 : outer == 1 || r * esz % 16 == 0);
}
// Whether narrow columns wrap into 16-byte vectors (cols_direct_wrap, launch_plan.cuh): rows under 16 bytes
// that divide 16, each outer slice's rows whole vectors from an aligned x.
inline bool reduce_wraps(int64_t r, int64_t inner, int esz, bool aligned) {
  const int64_t row = inner * esz;
  return aligned && inner > 1 && row < 16 && 16 % row == 0 && r * row % 16 == 0;
}
// Whether narrow columns that do not wrap read as one 8- or 4-byte vector a row
// (cols_direct_narrow, launch_plan.cuh): rows of 4 or 8 bytes, x aligned to a row (align: the largest
// power of two up to 16 dividing x's address).
inline bool reduce_narrow(int64_t r, int64_t inner, int esz, int align) {
  const int64_t row = inner * esz;
  return inner > 1 && (row == 8 || row == 4) && align >= row && !reduce_wraps(r, inner, esz, align >= 16);
}
// x's address alignment for the above: its largest power-of-two divisor, up to 16.
inline int address_alignment(uintptr_t a) { return a % 16 == 0 ? 16 : static_cast<int>(a & (~a + 1)); }
// The rows16 resolve_reduce takes for a step: narrow columns count, wrapped or read a row a vector
// (every kind has both kernels).
inline bool reduce_step_rows16(int64_t outer, int64_t r, int64_t inner, int esz, int align) {
  return reduce_rows16(outer, r, inner, esz, align >= 16) || reduce_wraps(r, inner, esz, align >= 16) ||
         reduce_narrow(r, inner, esz, align);
}
// rows16: reduce_rows16 of the view. folded: a step of two runs of reduced dims (ReduceStep::fold),
// which the state kinds run only on their direct column kernel.
CopyConfig resolve_reduce(const DeviceInfo& dev, MechanismArg mech, int64_t stages, int64_t outer,
                          int64_t r, int64_t inner, int esz, ReduceOp op = ReduceOp::Sum, bool rows16 = false,
                          bool folded = false);

// The ops whose knobs the table resolves, by their public names.
std::vector<std::string> tuned_op_names();

// What the table reads of one call: reduce's (outer, r, inner) view, the stencils' radii as the
// kernels see them (ry along the rows, rx along the last dim), the element size the kernels read
// rows16 and the stencils' step. Unused fields keep their defaults.
struct TableShape {
  int64_t outer = 1, r = 1, inner = 1;
  int ry = 0, rx = 0;
  int rz = 0;  // stencil3d's depth radius (0: it runs as stencil2d, whose table then applies)
  int esz = 4;
  ReduceOp reduce_op = ReduceOp::Sum;
  bool rows16 = false;
  int64_t fold = 1;  // reduce: the first step's fold (ops/layout.h)
  int64_t step = 1;  // stencils: elements between x taps (StencilGeometry::step)
  int64_t steps = 1;  // stencil1d/stencil2d's steps=k: the fused kernel's choice where one runs
  std::string layout;  // the layout plan in words (ops/layout.h), for explain
};

// The TableShape of `op` called on x with these arguments, derived (and checked) as the op
// derives it; reads only metadata (fake tensors work). `dim`: stencil1d's one dim, or reduce's
// dims (nullopt: all).
TableShape table_shape(const std::string& op, const at::Tensor& x, const std::optional<at::Tensor>& weights,
                       const std::optional<std::vector<int64_t>>& dim, const std::string& boundary,
                       const std::string& reduce_op, std::optional<at::ScalarType> dtype, bool direct = true);

// resolve_* of `op` by name, for a device whose kernels run as `sm` (DeviceInfo::code_sm).
CopyConfig resolve_op(const std::string& op, int sm, MechanismArg mech, int64_t stages, int64_t vec_bytes,
                      const TableShape& shape);

}  // namespace ops
}  // namespace cupipe
