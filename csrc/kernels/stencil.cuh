// The pipelined 2-D stencil (stencil1d maps onto it with ry = 0 or rx = 0).
//
// Output tiles of tile_h x tile_w points stream through the engine's stage ring. A stage holds
// the tile's padded input window, (tile_h + 2ry) rows of (tile_w + 2rx) elements, already
// resolved through the boundary: rows are fetched from their mapped source row (zero rows are
// filled with zeros), the in-range part of each row moves as one async segment, and the few
// halo columns outside the plane are stored directly (mapped, or zero). The consumer then runs a
// plain valid stencil out of shared memory, so each input element is read from DRAM about once
// and the boundary costs nothing in the inner loop.
//
// Each smem row starts `shift` bytes into its pitch, so that it agrees with its source modulo 16
// (the engine's copy precondition); shift is recomputed from the addresses by the consumer.
#pragma once

#include "engine/engine.cuh"
#include "kernels/launch_utils.cuh"
#include "kernels/numeric.cuh"

namespace cupipe {
namespace kernels {

constexpr int kStencilThreads = 256;
constexpr int kTilePoints = 2048;  // outputs per tile: tile_h x tile_w, tile_h = 16 unless ny is small


__device__ __forceinline__ int64_t map_index_dev(int64_t i, int64_t n, Boundary b) {
  if (i >= 0 && i < n) return i;
  switch (b) {
    case Boundary::Zero: return -1;
    case Boundary::Replicate: return i < 0 ? 0 : n - 1;
    case Boundary::Circular: { int64_t m = i % n; return m < 0 ? m + n : m; }
    case Boundary::Reflect: {
      if (n == 1) return 0;
      const int64_t period = 2 * (n - 1);
      int64_t m = i % period;
      if (m < 0) m += period;
      return m < n ? m : period - m;
    }
  }
  return -1;
}

struct StencilGeom {
  int64_t batch, ny, nx;
  int ry, rx;
  int tile_h, tile_w;  // outputs per tile
  int64_t tiles_y, tiles_x;
  int win_h, win_w;  // padded window, in elements
  int pitch;         // bytes per smem row
};

inline StencilGeom make_stencil_geom(const StencilParams& p, int esz, int64_t smem_budget) {
  StencilGeom g;
  g.batch = p.batch; g.ny = p.ny; g.nx = p.nx; g.ry = p.ry; g.rx = p.rx;
  // Short planes (1-D rows: ny == 1) get wide tiles instead of mostly empty 16-row ones, narrow
  // planes tall ones; then the window shrinks until `stages` of it fit in shared memory.
  g.tile_h = 16;
  while (g.tile_h > 1 && g.tile_h / 2 >= p.ny) g.tile_h /= 2;
  g.tile_w = kTilePoints / g.tile_h;
  while (g.tile_w > 32 && g.tile_w / 2 >= p.nx) {
    g.tile_w /= 2;
    if (g.tile_h * 2 <= 64 && g.tile_h < p.ny) g.tile_h *= 2;
  }
  auto stage_bytes = [&] {
    return static_cast<int64_t>(g.tile_h + 2 * p.ry) *
           engine::align_up(static_cast<int64_t>(g.tile_w + 2 * p.rx) * esz + 32, 16);
  };
  while (p.stages * stage_bytes() > smem_budget && (g.tile_w > 32 || g.tile_h > 1)) {
    if (g.tile_w > 32) g.tile_w /= 2;
    else g.tile_h /= 2;
  }
  g.tiles_y = (p.ny + g.tile_h - 1) / g.tile_h;
  g.tiles_x = (p.nx + g.tile_w - 1) / g.tile_w;
  g.win_h = g.tile_h + 2 * p.ry;
  g.win_w = g.tile_w + 2 * p.rx;
  // 16 bytes for the alignment shift, 16 for the zero-filled tail chunk of the primitives.
  g.pitch = static_cast<int>(engine::align_up(static_cast<int64_t>(g.win_w) * esz + 32, 16));
  return g;
}

template <typename T>
__device__ __forceinline__ int row_shift(const T* plane, int64_t src_row, int64_t nx, int64_t xw) {
  return static_cast<int>((reinterpret_cast<uintptr_t>(plane) + static_cast<uintptr_t>((src_row * nx + xw) * static_cast<int64_t>(sizeof(T)))) & 15u);
}

template <engine::Mechanism M, int S, typename T>
__global__ void __launch_bounds__(kStencilThreads)
    stencil_kernel(const T* __restrict__ x, T* __restrict__ out, const acc_t<T>* __restrict__ weights,
                   StencilGeom g, Boundary boundary) {
  using A = acc_t<T>;
  using Ring = engine::Ring<M, S, 16>;
  extern __shared__ __align__(engine::kStageAlign) char smem[];
  __shared__ engine::RawShared<typename Ring::SharedState> ss;
  const int stage_bytes = g.win_h * g.pitch;
  A* w_s = reinterpret_cast<A*>(smem + static_cast<int64_t>(S) * stage_bytes);
  const int kw = 2 * g.rx + 1, nw = (2 * g.ry + 1) * kw;
  for (int i = threadIdx.x; i < nw; i += blockDim.x) w_s[i] = weights[i];
  __syncthreads();
  Ring ring(ss.get(), smem, stage_bytes);

  const int64_t tiles_per_plane = g.tiles_y * g.tiles_x;
  const int64_t ntiles = g.batch * tiles_per_plane;
  const int64_t mine = blockIdx.x < ntiles ? (ntiles - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  struct Tile { int64_t b, y0, x0; };
  auto tile_of = [&](int64_t k) {
    const int64_t t = blockIdx.x + k * gridDim.x;
    const int64_t b = t / tiles_per_plane, r = t % tiles_per_plane;
    return Tile{b, (r / g.tiles_x) * g.tile_h, (r % g.tiles_x) * g.tile_w};
  };

  auto load = [&](const auto& w, int64_t k) {
    const Tile t = tile_of(k);
    const T* plane = x + t.b * g.ny * g.nx;
    const int64_t yw = t.y0 - g.ry, xw = t.x0 - g.rx;
    const int64_t c_lo = xw < 0 ? 0 : xw;
    const int64_t c_hi = min(xw + g.win_w, g.nx);  // in-range columns [c_lo, c_hi)
    const engine::Team st = w.store_team();
    for (int i = 0; i < g.win_h; ++i) {
      const int64_t src_row = map_index_dev(yw + i, g.ny, boundary);
      char* row = w.stage + static_cast<int64_t>(i) * g.pitch;
      if (src_row < 0) {  // a zero row of the zero boundary
        if (st.rank >= 0)
          for (int c = st.rank; c < g.win_w; c += st.size)
            reinterpret_cast<T*>(row)[c] = from_acc<T>(A(0));
        continue;
      }
      const int shift = row_shift(plane, src_row, g.nx, xw);
      T* srow = reinterpret_cast<T*>(row + shift);
      const T* grow = plane + src_row * g.nx;
      // Halo columns stored directly right of the segment must not be zero-filled over.
      const auto tail = xw + g.win_w > g.nx ? engine::TailMode::Exact : engine::TailMode::MayOverwrite;
      if (c_hi > c_lo)
        w.copy(static_cast<int64_t>(i) * g.pitch + shift + (c_lo - xw) * static_cast<int64_t>(sizeof(T)), grow + c_lo,
               (c_hi - c_lo) * static_cast<int64_t>(sizeof(T)), tail);
      if (st.rank >= 0 && (xw < 0 || xw + g.win_w > g.nx)) {  // halo columns outside the plane
        for (int c = st.rank; c < g.win_w; c += st.size) {
          const int64_t gc = xw + c;
          if (gc >= 0 && gc < g.nx) continue;
          const int64_t mc = map_index_dev(gc, g.nx, boundary);
          srow[c] = mc < 0 ? from_acc<T>(A(0)) : grow[mc];
        }
      }
    }
  };

  auto consume = [&](const char* stage, int64_t k, engine::Team team) {
    const Tile t = tile_of(k);
    const T* plane = x + t.b * g.ny * g.nx;
    T* oplane = out + t.b * g.ny * g.nx;
    const int64_t yw = t.y0 - g.ry, xw = t.x0 - g.rx;
    for (int p = team.rank; p < g.tile_h * g.tile_w; p += team.size) {
      const int i = p / g.tile_w, j = p % g.tile_w;
      const int64_t oy = t.y0 + i, ox = t.x0 + j;
      if (oy >= g.ny || ox >= g.nx) continue;
      A acc = 0;
      for (int a = 0; a <= 2 * g.ry; ++a) {
        const int64_t src_row = map_index_dev(yw + i + a, g.ny, boundary);
        const int shift = src_row < 0 ? 0 : row_shift(plane, src_row, g.nx, xw);
        const T* srow = reinterpret_cast<const T*>(stage + static_cast<int64_t>(i + a) * g.pitch + shift);
        const A* wrow = w_s + a * kw;
        for (int c = 0; c < kw; ++c) acc += wrow[c] * to_acc<A>(srow[j + c]);
      }
      oplane[oy * g.nx + ox] = from_acc<T>(acc);
    }
  };
  engine::run_ring(ring, mine, load, consume);
}

template <engine::Mechanism M>
void launch_stencil_mechanism(const StencilParams& p) {
  dispatch_stages(p.stages, [&](auto s) {
    constexpr int S = decltype(s)::value;
    dispatch_dtype(p.dtype, [&](auto tv) {
      using T = decltype(tv);
      using A = acc_t<T>;
      const DeviceInfo dev = device_info(current_device());
      const size_t nw = static_cast<size_t>(2 * p.ry + 1) * (2 * p.rx + 1);
      const StencilGeom g = make_stencil_geom(p, sizeof(T), dev.max_smem_optin - 1024 - static_cast<int64_t>(nw * sizeof(A)));
      auto kernel = stencil_kernel<M, S, T>;
      const size_t smem = static_cast<size_t>(S) * g.win_h * g.pitch + nw * sizeof(A);
      prepare_smem(kernel, smem, "stencil");
      const int64_t ntiles = g.batch * g.tiles_y * g.tiles_x;
      int64_t grid = static_cast<int64_t>(dev.num_sms) * blocks_per_sm(kernel, kStencilThreads, smem);
      if (grid > ntiles) grid = ntiles;
      if (grid < 1) grid = 1;
      kernel<<<static_cast<unsigned>(grid), kStencilThreads, smem, reinterpret_cast<cudaStream_t>(p.stream)>>>(
          static_cast<const T*>(p.x), static_cast<T*>(p.out), static_cast<const A*>(p.weights), g, p.boundary);
      CUPIPE_LAUNCH_CHECK();
    });
  });
}

}  // namespace kernels
}  // namespace cupipe
