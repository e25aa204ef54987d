// Boundary index maps of the CPU kernels. map_index returns the source index for a (possibly
// out-of-range) index i of a dim of size n, or -1 where the zero boundary reads a 0. The CUDA
// stencil's loader has the same map on the device (map_outside in csrc/kernels/stencil/tile_loader.cuh);
// one host/device definition for both is the next step, once a GPU run can check it.
#pragma once

#include <cstdint>

#include "kernels/params.h"

namespace cupipe {

inline int64_t map_index(int64_t i, int64_t n, Boundary b) {
  if (i >= 0 && i < n) return i;
  switch (b) {
    case Boundary::Zero: return -1;
    case Boundary::Replicate: return i < 0 ? 0 : n - 1;
    case Boundary::Circular: { int64_t m = i % n; return m < 0 ? m + n : m; }
    case Boundary::Reflect: {
      // Mirror without repeating the edge (F.pad 'reflect'); valid while |overhang| < n.
      if (n == 1) return 0;
      const int64_t period = 2 * (n - 1);
      int64_t m = i % period;
      if (m < 0) m += period;
      return m < n ? m : period - m;
    }
  }
  return -1;
}

// The same for element e of a row of n points of `step` values each (a batch dim inside the row):
// the boundary applies to e's point, e keeps its place within the point.
inline int64_t map_stepped(int64_t e, int64_t n, int64_t step, Boundary b) {
  if (e >= 0 && e < n * step) return e;
  const int64_t q = e >= 0 ? e / step : -((-e + step - 1) / step);
  const int64_t m = map_index(q, n, b);
  return m < 0 ? -1 : m * step + (e - q * step);
}

}  // namespace cupipe
