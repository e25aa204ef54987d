// The pipelined 2-D stencil (stencil1d maps onto it with ry = 0 or rx = 0), by job:
//   stencil/geometry.cuh          tiles, blockings and the tile grid
//   stencil/tile_loader.cuh       a tile's padded window, through the boundary, into a stage
//   stencil/consumer_general.cuh  the Row and Box register blockings (any radius)
//   stencil/consumer_fixed.cuh    compile-time rows 3..9 and boxes 3x3, 5x5
//   stencil/consumer_wide.cuh     the fp32 9x9 box
//   stencil/consumer_mma.cuh      the 2-byte tensor-core consumer
//   stencil/family.cuh            the kernel families and their traits
//   stencil/kernel.cuh            stencil_kernel
//   stencil/launch_plan.cuh       which family, geometry and grid a call gets
// docs/design.md ("Stencils") says when each family runs and why.
#pragma once

#include "kernels/stencil/launch_plan.cuh"
