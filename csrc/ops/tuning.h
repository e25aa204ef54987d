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
};

CopyConfig resolve_stream_copy(const DeviceInfo& dev, MechanismArg mech, int64_t stages,
                               int64_t vec_bytes, int64_t bytes);
CopyConfig resolve_stencil(const DeviceInfo& dev, MechanismArg mech, int64_t stages,
                           const StencilGeometry& g);
// Rows at least this long are split across blocks by the reduce kernel for every dtype (its
// default stage holds 16 KiB: 2048 to 8192 elements); the reduce table treats them as one class.
constexpr int64_t kLongRow = 16384;

CopyConfig resolve_reduce(const DeviceInfo& dev, MechanismArg mech, int64_t stages, int64_t outer,
                          int64_t r, int64_t inner);

}  // namespace ops
}  // namespace cupipe
