#include "ops/tuning.h"

// Each choice's `why` is what cupipe.explain prints; the measurements behind the choices (runs,
// shapes, timings) are in docs/design.md.

namespace cupipe {
namespace ops {

namespace {

CopyConfig apply_explicit(CopyConfig best, MechanismArg mech, int64_t stages, int64_t vec_bytes) {
  const CopyConfig table = best;
  if (!mech.is_auto) best.mechanism = mech.mechanism;
  if (stages > 0) best.stages = static_cast<int>(stages);
  if (vec_bytes > 0) best.vec_bytes = static_cast<int>(vec_bytes);
  // The grid policy was measured with the table's mechanism and stages only.
  if (best.mechanism != table.mechanism || best.stages != table.stages) best.tiles_per_block = 0;
  return best;
}

CopyConfig choice(engine::Mechanism m, int stages, const char* why, int tiles_per_block = 0) {
  CopyConfig c;
  c.mechanism = m;
  c.stages = stages;
  c.why = why;
  c.tiles_per_block = tiles_per_block;
  return c;
}

using engine::Mechanism;

void unknown_op(const std::string& op) {  // throws
  TORCH_CHECK_VALUE(false, "cupipe: unknown op '", op, "'; expected one of ", join_names(tuned_op_names()));
}

// ----------------------------------------------------------------------------- stream_copy

constexpr const char* kCopySync =
    "sync with one stage (measured on an H200): the grid's short-lived blocks keep the whole "
    "device busy, so plain loads already keep enough bytes in flight and a second stage only adds "
    "a wait";
constexpr const char* kCopyBeforeSm90 =
    "before sm_90 the table takes the LDGSTS path (primitives, 2 stages), which needs no Hopper "
    "instructions (not measured there)";

// ----------------------------------------------------------------------------- stencils

constexpr const char* kStencilBeforeSm90 =
    "before sm_90 the table takes primitives with 2 stages (LDGSTS, zero-filled tails), which needs "
    "no Hopper instructions (not measured per shape there)";
constexpr const char* kStencilRowBarrier =
    "along the last dim on sm_90, 4- and 8-byte types: barrier with 2 stages moves rows as 16-byte "
    "aligned bulk copies, ahead of specialized and primitives (measured on an H200); fp32 runs "
    "about two tiles per block, so the block scheduler fills SMs as they free up";
constexpr const char* kStencilRowTma =
    "2-byte signals along the last dim on sm_90: tma with 2 stages, one bulk copy per 32 KiB tile, "
    "ahead of barrier and specialized (measured on an H200)";
constexpr const char* kStencilBox2Byte =
    "2-D boxes of 2-byte types on sm_90 whose rows are whole 16-byte multiples from an aligned "
    "pointer (or, zero boundary, 8 bytes off it inside x's storage: a map from 8 bytes before x): "
    "tma with 2 stages moves each tile as one tensor-map box, the copy engine zero-filling "
    "what lies outside the plane (measured on an H200); 3x3 and 5-point boxes take 32 x 256 tiles, "
    "one per block, boxes of 5-9 tap rows the narrow tensor-core kernels";
constexpr const char* kStencilBoxWideFp32 =
    "fp32 boxes wider than 5 on sm_90 whose rows are whole 16-byte multiples from an aligned "
    "pointer: tma with 2 stages moves each tile as one tensor-map box, no per-thread address "
    "arithmetic, ahead of primitives (measured on an H200)";
constexpr const char* kStencilBoxNarrowFp32 =
    "fp32 3x3 and 5x5 boxes on sm_90 whose rows are whole 16-byte multiples from an aligned "
    "pointer: tma with 2 stages runs the narrow kernels (128-thread blocks on tensor-map boxes), "
    "one tile per block for 3x3 and two for 5x5 (measured on an H200)";
constexpr const char* kStencilBoxPrimitives =
    "2-D boxes the tensor-map tiles do not take on sm_90 (rows not whole 16-byte multiples from an "
    "aligned pointer, fp64, fp32 boxes of unequal radii at most 5 wide): primitives with 2 stages, "
    "its loader shared by every thread (measured on an H200); fp32 3x3 and 5-point boxes run about "
    "two tiles per block";
constexpr const char* kStencilSteppedBox =
    "2-D boxes with taps a step apart (a batch dim inside the rows, as channels_last's C) on sm_90: "
    "points of up to 64 bytes (128 for the 2-byte types, whose tiles of such points are 8 halos across) "
    "from rows of whole 16-byte multiples take tma with 2 stages (tiles narrow enough to be one "
    "tensor-map box), wider points primitives with one stage (measured on an H200)";
constexpr const char* kStencilSteppedRow =
    "stencil1d with taps a step apart (the filtered dim's narrow inner dims inside the rows) on sm_90: "
    "barrier with one stage, within a few percent of tma and primitives (measured on an H200)";
constexpr const char* kStencilStrided =
    "stencils along a strided dim (a window along the rows only): primitives with 2 stages, the "
    "table's general choice";
constexpr const char* kStencilStrided2Byte =
    "2-byte stencils along a strided dim on sm_90 whose rows are whole 16-byte multiples from an "
    "aligned pointer (or, zero boundary, 8 bytes off it inside x's storage): tma with 2 stages "
    "moves each tile as one tensor-map box, ahead of primitives (measured on an H200; fp32 runs alike either way and keeps the general choice)";
constexpr const char* kStencilPoint = "a 1x1 window (no halo): primitives with 2 stages, the table's general choice";

// ----------------------------------------------------------------------------- reduce

constexpr const char* kReduceColumnsTma =
    "columns on sm_90 whose rows are 4 KiB or more and a multiple of 128 bytes (each tile row lands "
    "at its source's offset modulo 128): tma with three 32 KiB stages, two blocks an SM, ahead of "
    "tma with 1, 2 or 4 stages and of primitives (measured on an H200 over the layout sweep's columns)";
constexpr const char* kReduceNarrowColumns =
    "columns on sm_90 whose rows are under 4 KiB (a tile is one contiguous copy of whole rows, the "
    "blocks persistent over the outer slices): tma with one 64 KiB stage, which fits three blocks "
    "per SM, ahead of primitives and of deeper rings (measured on an H200)";
constexpr const char* kReduceColumns =
    "columns (kept dims after the reduced ones): primitives with one 64 KiB stage, three blocks an "
    "SM, chunks up to 16 KiB wide (measured on an H200: twice as fast as 2 stages where the rows are "
    "not a multiple of 128 bytes); on sm_90, rows under 4 KiB, or of 4 KiB or more in multiples of "
    "128 bytes, take tma";
// sync's loads in flight a thread on direct columns: 3 stages, 16 (cols_direct_loads).
constexpr int kReduceColumnsDirectStages = 3;
constexpr const char* kReduceColumnsDirect =
    "columns on sm_90 whose rows start on 16-byte boundaries (or, narrower, wrap into 16-byte vectors, or are "
    "one 8- or 4-byte vector each: reduce_cols_narrow_kernel): sync "
    "with 3 stages, which reads them straight "
    "into registers, 16 loads in flight a thread (8 where the grid is over a wave) and no ring "
    "(reduce_cols_direct_kernel), ahead of the tma and primitives rings on 48 of the layout sweep's 51 "
    "aligned column shapes (measured on an H200)";
constexpr const char* kReduceMidRows =
    "rows of 4-32 KiB along the innermost dim: primitives with 1 stage (measured on an H200); a "
    "block holds a tile or two, so there is little to overlap, and one stage fits twice the blocks";
constexpr const char* kReduceRowsTma =
    "along the innermost dim on sm_90 (a whole tensor, short or long rows): tma with one 32 KiB "
    "stage, ahead of primitives with 2 (measured on an H200): one bulk copy per tile, issued by one "
    "thread, leaves the block's threads to the fold";
constexpr const char* kReduceStateRowsTma =
    "var, std, argmax, argmin, logsumexp and norm along the innermost dim on sm_90, rows under 64 bytes or "
    "not on 16-byte boundaries: the state kernel under tma with two 32 KiB stages, three blocks a SM "
    "(measured on an H200 against 1-4 stages and primitives: docs/design.md)";
// The state ops' direct row kernel: 4 loads in flight a thread (1 stage), from rows of 64 bytes; rows of one or two
// vectors stream through the tma ring, ahead of it there (docs/design.md §5.1).
constexpr int kStateRowsDirectStages = 1;
constexpr int64_t kStateRowsDirectMinBytes = 64;
constexpr const char* kReduceStateRowsDirect =
    "var, std, argmax, argmin, logsumexp and norm along the innermost dim on sm_90, rows of 64 bytes or more "
    "that start on 16-byte boundaries: the state kernel that reads them straight into registers "
    "(reduce_state_rows_direct_kernel) under sync, 4 loads in flight a thread and no ring (measured on an H200 "
    "against the tma ring and 8 or 16 loads)";
constexpr const char* kReduceStateTma =
    "var, std, argmax, argmin, logsumexp and norm over columns on sm_90: the state kernel under tma with "
    "one 32 KiB stage and four blocks a SM (measured on an H200 against 2-4 stages and primitives)";
// sync's loads in flight a thread for the state ops on direct columns: 4 (1 stage) for 2-byte types, whose
// eight column states a thread leave fewer registers to loads, 8 (2 stages) for wider ones.
inline int state_columns_direct_stages(int esz) { return esz == 2 ? 1 : 2; }
constexpr const char* kReduceStateColumnsDirect =
    "var, std, argmax, argmin, logsumexp and norm over columns on sm_90 whose rows start on 16-byte boundaries "
    "(or, narrower, wrap into 16-byte vectors: reduce_state_cols_wrap_kernel, or are one 8- or 4-byte vector "
    "each: reduce_state_cols_narrow_kernel): the state kernel that reads them "
    "straight into registers (reduce_state_cols_direct_kernel) under sync, one "
    "stage (4 loads in flight a thread) for 2-byte types and two (8) for wider types, ahead of the tma ring "
    "(measured on an H200)";
constexpr const char* kReduceStateFolded =
    "var, std, logsumexp and norm over two runs of reduced dims, the inner one innermost in memory (one folded "
    "step): the direct state kernel that folds them (reduce_state_cols_fold_kernel), reading columns straight "
    "into registers under sync; any other kernel would copy x first";
constexpr const char* kReduceStateBeforeSm90 =
    "var, std, argmax, argmin, logsumexp and norm before sm_90: the state kernel under primitives with 2 "
    "stages (the LDGSTS path; not measured on older GPUs)";
constexpr const char* kReduceRowsBeforeSm90 =
    "along the innermost dim before sm_90: primitives with 2 stages of 32 KiB (the LDGSTS path), "
    "which led the innermost-dim cases on sm_90 before tma (not measured on older GPUs)";

}  // namespace

// Plain loads already saturate the copy on sm_90; older GPUs take the LDGSTS path.
CopyConfig resolve_stream_copy(const DeviceInfo& dev, MechanismArg mech, int64_t stages,
                               int64_t vec_bytes, int64_t /*bytes*/) {
  CopyConfig best = dev.code_sm >= 90 ? choice(Mechanism::Sync, 1, kCopySync)
                                      : choice(Mechanism::Primitives, 2, kCopyBeforeSm90);
  best.vec_bytes = 16;
  return apply_explicit(best, mech, stages, vec_bytes);
}

constexpr const char* kStencil3d =
    "3-D stencils on sm_90: tma with 3 stages (one tensor-map box a plane tile, issued by one thread; "
    "fastest of tma, primitives and specialized at 2-4 stages for 512^3 7- and 27-point stencils)";
constexpr const char* kStencil3dBeforeSm90 =
    "3-D stencils before sm_90: primitives with 3 stages (no Hopper instructions; not measured there)";
constexpr const char* kStencilSteps =
    "fused steps on sm_90: tma with 3 stages (the register pipeline is arithmetic-bound at k >= 4; "
    "a stage is a few window rows, one tensor-map box where the rows allow)";
constexpr const char* kStencilStepsBeforeSm90 =
    "fused steps before sm_90: primitives with 3 stages (no Hopper instructions; not measured there)";

namespace {
// The streaming stencil kernels (stencil3d, fused steps): tma/3 on sm_90, primitives/3 before.
CopyConfig streaming_choice(const DeviceInfo& dev, MechanismArg mech, int64_t stages, const char* why_sm90,
                            const char* why_before) {
  const CopyConfig best = dev.code_sm >= 90 ? choice(Mechanism::Tma, 3, why_sm90)
                                            : choice(Mechanism::Primitives, 3, why_before);
  return apply_explicit(best, mech, stages, 0);
}
}  // namespace

CopyConfig resolve_stencil3d(const DeviceInfo& dev, MechanismArg mech, int64_t stages) {
  return streaming_choice(dev, mech, stages, kStencil3d, kStencil3dBeforeSm90);
}

CopyConfig resolve_stencil_steps(const DeviceInfo& dev, MechanismArg mech, int64_t stages) {
  return streaming_choice(dev, mech, stages, kStencilSteps, kStencilStepsBeforeSm90);
}

// sm_90: bulk copies along the last dim, tensor-map boxes where the rows allow them (rows16),
// primitives elsewhere; tiles_per_block where short-lived blocks beat one persistent wave.
CopyConfig resolve_stencil(const DeviceInfo& dev, MechanismArg mech, int64_t stages, const StencilGeometry& g) {
  CopyConfig best;
  if (dev.code_sm < 90) {
    best = choice(Mechanism::Primitives, 2, kStencilBeforeSm90);
  } else if (g.step > 1 && g.rx > 0 && g.ry == 0) {
    best = choice(Mechanism::Barrier, 1, kStencilSteppedRow);
  } else if (g.step > 1 && g.rx > 0) {
    const int64_t boxed_point_bytes = g.esz == 2 ? 128 : 64;
    best = g.rows16 && g.step * g.esz <= boxed_point_bytes ? choice(Mechanism::Tma, 2, kStencilSteppedBox)
                                                           : choice(Mechanism::Primitives, 1, kStencilSteppedBox);
  } else if (g.ry == 0 && g.rx > 0) {  // along the last dim only: the row kernel
    best = g.esz == 2 ? choice(Mechanism::Tma, 2, kStencilRowTma)
                      : choice(Mechanism::Barrier, 2, kStencilRowBarrier, g.esz == 4 ? 2 : 0);
  } else if (g.ry > 0 && g.rx > 0) {   // 2-D boxes
    if (g.rows16 && g.esz == 2) {
      best = choice(Mechanism::Tma, 2, kStencilBox2Byte, g.rx == 1 && g.ry == 1 ? 1 : 0);
    } else if (g.rows16 && g.esz == 4 && g.rx > 2) {
      best = choice(Mechanism::Tma, 2, kStencilBoxWideFp32);
    } else if (g.rows16 && g.esz == 4 && g.ry == g.rx) {  // 3x3 and 5x5: the narrow kernels
      best = choice(Mechanism::Tma, 2, kStencilBoxNarrowFp32, g.rx == 1 ? 1 : 2);
    } else {
      best = choice(Mechanism::Primitives, 2, kStencilBoxPrimitives, g.esz == 4 && g.ry == 1 && g.rx == 1 ? 2 : 0);
    }
  } else if (g.ry > 0 && g.rows16 && g.esz == 2) {  // along a strided dim only
    best = choice(Mechanism::Tma, 2, kStencilStrided2Byte);
  } else {
    best = choice(Mechanism::Primitives, 2, g.ry > 0 ? kStencilStrided : kStencilPoint);
  }
  return apply_explicit(best, mech, stages, 0);
}

// State ops on sm_90: sync/1 (the direct state kernel) along aligned rows of 64 bytes or more, else tma/2 along
// the innermost dim; sync/1 or sync/2 (the direct state kernel) on aligned columns,
// else tma/1; primitives/2 before sm_90.
// Columns: primitives/1; on sm_90 sync/3 (the direct kernel) from a 16-byte aligned x in rows of 16-byte multiples, else
// tma/1 for rows under 4 KiB, tma/3 for congruent rows of 4 KiB or more; innermost rows of 4-32 KiB one stage; other
// innermost reductions tma/1 on sm_90, primitives/2 before it.
CopyConfig resolve_reduce(const DeviceInfo& dev, MechanismArg mech, int64_t stages, int64_t outer,
                          int64_t r, int64_t inner, int esz, ReduceOp op, bool rows16, bool folded) {
  CopyConfig best;
  const int64_t row_bytes = r * esz;
  const int64_t col_row_bytes = inner * esz;
  if (is_state_op(op) && folded) {
    best = choice(Mechanism::Sync, state_columns_direct_stages(esz), kReduceStateFolded);
  } else if (is_state_op(op)) {
    best = dev.code_sm < 90 ? choice(Mechanism::Primitives, 2, kReduceStateBeforeSm90)
           : inner == 1 && rows16 && r * esz >= kStateRowsDirectMinBytes
               ? choice(Mechanism::Sync, kStateRowsDirectStages, kReduceStateRowsDirect)
           : inner == 1 ? choice(Mechanism::Tma, 2, kReduceStateRowsTma)
           : rows16
               ? choice(Mechanism::Sync, state_columns_direct_stages(esz), kReduceStateColumnsDirect)
               : choice(Mechanism::Tma, 1, kReduceStateTma);
  } else if (inner > 1 && dev.code_sm >= 90 && rows16) {
    best = choice(Mechanism::Sync, kReduceColumnsDirectStages, kReduceColumnsDirect);
  } else if (inner > 1) {
    best = dev.code_sm >= 90 && col_row_bytes < 4096                             ? choice(Mechanism::Tma, 1, kReduceNarrowColumns)
           : dev.code_sm >= 90 && col_row_bytes >= 4096 && col_row_bytes % 128 == 0 ? choice(Mechanism::Tma, 3, kReduceColumnsTma)
                                                                                  : choice(Mechanism::Primitives, 1, kReduceColumns);
  } else if (row_bytes > 4096 && row_bytes <= 32768) {
    best = choice(Mechanism::Primitives, 1, kReduceMidRows);
  } else if (dev.code_sm >= 90) {
    best = choice(Mechanism::Tma, 1, kReduceRowsTma);
  } else {
    best = choice(Mechanism::Primitives, 2, kReduceRowsBeforeSm90);
  }
  return apply_explicit(best, mech, stages, 0);
}

std::vector<std::string> tuned_op_names() { return {"stream_copy", "stencil1d", "stencil2d", "stencil3d", "reduce"}; }

TableShape table_shape(const std::string& op, const at::Tensor& x, const std::optional<at::Tensor>& weights,
                       const std::optional<std::vector<int64_t>>& dim, const std::string& boundary,
                       const std::string& reduce_op, std::optional<at::ScalarType> dtype, bool direct) {
  TableShape s;
  s.esz = static_cast<int>(x.element_size());
  if (op == "stencil1d" || op == "stencil2d") {
    TORCH_CHECK_VALUE(weights.has_value(), "cupipe.", op, ": weights are required");
    StencilGeometry g;
    if (op == "stencil1d") {
      TORCH_CHECK_VALUE(dim.has_value() && dim->size() == 1, "cupipe.stencil1d: dim must be one int");
      int64_t d = (*dim)[0];
      g = check_stencil1d(x, *weights, d, parse_boundary("stencil1d", boundary));
      if (x.numel() > 0) g = stencil_memory_geometry(x, g, d, &s.layout);
    } else {
      g = check_stencil2d(x, *weights, parse_boundary("stencil2d", boundary));
      if (x.numel() > 0) g = stencil_memory_geometry(x, g, std::nullopt, &s.layout);
    }
    if (x.numel() == 0) s.layout = "x is empty: nothing runs";
    s.ry = g.ry;
    s.rx = g.rx;
    s.esz = g.esz;
    s.rows16 = rows16_of(x, g, parse_boundary(op.c_str(), boundary));
    s.step = g.step;
  } else if (op == "stencil3d") {
    TORCH_CHECK_VALUE(weights.has_value(), "cupipe.stencil3d: weights are required");
    const Boundary b = parse_boundary("stencil3d", boundary);
    const Stencil3dGeometry g3 = check_stencil3d(x, *weights, b);
    s.rz = g3.rz;
    s.ry = g3.ry;
    s.rx = g3.rx;
    if (g3.rz == 0) {  // stencil2d over the planes, with its layout plan and table
      StencilGeometry g = check_stencil2d(x, weights->select(0, 0), b);
      if (x.numel() > 0) g = stencil_memory_geometry(x, g, std::nullopt, &s.layout);
      s.rows16 = rows16_of(x, g, b);
      s.step = g.step;
      s.layout = "a depth radius of 0: stencil2d over the (..., D) planes; " + s.layout;
    } else {
      s.layout = x.is_contiguous() ? "the kernels read x's volumes in place"
                                   : "x is not contiguous: the kernels read x.contiguous()";
    }
    if (x.numel() == 0) s.layout = "x is empty: nothing runs";
  } else if (op == "reduce") {
    const ReducePlan plan =
        check_reduce(x, reduce_op, dim ? at::OptionalIntArrayRef(*dim) : at::OptionalIntArrayRef(), false, dtype);
    // The first step's view: it reads x, the others its far smaller output.
    const ReduceLayoutPlan lp = x.numel() > 0 ? reduce_layout(x, plan, direct) : ReduceLayoutPlan{};
    const ReduceStep v = x.numel() > 0 ? lp.steps.front() : ReduceStep{plan.numel_kept, plan.numel_reduced, 1};
    s.layout = x.numel() > 0 ? lp.describe() : "x is empty: the result is filled (sum 0, mean nan)";
    s.outer = v.outer;
    s.r = v.r;
    s.inner = v.inner;
    s.fold = v.fold;
    if (x.numel() > 0 && reduce_copies_rows(x, plan, lp)) {
      s.outer = plan.numel_kept, s.r = plan.numel_reduced, s.inner = 1, s.fold = 1;  // run_reduce's copy (args.h)
      s.layout = "x's kept dims, then its reduced dims, copied contiguous (a state reduction runs in one step): "
                 "rows (outer, r, inner) = (" + std::to_string(s.outer) + ", " + std::to_string(s.r) + ", 1)";
    }
    s.esz = reduce_kernel_esz(x, plan);
    s.reduce_op = plan.op;
    // The first step reads x in place (its offset decides the alignment) or a fresh copy.
    s.rows16 = reduce_step_rows16(
        s.outer, s.r, s.inner, s.esz,
        x.numel() == 0 || s.esz != static_cast<int>(x.element_size())
            ? 16
            : address_alignment(static_cast<uintptr_t>(x.storage_offset()) * static_cast<uintptr_t>(s.esz)));
  } else if (op == "stream_copy") {
    s.layout = x.is_contiguous() ? "the kernels copy x's bytes in place"
                                 : "x is not contiguous: the kernels copy x.contiguous()";
  } else {
    unknown_op(op);
  }
  return s;
}

CopyConfig resolve_op(const std::string& op, int sm, MechanismArg mech, int64_t stages, int64_t vec_bytes,
                      const TableShape& shape) {
  DeviceInfo dev;
  dev.sm = sm;
  dev.code_sm = sm;
  if (op == "stream_copy") return resolve_stream_copy(dev, mech, stages, vec_bytes, 0);
  if (op == "stencil3d" && shape.rz > 0) return resolve_stencil3d(dev, mech, stages);
  if ((op == "stencil1d" || op == "stencil2d") && shape.steps > 1 &&
      stencil_steps_per_pass(shape.ry, shape.rx, shape.esz, shape.step) > 1)
    return resolve_stencil_steps(dev, mech, stages);
  if (op == "stencil1d" || op == "stencil2d" || op == "stencil3d") {  // stencil3d with rz = 0 runs as stencil2d
    StencilGeometry g;
    g.ry = shape.ry;
    g.rx = shape.rx;
    g.esz = shape.esz;
    g.rows16 = shape.rows16;
    g.step = shape.step;
    return resolve_stencil(dev, mech, stages, g);
  }
  if (op != "reduce") unknown_op(op);
  return resolve_reduce(dev, mech, stages, shape.outer, shape.r, shape.inner, shape.esz, shape.reduce_op, shape.rows16,
                        shape.fold > 1);
}

}  // namespace ops
}  // namespace cupipe
