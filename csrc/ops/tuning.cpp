#include "ops/tuning.h"

namespace cupipe {
namespace ops {

namespace {

CopyConfig apply_explicit(CopyConfig best, MechanismArg mech, int64_t stages, int64_t vec_bytes) {
  if (!mech.is_auto) best.mechanism = mech.mechanism;
  if (stages > 0) best.stages = static_cast<int>(stages);
  if (vec_bytes > 0) best.vec_bytes = static_cast<int>(vec_bytes);
  return best;
}

}  // namespace

// stream_copy, 2^28 fp32 on an H200 (BENCHMARKS.md, 2026-11-22, three runs): sync with 1-2
// stages was fastest (0.94-0.95x of y.copy_(x) in the third run), every other mechanism's best
// within 0.92-0.94x (0.88-0.91x before their stages grew to 32 KiB): for a pure copy with the
// whole device's occupancy, plain loads already keep enough bytes in flight. Older GPUs take the
// LDGSTS path, which needs no Hopper instructions.
CopyConfig resolve_stream_copy(const DeviceInfo& dev, MechanismArg mech, int64_t stages,
                               int64_t vec_bytes, int64_t /*bytes*/) {
  CopyConfig best;
  if (dev.sm >= 90) {
    best.mechanism = engine::Mechanism::Sync;
    best.stages = 2;
  } else {
    best.mechanism = engine::Mechanism::Primitives;
    best.stages = 4;
  }
  best.vec_bytes = 16;
  return apply_explicit(best, mech, stages, vec_bytes);
}

// Stencils on sm_90, from the H200 sweeps of scripts/stencil_sweep.py with the fixed consumers
// (BENCHMARKS.md, fourth run, 2026-11-23; two sweeps in one run, ms):
//   along the last dim only (ry == 0: 1-D signals, 1 x k windows; the Row kernel):
//     fp32 2^28 r=4: barrier/2 0.681, 0.621; specialized/2 0.701, 0.661; primitives/2 0.815, 0.764
//     fp16 2^28 r=4: specialized/2 0.430, 0.406; barrier/2 0.537, 0.462; primitives/2 0.561, 0.517
//   2-D boxes (both radii > 0), fp32 8192^2, specialized/2 against primitives/2:
//     5-point 0.181, 0.178 vs 0.202, 0.199; 5x5 0.233, 0.226 vs 0.278, 0.249; 9x9 0.431, 0.427
//     vs 0.466, 0.448; 3x3 0.229, 0.200 vs 0.217, 0.219 (a tie)
//   2-D fp16 3x3: primitives/2 0.183, 0.183 vs specialized/2 0.261, 0.261 (the 2-byte window is
//   half the bytes for the same consumer work, and one producer warp's copies do not keep up).
// barrier's rows are 16-byte aligned copies here, libcu++'s bulk path (synccheck-clean). fp64
// follows fp32 (4- and 8-byte types share the 16-byte consumer vectors). Stencils along a strided
// dim (rx == 0) and older GPUs: primitives, 2 stages (not measured per shape).
CopyConfig resolve_stencil(const DeviceInfo& dev, MechanismArg mech, int64_t stages, const StencilGeometry& g) {
  CopyConfig best;
  best.mechanism = engine::Mechanism::Primitives;
  best.stages = 2;
  if (dev.sm >= 90 && g.rx > 0) {
    if (g.ry == 0)
      best.mechanism = g.esz == 2 ? engine::Mechanism::Specialized : engine::Mechanism::Barrier;
    else if (g.esz != 2)
      best.mechanism = engine::Mechanism::Specialized;
  }
  return apply_explicit(best, mech, stages, 0);
}

// Reductions on an H200 (BENCHMARKS.md, 2026-11-22, third run; the stage-size sweep of
// scripts/profile_cases.py): along the innermost dim (whole tensor, short or long rows)
// primitives with 2 stages of 32 KiB led or tied every case (sum all 0.263 ms, rows (4194304, 64)
// 0.283, rows (8192, 32768) 0.257); columns ran fastest with primitives, 4 stages of 16 KiB
// (0.391 ms). Older GPUs take the same LDGSTS path (sm_80+), not yet measured there.
CopyConfig resolve_reduce(const DeviceInfo& /*dev*/, MechanismArg mech, int64_t stages, int64_t /*outer*/,
                          int64_t /*r*/, int64_t inner) {
  CopyConfig best;
  best.mechanism = engine::Mechanism::Primitives;
  best.stages = inner == 1 ? 2 : 4;
  return apply_explicit(best, mech, stages, 0);
}

}  // namespace ops
}  // namespace cupipe
