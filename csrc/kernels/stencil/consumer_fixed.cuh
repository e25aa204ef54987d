// The fixed consumers: a KH x KW stencil whose every size is a compile-time constant (rows 3, 5,
// 7, 9 in the Row kernel; boxes 3x3 and 5x5 in the Box kernel and alone in the Narrow3/Narrow5
// kernels; rows and the 3x3 box with taps a step apart in the stepped kernels). One pass, weights
// in registers once per tile, window rows read as whole aligned vectors.
#pragma once

#include "kernels/stencil/consumer_io.cuh"

namespace cupipe {
namespace kernels {

// A fixed consumer's KH x KW weights, from the tile's weight slots in shared memory into registers.
template <int KH, int KW, typename A>
__device__ __forceinline__ void fixed_weights(uint32_t w_s, const ConsumerGeom& g, A (&wr)[KH][KW]) {
  const A* w = static_cast<const A*>(__cvta_shared_to_generic(w_s));
#pragma unroll
  for (int k = 0; k < KH; ++k)
#pragma unroll
    for (int c = 0; c < KW; ++c) wr[k][c] = w[k * g.kw_pad + c];
}

// The fixed consumer: a KH x KW stencil in one pass over items of TH x TW outputs, every size a
// compile-time constant. Preconditions (the launcher's StencilFixed choice): all rows of the tile
// share the shift in the header's first slot, and window column 0 then lies M elements past a
// V-byte boundary, where M = (-rx) mod (V / sizeof(T)) -- so every item's first tap column sits M
// elements into an aligned vector (items start at multiples of TW elements, TW elements = V
// bytes). Each window row is then NV aligned V-byte loads (no narrow loads, no bank conflicts:
// the lanes of a warp read consecutive vectors) and the elements are picked at compile-time
// offsets. The weights are loaded into registers once per tile, not once per item. The vectors
// read up to V - 1 bytes past the row's last tap, which the pitch and the stage's slack cover.
// TW: outputs per item, kTW<T> (the tile's own items) or, for the 2-byte types (kTwoByteTW), items
// twice as wide: the caller then passes half the items (cols_log2 one less).
template <typename T, int TH, int KH, int KW, int TW = kTW<T>>
__device__ __noinline__ void consume_tile_fixed(uint32_t stage_s, uint32_t w_s, ConsumerGeom g, T* out, int rank,
                                                int size) {
  using A = acc_t<T>;
  constexpr int esz = sizeof(T), V = TW * esz, kPerVec = TW;
  static_assert(V == 8 || V == 16, "items of one 8- or 16-byte vector");
  constexpr int M = (kPerVec - (KW / 2) % kPerVec) % kPerVec;
  constexpr int NX = TW + KW - 1;                    // window elements an item row needs
  constexpr int NV = (M + NX + kPerVec - 1) / kPerVec;  // aligned vectors that hold them
  const char* stage = static_cast<const char*>(__cvta_shared_to_generic(stage_s));
  A wr[KH][KW];
  fixed_weights<KH, KW>(w_s, g, wr);
  const TileHeader t = *reinterpret_cast<const TileHeader*>(stage);
  const int shift = *reinterpret_cast<const int*>(stage + sizeof(TileHeader));
  const char* rows = stage + g.hdr_bytes + shift - M * esz;  // V-aligned
  T* oplane = out + t.b * g.ny * g.nx;
  // Rows of whole 16-byte multiples (the fixed consumers' precondition): every item's first output
  // is vector-aligned when the output is.
  const bool out_vec_aligned = (reinterpret_cast<uintptr_t>(out) & (V - 1)) == 0;
  for (int p = rank; p < g.items; p += size) {
    const int j0 = (p & ((1 << g.cols_log2) - 1)) * TW, o0 = (p >> g.cols_log2) * TH;
    const int64_t oy = t.y0 + o0, ox = t.x0 + j0;
    if (oy >= g.ny || ox >= g.nx) continue;  // past the plane: nothing to compute
    const char* item = rows + o0 * g.pitch + j0 * esz;
    A acc[TH][TW] = {};
#pragma unroll
    for (int r = 0; r < TH + KH - 1; ++r) {
      uint32_t words[NV * V / 4];
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        const engine::vec_t<V> u = reinterpret_cast<const engine::vec_t<V>*>(item + r * g.pitch)[i];
        if constexpr (V == 16) {
          words[4 * i] = u.x; words[4 * i + 1] = u.y; words[4 * i + 2] = u.z; words[4 * i + 3] = u.w;
        } else {
          words[2 * i] = u.x; words[2 * i + 1] = u.y;
        }
      }
      A x[NX];
      unpack_from<T, M>(words, x, std::make_integer_sequence<int, NX>{});
#pragma unroll
      for (int k = 0; k < KH; ++k) {
        const int o = r - k;  // window row r feeds output row r - k through tap row k
        if (o < 0 || o >= TH) continue;
#pragma unroll
        for (int c = 0; c < KW; ++c)
#pragma unroll
          for (int tt = 0; tt < TW; ++tt) acc[o][tt] = fma(wr[k][c], x[tt + c], acc[o][tt]);
      }
    }
    T* dst = oplane + oy * g.nx + ox;
    if (out_vec_aligned && oy + TH <= g.ny && ox + TW <= g.nx) {  // inside the plane (most items)
#pragma unroll
      for (int o = 0; o < TH; ++o) store_vector<T>(dst + o * g.nx, acc[o]);
    } else {
#pragma unroll
      for (int o = 0; o < TH; ++o) {
        if (oy + o >= g.ny) break;
        store_outputs<T>(dst + o * g.nx, g.nx - ox, acc[o]);
      }
    }
  }
}

// The item width of the fixed consumers in the Row and Narrow3 kernels (kTwoByteTW for the 2-byte
// types; the Box kernel's keep kTW<T>), and a tile's ConsumerGeom, counted in kTW<T> items,
// recounted in items of it: half as many across (choose_fixed asks tile_w % kTwoByteTW).
template <typename T>
constexpr int kItemTW = sizeof(T) == 2 ? kTwoByteTW : kTW<T>;
template <typename T>
__device__ __forceinline__ ConsumerGeom in_item_tw(ConsumerGeom g) {
  static_assert(kItemTW<T> == kTW<T> || kItemTW<T> == 2 * kTW<T>, "items of one or two tile items");
  if constexpr (kItemTW<T> != kTW<T>) {
    g.cols_log2 -= 1;
    g.items >>= 1;
  }
  return g;
}

// The compiled step (SC > 0 in the stepped fixed consumers): points of 3 values (RGB channels
// last, xyz triples) are steps of 6, 12 or 24 bytes, never whole vectors. With x aligned and rows
// of 16, an item (TW outputs, one aligned vector of x) starts its first tap's window column
// StepWindow::kPhase bytes past a 16-byte boundary, and every tap of the item sits at a compile-time
// element of the aligned vectors from there (StepWindow).
// Rows of up to kCompiledStepTaps taps take it: longer windows would cost the row kernel a block
// an SM, the whole-vector steps' too.
constexpr int kCompiledStep = 3, kCompiledStepTaps = 5;
template <typename T, int KW, int SC>
struct StepWindow {
  static constexpr int esz = sizeof(T), R = (KW - 1) / 2;
  static constexpr int kPhase = ((-R * SC * esz) % 16 + 16) % 16;  // bytes before the item
  static constexpr int kFirst = kPhase / esz;                      // the item's first tap's element
  static constexpr int kElems = kFirst + (KW - 1) * SC + 16 / esz; // elements read, whole vectors
};

// The fixed rows with taps `step` elements apart (a batch dim inside the rows: stencil1d along a
// middle dim whose inner extent is under 512 bytes), KW taps at compile time. Preconditions
// (choose_fixed): x is aligned and its rows are whole 16-byte multiples, and the step is either
// whole 16-byte vectors (SC = 0: every row's shift is a multiple of 16 and tap c of an item is the
// one V-byte vector at window column j0 + c * step) or kCompiledStep (SC: StepWindow).
// Items of TW outputs (kItemTW, counted as in_item_tw).
template <typename T, int KW, int SC = 0, int TW = kItemTW<T>>
__device__ __noinline__ void consume_stepped_rows_fixed(uint32_t stage_s, uint32_t w_s, ConsumerGeom g, T* out,
                                                        int rank, int size) {
  using A = acc_t<T>;
  constexpr int esz = sizeof(T), V = TW * esz;
  static_assert(V == 16, "items of one 16-byte vector");
  const char* stage = static_cast<const char*>(__cvta_shared_to_generic(stage_s));
  const A* w = static_cast<const A*>(__cvta_shared_to_generic(w_s));  // one tap row
  const TileHeader t = *reinterpret_cast<const TileHeader*>(stage);
  const int* shifts = reinterpret_cast<const int*>(stage + sizeof(TileHeader));
  T* oplane = out + t.b * g.ny * g.nx;
  const int64_t step_bytes = static_cast<int64_t>(g.step) * esz;
  const bool out_vec_aligned = (reinterpret_cast<uintptr_t>(out) & (V - 1)) == 0;
  for (int p = rank; p < g.items; p += size) {
    const int j0 = (p & ((1 << g.cols_log2) - 1)) * TW, o0 = p >> g.cols_log2;
    const int64_t oy = t.y0 + o0, ox = t.x0 + j0;
    if (oy >= g.ny || ox >= g.nx) continue;  // past the plane: nothing to compute
    const char* item = stage + g.hdr_bytes + o0 * g.pitch + shifts[o0] + j0 * esz;  // V-aligned (SC: kPhase past)
    A acc[TW] = {};
    if constexpr (SC > 0) {  // every tap from one run of aligned vectors
      using Win = StepWindow<T, KW, SC>;
      A x[Win::kElems];
      load_vectors<T, 16>(item - Win::kPhase, x);
#pragma unroll
      for (int c = 0; c < KW; ++c) {
        const A wc = w[c];
#pragma unroll
        for (int tt = 0; tt < TW; ++tt) acc[tt] = fma(wc, x[Win::kFirst + c * SC + tt], acc[tt]);
      }
    } else {
      // Taps two at a time, each weight a broadcast load: fully unrolled, the kernel's registers
      // cost a block an SM for the general stepped consumer beside it (docs/design.md §4.2).
#pragma unroll 2
      for (int c = 0; c < KW; ++c) {
        const A wc = w[c];
        const uint4 u = *reinterpret_cast<const uint4*>(item + c * step_bytes);
        const uint32_t words[4] = {u.x, u.y, u.z, u.w};
        A x[TW];
        unpack<T>(words, x, std::make_integer_sequence<int, TW>{});
#pragma unroll
        for (int tt = 0; tt < TW; ++tt) acc[tt] = fma(wc, x[tt], acc[tt]);
      }
    }
    T* dst = oplane + oy * g.nx + ox;
    if (out_vec_aligned && ox + TW <= g.nx) store_vector<T>(dst, acc);
    else store_outputs<T>(dst, g.nx - ox, acc);
  }
}

// The fixed boxes with taps `step` elements apart along the rows (channels_last's C inside the
// rows), KH x KW taps at compile time, on the general stepped consumer's items of TH rows (Box's;
// counted as in_item_tw across). Preconditions as consume_stepped_rows_fixed's: every row's shift
// is a multiple of 16, so tap (k, c) of an item is the one V-byte vector at window row o + k,
// column j0 + c * step (SC > 0: StepWindow's element of the row's run of vectors). The weights sit
// in registers once per tile; an item's rows go in runs of SR, each window row of a run loaded
// once per tap column (SC: once).
template <typename T, int KH, int KW, int TH, int SC = 0, int TW = kItemTW<T>>
__device__ __noinline__ void consume_stepped_box_fixed(uint32_t stage_s, uint32_t w_s, ConsumerGeom g, T* out,
                                                       int rank, int size) {
  using A = acc_t<T>;
  constexpr int esz = sizeof(T), V = TW * esz;
  // Accumulators a run: 32 (16 for the 2-byte types, whose kernel's budget is 80 registers at three
  // blocks an SM: 32 spilled inside the consumer).
  constexpr int kAcc = esz == 2 ? 16 : 32, SR = TH < kAcc / TW ? TH : kAcc / TW;
  static_assert(V == 16, "items of one 16-byte vector");
  static_assert(TH % SR == 0, "runs of whole rows");
  const char* stage = static_cast<const char*>(__cvta_shared_to_generic(stage_s));
  A wr[KH][KW];
  fixed_weights<KH, KW>(w_s, g, wr);
  const TileHeader t = *reinterpret_cast<const TileHeader*>(stage);
  const int* shifts = reinterpret_cast<const int*>(stage + sizeof(TileHeader));
  T* oplane = out + t.b * g.ny * g.nx;
  const int step_bytes = g.step * esz;
  const bool out_vec_aligned = (reinterpret_cast<uintptr_t>(out) & (V - 1)) == 0;
  for (int p = rank; p < g.items; p += size) {
    const int j0 = (p & ((1 << g.cols_log2) - 1)) * TW, o0 = (p >> g.cols_log2) * TH;
    const int64_t oy0 = t.y0 + o0, ox = t.x0 + j0;
    if (oy0 >= g.ny || ox >= g.nx) continue;  // past the plane: nothing to compute
    const char* col0 = stage + g.hdr_bytes + j0 * esz;
#pragma unroll 1
    for (int h = 0; h < TH; h += SR) {
      const int64_t oy = oy0 + h;
      if (oy >= g.ny) break;
      A acc[SR][TW] = {};
#pragma unroll
      for (int r = 0; r < SR + KH - 1; ++r) {
        const int wrow = o0 + h + r;
        const char* row = col0 + wrow * g.pitch + shifts[wrow];  // V-aligned (SC: kPhase past)
        if constexpr (SC > 0) {
          using Win = StepWindow<T, KW, SC>;
          A x[Win::kElems];
          load_vectors<T, 16>(row - Win::kPhase, x);
#pragma unroll
          for (int c = 0; c < KW; ++c)
#pragma unroll
            for (int k = 0; k < KH; ++k) {
              const int o = r - k;  // window row r feeds output row r - k through tap row k
              if (o < 0 || o >= SR) continue;
#pragma unroll
              for (int tt = 0; tt < TW; ++tt) acc[o][tt] = fma(wr[k][c], x[Win::kFirst + c * SC + tt], acc[o][tt]);
            }
        } else {
#pragma unroll
          for (int c = 0; c < KW; ++c) {
            const uint4 u = *reinterpret_cast<const uint4*>(row + c * step_bytes);
            const uint32_t words[4] = {u.x, u.y, u.z, u.w};
            A x[TW];
            unpack<T>(words, x, std::make_integer_sequence<int, TW>{});
#pragma unroll
            for (int k = 0; k < KH; ++k) {
              const int o = r - k;  // window row r feeds output row r - k through tap row k
              if (o < 0 || o >= SR) continue;
#pragma unroll
              for (int tt = 0; tt < TW; ++tt) acc[o][tt] = fma(wr[k][c], x[tt], acc[o][tt]);
            }
          }
        }
      }
      T* dst = oplane + oy * g.nx + ox;
      if (out_vec_aligned && oy + SR <= g.ny && ox + TW <= g.nx) {
#pragma unroll
        for (int o = 0; o < SR; ++o) store_vector<T>(dst + o * g.nx, acc[o]);
      } else {
#pragma unroll
        for (int o = 0; o < SR; ++o) {
          if (oy + o >= g.ny) break;
          store_outputs<T>(dst + o * g.nx, g.nx - ox, acc[o]);
        }
      }
    }
  }
}

}  // namespace kernels
}  // namespace cupipe
