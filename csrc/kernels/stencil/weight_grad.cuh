// The weight gradient of the stencils on the engine:
//
//   grad_w[a][c] = sum over outputs (b, i, j) of grad[b, i, j] * x[b, map_y(i + a - ry), map_x(j + c - rx)]
//
// The input streams through the stage ring exactly as in the forward (load_stencil_tile: tiles
// with their halos, resolved through the boundary), so every input element is read from DRAM
// about once and the k^2 shifted products come out of shared memory. A thread takes the forward's
// work items (TH x TW outputs): it loads the item's upstream gradient from global memory into
// registers, then for each pass of DY x CK taps accumulates sum_{o,t} grad[o][t] * win[o+a][t+c]
// into DY x CK register accumulators. When the stencil fits one pass (3x3, 5x3, 1-D up to r = 4)
// the accumulators live across every tile of the block; otherwise each pass is summed over the
// warp after each item into this warp's row of shared-memory partials. At the end the block adds
// its warps' rows in warp order and writes one row of partial sums; the caller adds the blocks'
// rows. No atomics anywhere: the result is bit-identical from run to run on a device.
//
// One mechanism and stage count (primitives, 2 stages: the forward table's choice for 2-D
// stencils) keeps this to 20 kernels (4 dtypes x 5 blockings); the weight gradient is not a
// mechanism study. The launcher is stencil_weight_grad.cu.
#pragma once

#include "kernels/stencil/kernel.cuh"

