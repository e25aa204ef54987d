// Divisions fixed at launch, so that kernels do not divide: FastDiv and a grid's TileShare.
//
// Division by a divisor fixed at launch: n / d as one 64-bit multiply and a shift (Granlund and
// Montgomery's round-up method), for the per-tile index arithmetic that a 32-bit division would
// otherwise spend ~20 instructions on (I2F, MUFU.RCP, corrections) in every thread of every tile.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define CUPIPE_FD_HD __host__ __device__ __forceinline__
#else
#define CUPIPE_FD_HD inline
#endif

namespace cupipe {
namespace kernels {

// Exact for 0 <= n < 2^31 and 1 <= d < 2^31: with s = ceil(log2 d), p = 31 + s and
// m = ceil(2^p / d) (< 2^32), floor(n * m / 2^p) == floor(n / d), since m * d - 2^p < d and
// n * (m * d - 2^p) < 2^31 * d <= 2^p.
struct FastDiv {
  uint32_t d = 1;
  uint32_t m = 1u << 31;
  int p = 31;

  FastDiv() = default;
  explicit FastDiv(uint32_t divisor) : d(divisor) {
    int s = 0;
    while ((uint64_t(1) << s) < divisor) ++s;
    p = 31 + s;
    m = static_cast<uint32_t>(((uint64_t(1) << p) + divisor - 1) / divisor);
  }
  CUPIPE_FD_HD uint32_t div(uint32_t n) const { return static_cast<uint32_t>((uint64_t(n) * m) >> p); }
  // q = n / d, r = n % d
  CUPIPE_FD_HD void divmod(uint32_t n, uint32_t& q, uint32_t& r) const {
    q = div(n);
    r = n - q * d;
  }
};

// A grid's even share of `ntiles` tiles, block b taking tiles b, b + grid, ...: `each` of them,
// one more when b < extra. Worked out at launch: on the device a 64-bit division is a
// ~70-instruction dependent chain, which every short-lived block paid before its first copy
// (a measurable share of stream_copy's bandwidth: docs/design.md).
struct TileShare {
  int64_t each = 0, extra = 0;
  TileShare() = default;
  TileShare(int64_t ntiles, int64_t grid) : each(ntiles / grid), extra(ntiles % grid) {}
  CUPIPE_FD_HD int64_t of(uint32_t block) const { return each + (block < extra ? 1 : 0); }
};

}  // namespace kernels
}  // namespace cupipe
