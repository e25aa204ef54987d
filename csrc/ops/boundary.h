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

}  // namespace cupipe
