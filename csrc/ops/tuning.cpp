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

// Stencils along the last dim only (ry == 0: 1-D signals, 1 x k windows; the Row kernel) on sm_90:
// barrier with 2 stages ran the 2^28 fp32 r=4 signal in 0.641 ms (second run) and 0.670 ms
// (third run) against primitives/2's 0.778 and 0.781 in the same runs (BENCHMARKS.md). Its rows
// are 16-byte aligned copies, libcu++'s bulk path (synccheck-clean). Every other stencil:
// primitives, 2 stages (the 2-D sweeps' fastest: 5-point 8192^2 0.212 ms).
CopyConfig resolve_stencil(const DeviceInfo& dev, MechanismArg mech, int64_t stages, const StencilGeometry& g) {
  CopyConfig best;
  best.mechanism = dev.sm >= 90 && g.ry == 0 && g.rx > 0 ? engine::Mechanism::Barrier : engine::Mechanism::Primitives;
  best.stages = 2;
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
