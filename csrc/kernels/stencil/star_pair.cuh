// The star pair's protocol on the device (design.md §4.8), shared by stencil3d (volume.cuh) and the
// fused steps (steps.cuh). A call whose radii have taps off the axes launches the Star instance and
// then the general one over the same grid, with one int of `flags` a block; each block first reads
// the weights. With a weight off the axes the star block returns and the general one computes.
// With every off-axis weight zero the star block computes from the axis taps alone, and the general
// block returns unless the star block flagged it: the star block keeps a check sum of the values
// whose non-finiteness matters (conv's 0 x Inf = NaN, which skipping a tap would drop), and a
// non-finite sum (an Inf or NaN among them, or an overflow) sends the block to the general one.
#pragma once

namespace cupipe {
namespace kernels {

// After each thread has loaded its share of the weights (off_axis_zero: every off-axis weight of
// its share is zero); a block barrier. Whether this block leaves the work to the other instance;
// flags is null outside a pair.
template <bool Star>
__device__ __forceinline__ bool star_pair_skips_block(int* flags, bool off_axis_zero) {
  if (Star && threadIdx.x == 0) flags[blockIdx.x] = 0;  // ordered before any thread's flag by the barrier
  const bool star_weights = __syncthreads_and(off_axis_zero);
  return Star ? !star_weights : flags != nullptr && star_weights && flags[blockIdx.x] == 0;
}

// At the end of the star block: its flag where the check sum is not finite.
template <bool Star, typename A>
__device__ __forceinline__ void star_pair_flag(int* flags, A seen) {
  if (Star && !isfinite(seen)) flags[blockIdx.x] = 1;
}

}  // namespace kernels
}  // namespace cupipe
