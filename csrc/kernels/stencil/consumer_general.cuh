// The general consumer: a plain valid stencil of any radius out of a stage (consumers never see
// the boundary). A thread owns work items of TH rows x TW consecutive columns and accumulates an
// item in registers (fp32; fp64 for fp64). Taps go in chunks of CK columns and passes of DY rows,
// compile-time sizes (the Blocking), so that any rx and ry run through the same code: a pass holds
// its DY x CK weights in registers, loads each window row it needs once and applies it to every
// output row of the item that uses it. Taps past the stencil in a partial chunk or pass are
// skipped, never multiplied by zero (0 * inf would be NaN). Taps a step apart have their own
// consumer (consume_stepped_tile, below).
#pragma once

#include "kernels/stencil/consumer_io.cuh"

namespace cupipe {
namespace kernels {

// One pass of one tap chunk over a work item: tap rows dy0 .. dy0+DY-1 (the first nk < DY
// exist only), tap columns c0 .. c0+CK-1 (the first nc exist when !Full). `rows` points at the
// item's first input of window row o0 + dy0 for this chunk (column j0 + c0); `shifts` at that
// row's shift; `w` at the weight of tap (dy0, c0) in the kw_pad-wide weight rows.
template <typename T, class Blk, bool Full>
__device__ __forceinline__ void stencil_pass(const char* rows, int pitch, const int* shifts, const acc_t<T>* w,
                                             int kw_pad, int nk, int nc, acc_t<T> (&acc)[Blk::TH][kTW<T>]) {
  using A = acc_t<T>;
  constexpr int TH = Blk::TH, DY = Blk::DY, CK = Blk::CK, TW = kTW<T>;
  A wr[DY][CK];
#pragma unroll
  for (int k = 0; k < DY; ++k)
#pragma unroll
    for (int c = 0; c < CK; ++c) wr[k][c] = w[k * kw_pad + c];  // padded: always in bounds
#pragma unroll
  for (int r = 0; r < TH + DY - 1; ++r) {
    // Window row r feeds output rows r - k with tap rows k; rows past TH - 1 only for tap rows
    // that exist (the window ends there).
    if (r >= TH && r - TH + 1 >= nk) break;
    A x[TW + CK - 1];
    load_window<T, kVecBytes<T>>(rows + r * pitch + shifts[r], x);
#pragma unroll
    for (int k = 0; k < DY; ++k) {
      const int o = r - k;
      if (o < 0 || o >= TH) continue;
      if (k >= nk) break;
#pragma unroll
      for (int c = 0; c < CK; ++c) {
        if (!Full && c >= nc) break;
#pragma unroll
        for (int t = 0; t < TW; ++t) acc[o][t] = fma(wr[k][c], x[t + c], acc[o][t]);
      }
    }
  }
}

// The tile in `stage`: this thread's work items (rank, rank + size, ...), each TH x TW outputs
// accumulated in registers over all chunks and passes, then stored.
template <typename T, class Blk>
__device__ __forceinline__ void consume_tile(const char* stage, const acc_t<T>* w_s, const ConsumerGeom& g, T* out,
                                             int rank, int size) {
  using A = acc_t<T>;
  constexpr int TH = Blk::TH, DY = Blk::DY, CK = Blk::CK, TW = kTW<T>, esz = sizeof(T);
  const TileHeader t = *reinterpret_cast<const TileHeader*>(stage);
  const int* shifts = reinterpret_cast<const int*>(stage + sizeof(TileHeader));
  const char* rows = stage + g.hdr_bytes;
  T* oplane = out + t.b * g.ny * g.nx;
  for (int p = rank; p < g.items; p += size) {
    const int j0 = (p & ((1 << g.cols_log2) - 1)) * TW, o0 = (p >> g.cols_log2) * TH;
    const int64_t oy = t.y0 + o0, ox = t.x0 + j0;
    if (oy >= g.ny || ox >= g.nx) continue;  // past the plane: nothing to compute
    A acc[TH][TW] = {};
    for (int c0 = 0; c0 < g.kw; c0 += CK) {
      for (int dy0 = 0; dy0 < g.kh; dy0 += DY) {
        const char* r = rows + (o0 + dy0) * g.pitch + (j0 + c0) * esz;
        const A* wp = w_s + dy0 * g.kw_pad + c0;
        if (!Blk::kAnyWidth || g.kw - c0 >= CK)
          stencil_pass<T, Blk, true>(r, g.pitch, shifts + o0 + dy0, wp, g.kw_pad, g.kh - dy0, CK, acc);
        else if constexpr (Blk::kAnyWidth)
          stencil_pass<T, Blk, false>(r, g.pitch, shifts + o0 + dy0, wp, g.kw_pad, g.kh - dy0, g.kw - c0, acc);
      }
    }
#pragma unroll
    for (int o = 0; o < TH; ++o) {
      if (oy + o >= g.ny) break;
      store_outputs<T>(oplane + (oy + o) * g.nx + ox, g.nx - ox, acc[o]);
    }
  }
}

// A Box consumer out of line: it does not depend on the mechanism or the stage count, so it is
// compiled once per translation unit and element type, and the Box kernel carries all four widths
// at the cost of one call per tile. Shared memory comes as 32-bit shared addresses (loads stay LDS).
template <typename T, int CK>
__device__ __noinline__ void consume_box_tile(uint32_t stage, uint32_t w_s, ConsumerGeom g, T* out, int rank,
                                              int size) {
  consume_tile<T, BoxBlocking<CK>>(static_cast<const char*>(__cvta_shared_to_generic(stage)),
                                   static_cast<const acc_t<T>*>(__cvta_shared_to_generic(w_s)), g, out, rank, size);
}

// The general consumer for taps `step` elements apart (StencilGeom::step: a batch dim inside the
// rows, as channels_last's C). Per tap column, a run-time loop (the item's registers stay those of
// its accumulators: unrolled columns spilled), each window row of a pass is one TW-output vector,
// applied to every output row of the item that uses it. Out of line, apart from the unit-step
// consumers, so that their kernels' register allocation is not shared with it.
template <typename T, class Blk>
__device__ __noinline__ void consume_stepped_tile(uint32_t stage_s, uint32_t w_s_s, ConsumerGeom g, T* out, int rank,
                                                  int size) {
  using A = acc_t<T>;
  constexpr int TH = Blk::TH, DY = Blk::DY, TW = kTW<T>, esz = sizeof(T);
  const char* stage = static_cast<const char*>(__cvta_shared_to_generic(stage_s));
  const A* w_s = static_cast<const A*>(__cvta_shared_to_generic(w_s_s));
  const TileHeader t = *reinterpret_cast<const TileHeader*>(stage);
  const int* shifts = reinterpret_cast<const int*>(stage + sizeof(TileHeader));
  const char* rows = stage + g.hdr_bytes;
  T* oplane = out + t.b * g.ny * g.nx;
  const int step_bytes = g.step * esz;
  for (int p = rank; p < g.items; p += size) {
    const int j0 = (p & ((1 << g.cols_log2) - 1)) * TW, o0 = (p >> g.cols_log2) * TH;
    const int64_t oy = t.y0 + o0, ox = t.x0 + j0;
    if (oy >= g.ny || ox >= g.nx) continue;
    A acc[TH][TW] = {};
    for (int dy0 = 0; dy0 < g.kh; dy0 += DY) {
      const int nk = g.kh - dy0;
      const int* sh = shifts + o0 + dy0;
      const char* base = rows + (o0 + dy0) * g.pitch + j0 * esz;
#pragma unroll 1
      for (int c = 0; c < g.kw; ++c) {
        A wr[DY];
#pragma unroll
        for (int k = 0; k < DY; ++k) wr[k] = w_s[(dy0 + k) * g.kw_pad + c];  // padded rows: in bounds
        const char* col = base + c * step_bytes;
#pragma unroll
        for (int r = 0; r < TH + DY - 1; ++r) {
          if (r >= TH && r - TH + 1 >= nk) break;
          A x[TW];
          load_window<T, kVecBytes<T>>(col + r * g.pitch + sh[r], x);
#pragma unroll
          for (int k = 0; k < DY; ++k) {
            const int o = r - k;
            if (o < 0 || o >= TH) continue;
            if (k >= nk) break;
#pragma unroll
            for (int u = 0; u < TW; ++u) acc[o][u] = fma(wr[k], x[u], acc[o][u]);
          }
        }
      }
    }
#pragma unroll
    for (int o = 0; o < TH; ++o) {
      if (oy + o >= g.ny) break;
      store_outputs<T>(oplane + (oy + o) * g.nx + ox, g.nx - ox, acc[o]);
    }
  }
}

}  // namespace kernels
}  // namespace cupipe
