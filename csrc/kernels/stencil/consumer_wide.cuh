// The fp32 9x9 wide consumer (StencilFixed::Box9x9 in the Box kernel; alone in the Wide9 kernel).
#pragma once

#include "kernels/stencil/consumer_io.cuh"

namespace cupipe {
namespace kernels {

// The wide consumer (StencilFixed::Box9x9): an fp32 KH x KW box too wide for consume_tile_fixed
// (81 weights do not fit in registers beside the accumulators), in one pass where the general
// consumer needed three with reloads. Each of an item's KH + TH - 1 window rows is read once as
// aligned 16-byte vectors (consume_tile_fixed's preconditions) and applied to every output row
// that uses it, with that tap row's weights read as broadcast vectors from rows padded to
// kWideWeightPitch. Two item shapes: the Box kernel's (kWideTH x kWideTW, 4 x 8, two per Box item
// across, so cols_log2 one less) and the Wide9 kernel's (kNarrowWideTH x kNarrowWideTW, 3 x 12) on
// its own tiles (narrow_wide_geom), whose lanes sit 48 bytes apart: no shared-memory bank
// conflicts. The measurements behind both: docs/design.md.
constexpr int kWideTH = 4, kWideTW = 8, kWideWeightPitch = 12;
constexpr int kNarrowWideTH = 3, kNarrowWideTW = 12;

template <int KH, int KW, int TH, int TW>
__device__ __noinline__ void consume_tile_wide(uint32_t stage_s, uint32_t w_s, ConsumerGeom g, float* out, int rank,
                                               int size) {
  constexpr int kPerVec = 4;
  static_assert(TW % kPerVec == 0, "items of whole output vectors");
  constexpr int M = (kPerVec - (KW / 2) % kPerVec) % kPerVec;
  constexpr int NX = TW + KW - 1;
  constexpr int NV = (M + NX + kPerVec - 1) / kPerVec;
  constexpr int KWV = (KW + kPerVec - 1) / kPerVec;  // weight vectors per tap row
  static_assert(KWV * kPerVec <= kWideWeightPitch, "weight rows wider than their pitch");
  const char* stage = static_cast<const char*>(__cvta_shared_to_generic(stage_s));
  const float4* w = static_cast<const float4*>(__cvta_shared_to_generic(w_s));
  const TileHeader t = *reinterpret_cast<const TileHeader*>(stage);
  const int shift = *reinterpret_cast<const int*>(stage + sizeof(TileHeader));
  const char* rows = stage + g.hdr_bytes + shift - M * 4;  // 16-byte aligned
  float* oplane = out + t.b * g.ny * g.nx;
  const bool out_vec_aligned = (reinterpret_cast<uintptr_t>(out) & 15) == 0;
  for (int p = rank; p < g.items; p += size) {
    const int j0 = (p & ((1 << g.cols_log2) - 1)) * TW, o0 = (p >> g.cols_log2) * TH;
    const int64_t oy = t.y0 + o0, ox = t.x0 + j0;
    if (oy >= g.ny || ox >= g.nx) continue;  // past the plane: nothing to compute
    const char* item = rows + o0 * g.pitch + j0 * 4;
    float acc[TH][TW] = {};
    // Window row r into the output rows o that use it (tap row k = r - o in [0, KH)); `checked`
    // skips the others, which only the first and last TH - 1 rows have.
    auto apply_row = [&](int r, auto checked) {
      uint32_t words[NV * 4];
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        const uint4 u = reinterpret_cast<const uint4*>(item + r * g.pitch)[i];
        words[4 * i] = u.x; words[4 * i + 1] = u.y; words[4 * i + 2] = u.z; words[4 * i + 3] = u.w;
      }
      float x[NX];
#pragma unroll
      for (int e = 0; e < NX; ++e) x[e] = __uint_as_float(words[M + e]);
#pragma unroll
      for (int o = 0; o < TH; ++o) {
        const int k = r - o;
        if (decltype(checked)::value && (k < 0 || k >= KH)) continue;
        float wk[KWV * kPerVec];
#pragma unroll
        for (int i = 0; i < KWV; ++i) {
          const float4 v = w[k * (kWideWeightPitch / kPerVec) + i];
          wk[4 * i] = v.x; wk[4 * i + 1] = v.y; wk[4 * i + 2] = v.z; wk[4 * i + 3] = v.w;
        }
#pragma unroll
        for (int c = 0; c < KW; ++c)
#pragma unroll
          for (int tt = 0; tt < TW; ++tt) acc[o][tt] = fma(wk[c], x[tt + c], acc[o][tt]);
      }
    };
    // Unrolled where an output row starts or ends its taps (the skips are then compile-time);
    // rows TH - 1 .. KH - 1 feed every output row and run as a loop: fully unrolled, the item's
    // code stalled on instruction fetch.
#pragma unroll
    for (int r = 0; r < TH - 1; ++r) apply_row(r, std::true_type{});
#pragma unroll 1
    for (int r = TH - 1; r < KH; ++r) apply_row(r, std::false_type{});
#pragma unroll
    for (int r = KH; r < KH + TH - 1; ++r) apply_row(r, std::true_type{});
    float* dst = oplane + oy * g.nx + ox;
    if (out_vec_aligned && oy + TH <= g.ny && ox + TW <= g.nx) {  // inside the plane (most items)
#pragma unroll
      for (int o = 0; o < TH; ++o)
#pragma unroll
        for (int v = 0; v < TW / kPerVec; ++v)
          reinterpret_cast<float4*>(dst + o * g.nx)[v] =
              make_float4(acc[o][4 * v], acc[o][4 * v + 1], acc[o][4 * v + 2], acc[o][4 * v + 3]);
    } else {
#pragma unroll
      for (int o = 0; o < TH; ++o) {
        if (oy + o >= g.ny) break;
#pragma unroll
        for (int v = 0; v < TW / kPerVec; ++v) {
          if (ox + 4 * v >= g.nx) break;
          const float q[4] = {acc[o][4 * v], acc[o][4 * v + 1], acc[o][4 * v + 2], acc[o][4 * v + 3]};
          store_outputs<float>(dst + o * g.nx + 4 * v, g.nx - ox - 4 * v, q);
        }
      }
    }
  }
}

// The wide consumer over a Box tile (StencilFixed::Box9x9): items twice as wide as the Box
// item, so one less column bit.
__device__ __forceinline__ void consume_box9x9(uint32_t st, uint32_t ws, ConsumerGeom g, float* out, int rank,
                                               int size) {
  g.cols_log2 -= 1;
  consume_tile_wide<9, 9, kWideTH, kWideTW>(st, ws, g, out, rank, size);
}

}  // namespace kernels
}  // namespace cupipe
