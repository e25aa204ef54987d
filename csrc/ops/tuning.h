// What "auto" (mechanism="auto", stages=0, vec_bytes=0) resolves to on CUDA: a small table
// read off this project's own benchmarks (BENCHMARKS.md); explicit arguments always win.
#pragma once

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
};

CopyConfig resolve_stream_copy(const DeviceInfo& dev, MechanismArg mech, int64_t stages,
                               int64_t vec_bytes, int64_t bytes);
CopyConfig resolve_stencil(const DeviceInfo& dev, MechanismArg mech, int64_t stages,
                           const StencilGeometry& g);
CopyConfig resolve_reduce(const DeviceInfo& dev, MechanismArg mech, int64_t stages, int64_t outer,
                          int64_t r, int64_t inner, int esz);

}  // namespace ops
}  // namespace cupipe