namespace cupipe {
namespace kernels {

// The header that declares stencil_wgrad_kernel (a first-use compile includes it).
constexpr const char* kStencilWgradHeader = "kernels/stencil/weight_grad.cuh";
constexpr engine::Mechanism kWgradMechanism = engine::Mechanism::Primitives;
constexpr int kWgradStages = 2;
constexpr int kWgradWarps = kStencilThreads / 32;

// TW upstream-gradient values of one output row, streamed (evict-first: read once), one vector
// load where aligned and in range; zeros past the plane.
template <typename T, int TW>
__device__ __forceinline__ void load_grad_row(const T* src, int n_in_range, acc_t<T> (&v)[TW]) {
  constexpr int kVB = TW * static_cast<int>(sizeof(T));
  if (n_in_range >= TW && (reinterpret_cast<uintptr_t>(src) & (kVB - 1)) == 0) {
    if constexpr (sizeof(T) == 8) {
      const double2 u = __ldcs(reinterpret_cast<const double2*>(src));
      v[0] = u.x; v[1] = u.y;
    } else if constexpr (sizeof(T) == 4) {
      const float4 u = __ldcs(reinterpret_cast<const float4*>(src));
      v[0] = u.x; v[1] = u.y; v[2] = u.z; v[3] = u.w;
    } else {
      const uint2 u = __ldcs(reinterpret_cast<const uint2*>(src));
      const uint32_t w[2] = {u.x, u.y};
      unpack<T>(w, v, std::make_integer_sequence<int, TW>{});
    }
  } else {
#pragma unroll
    for (int t = 0; t < TW; ++t) v[t] = t < n_in_range ? to_acc<acc_t<T>>(src[t]) : acc_t<T>(0);
  }
}

// One pass of DY x CK taps over a work item (tap rows dy0.., the first nk exist; tap columns
// c0.., the first nc exist when !Full): acc[k][c] += sum_{o, t} gv[o][t] * win[o + k][t + c].
// `rows`, `shifts` as in stencil_pass. Edge items (past the plane's last row or column) skip the
// outputs that do not exist, rather than multiplying window values by zero (0 * inf = NaN).
template <typename T, class Blk, bool Full, bool Edge>
__device__ __forceinline__ void wgrad_pass(const char* rows, int pitch, const int* shifts,
                                           const acc_t<T> (&gv)[Blk::TH][kTW<T>], int nk, int nc, int orows,
                                           int ocols, acc_t<T> (&acc)[Blk::DY][Blk::CK]) {
  using A = acc_t<T>;
  constexpr int TH = Blk::TH, DY = Blk::DY, CK = Blk::CK, TW = kTW<T>;
#pragma unroll
  for (int r = 0; r < TH + DY - 1; ++r) {
    if (r >= TH && r - TH + 1 >= nk) break;
    if (Edge && r - (DY - 1) >= orows) break;  // feeds only outputs past the plane
    A x[TW + CK - 1];
    load_window<T, kVecBytes<T>>(rows + r * pitch + shifts[r], x);
#pragma unroll
    for (int k = 0; k < DY; ++k) {
      const int o = r - k;
      if (o < 0 || o >= TH) continue;
      if (k >= nk) break;
      if (Edge && o >= orows) continue;
#pragma unroll
      for (int c = 0; c < CK; ++c) {
        if (!Full && c >= nc) break;
#pragma unroll
        for (int t = 0; t < TW; ++t) {
          if (Edge && t >= ocols) break;
          acc[k][c] = fma(gv[o][t], x[t + c], acc[k][c]);
        }
      }
    }
  }
}

// Adds this warp's DY x CK accumulators (summed over its lanes, a fixed shuffle tree) into its
// row of shared-memory partials at taps (dy0.., c0..) and clears them. Taps past the stencil
// hold zeros (their passes skip them) and land in the padding, which nobody reads.
template <typename A, int DY, int CK>
__device__ __forceinline__ void flush_warp(A (&acc)[DY][CK], A* warp_row, int kw_pad, int dy0, int c0, int lane) {
#pragma unroll
  for (int k = 0; k < DY; ++k)
#pragma unroll
    for (int c = 0; c < CK; ++c) {
      A v = acc[k][c];
#pragma unroll
      for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
      if (lane == 0) warp_row[(dy0 + k) * kw_pad + c0 + c] += v;
      acc[k][c] = A(0);
    }
}

// The forward's register budgets, except fp64 1-D (its 9 double accumulators and window spill
// at three blocks per SM).
template <typename T, bool Box>
constexpr int wgrad_min_blocks() {
  return sizeof(T) == 8 ? 1 : StencilFamilyTraits<Box ? StencilFamily::Box : StencilFamily::Row, T>::kMinBlocks;
}

template <typename T, class Blk>
__global__ void __launch_bounds__(kStencilThreads, wgrad_min_blocks<T, Blk::TH != 1>())
    stencil_wgrad_kernel(const T* __restrict__ x, const T* __restrict__ grad, acc_t<T>* __restrict__ partials,
                         StencilGeom g, Boundary boundary) {
  using A = acc_t<T>;
  using Ring = engine::Ring<kWgradMechanism, kWgradStages, 16>;
  static_assert(!Ring::kPartitioned, "every thread consumes: warps are whole");
  constexpr int TH = Blk::TH, DY = Blk::DY, CK = Blk::CK, TW = kTW<T>, esz = sizeof(T);
  extern __shared__ __align__(engine::kStageAlign) char smem[];
  __shared__ engine::RawShared<typename Ring::SharedState> ss;
  const int kh = 2 * g.ry + 1, kw = 2 * g.rx + 1;
  const int slot = g.kh_pad * g.kw_pad;  // one warp's row of partials
  A* warp_rows = reinterpret_cast<A*>(smem + static_cast<int64_t>(kWgradStages) * g.stage_bytes);
  for (int i = threadIdx.x; i < kWgradWarps * slot; i += blockDim.x) warp_rows[i] = A(0);
  __syncthreads();
  Ring ring(ss.get(), smem, static_cast<int>(g.stage_bytes));

  const int lane = threadIdx.x & 31;
  A* my_row = warp_rows + (threadIdx.x >> 5) * slot;
  // One pass covers the stencil: accumulate across all tiles, flush once at the end.
  const bool persist = kh <= DY && kw <= CK;
  A acc[DY][CK];
#pragma unroll
  for (int k = 0; k < DY; ++k)
#pragma unroll
    for (int c = 0; c < CK; ++c) acc[k][c] = A(0);

  const int64_t mine = block_tiles(g);
  auto load = [&](const auto& w, int64_t k) {
    load_stencil_tile<T>(w, x, g, boundary, blockIdx.x + k * gridDim.x, nullptr);  // no tma ring here
  };
  auto consume = [&](const char* stage, int64_t, engine::Team team) {
    const TileHeader t = *reinterpret_cast<const TileHeader*>(stage);
    const int* shifts = reinterpret_cast<const int*>(stage + sizeof(TileHeader));
    const char* rows = stage + g.hdr_bytes;
    const T* gplane = grad + t.b * g.ny * g.nx;
    // Warp-uniform trip count (team.rank - lane is the warp's first rank): the flushes shuffle.
    for (int p0 = team.rank - lane; p0 < g.items; p0 += team.size) {
      const int p = p0 + lane;
      const int j0 = (p & ((1 << g.cols_log2) - 1)) * TW, o0 = (p >> g.cols_log2) * TH;
      const int64_t oy = t.y0 + o0, ox = t.x0 + j0;
      const bool live = p < g.items && oy < g.ny && ox < g.nx;
      const int orows = live ? static_cast<int>(min(int64_t(TH), g.ny - oy)) : 0;
      const int ocols = live ? static_cast<int>(min(int64_t(TW), g.nx - ox)) : 0;
      A gv[TH][TW];
#pragma unroll
      for (int o = 0; o < TH; ++o) {
        if (o < orows) {
          load_grad_row<T, TW>(gplane + (oy + o) * g.nx + ox, ocols, gv[o]);
        } else {
#pragma unroll
          for (int c = 0; c < TW; ++c) gv[o][c] = A(0);
        }
      }
      const bool edge = orows < TH || ocols < TW;
      for (int c0 = 0; c0 < kw; c0 += CK) {
        for (int dy0 = 0; dy0 < kh; dy0 += DY) {
          if (live) {
            const char* r = rows + (o0 + dy0) * g.pitch + (j0 + c0) * esz;
            const int* sh = shifts + o0 + dy0;
            const int nk = kh - dy0, nc = kw - c0;
            if (!Blk::kAnyWidth || nc >= CK) {
              if (edge) wgrad_pass<T, Blk, true, true>(r, g.pitch, sh, gv, nk, CK, orows, ocols, acc);
              else wgrad_pass<T, Blk, true, false>(r, g.pitch, sh, gv, nk, CK, orows, ocols, acc);
            } else if constexpr (Blk::kAnyWidth) {
              if (edge) wgrad_pass<T, Blk, false, true>(r, g.pitch, sh, gv, nk, nc, orows, ocols, acc);
              else wgrad_pass<T, Blk, false, false>(r, g.pitch, sh, gv, nk, nc, orows, ocols, acc);
            }
          }
          if (!persist) flush_warp(acc, my_row, g.kw_pad, dy0, c0, lane);
        }
      }
    }
  };
  engine::run_ring(ring, mine, load, consume);
  if (persist) flush_warp(acc, my_row, g.kw_pad, 0, 0, lane);
  __syncthreads();
  for (int i = threadIdx.x; i < kh * kw; i += blockDim.x) {
    const int a = i / kw, c = i - a * kw;
    A s = A(0);
    for (int w = 0; w < kWgradWarps; ++w) s += warp_rows[w * slot + a * g.kw_pad + c];
    partials[static_cast<int64_t>(blockIdx.x) * kh * kw + i] = s;
  }
}

}  // namespace kernels
}  // namespace cupipe
