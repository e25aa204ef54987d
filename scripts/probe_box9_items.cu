// The fp32 9x9 box's wide consumer (consume_tile_wide) with other item shapes, in a copy of the
// library's narrow 9x9 kernel (tma, two stages, persistent 128-thread blocks), beside the library's
// own, outside the torch extension. The question (thirty-fourth run): at 4 x 8 items (the
// library's until then, 32 x 128 tiles) the window rows are read as 16-byte vectors at a 32-byte
// lane stride, two lanes of each quarter warp on one bank group (8 wavefronts per load where 4
// would do, twenty-third run), and the 108 broadcast weight loads per item are a third of its
// shared-memory wavefronts. Items 12 columns wide put the lanes 48 bytes apart (conflict-free) and
// share each weight load among 12 outputs instead of 8. box9_items_kernel runs consume_tile_wide
// at any TH x TW, or consume_items_rot (each tap row's weights read once per item).
//
// Every configuration's output is compared with a plain reference kernel and bit for bit with the
// library kernel's (all add a point's 81 products in the same order). Times: the 9x9 runs at the
// board's power cap once it has been busy for a few ms (twenty-eighth run), so each configuration
// is timed held: rounds of `reps` queued launches (median), configurations interleaved, several
// rounds; NVML's energy counter and SM clock beside each round.
// Result (H100 and H200, thirty-fourth run; BENCHMARKS.md): 3 x 12 items on 24 x 192 tiles 2.6%
// fewer cycles, 1-2% held; the library's narrow kernel runs them since.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Icsrc -Iscripts \
//        -o /tmp/probe_box9_items scripts/probe_box9_items.cu csrc/kernels/device_info.cu -ldl
//   /tmp/probe_box9_items [reps = 2000] [rounds = 3]
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "kernels/stencil.cuh"
#include "probe_common.cuh"

using namespace cupipe;
using namespace cupipe::kernels;


// NVML through dlopen (the driver's library; no header needed): the board's energy counter (mJ)
// and SM clock, to tell a configuration's energy per call, which sets its time at the power cap.
struct Nvml {
  void* dev = nullptr;
  int (*energy_fn)(void*, unsigned long long*) = nullptr;
  int (*clock_fn)(void*, int, unsigned*) = nullptr;
  Nvml() {
    void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (h == nullptr) return;
    auto init = reinterpret_cast<int (*)()>(dlsym(h, "nvmlInit_v2"));
    auto by_index = reinterpret_cast<int (*)(unsigned, void**)>(dlsym(h, "nvmlDeviceGetHandleByIndex_v2"));
    energy_fn = reinterpret_cast<int (*)(void*, unsigned long long*)>(dlsym(h, "nvmlDeviceGetTotalEnergyConsumption"));
    clock_fn = reinterpret_cast<int (*)(void*, int, unsigned*)>(dlsym(h, "nvmlDeviceGetClockInfo"));
    if (init == nullptr || by_index == nullptr || energy_fn == nullptr || clock_fn == nullptr || init() != 0 ||
        by_index(0, &dev) != 0)
      dev = nullptr;
  }
  double joules() const {
    unsigned long long mj = 0;
    return dev != nullptr && energy_fn(dev, &mj) == 0 ? mj * 1e-3 : 0.0;
  }
  unsigned mhz() const {
    unsigned c = 0;
    return dev != nullptr && clock_fn(dev, 1, &c) == 0 ? c : 0;  // NVML_CLOCK_SM
  }
};

constexpr int K = 9, R = K / 2;
constexpr float kTol = 1e-4f;  // as probe_stencil_wide.cu: 81 products of |w| < 2, |x| < 1

// An item's TH x TW outputs from its accumulators: whole 16-byte vectors inside the plane, checked
// stores at its edges. consume_tile_wide's store, copied: moved out of the library consumer into a
// helper of its own, the same code compiled the narrow 9x9 kernel to other machine code (118 -> 116
// registers), and the tuned kernel stays as it was measured.
template <int TH, int TW>
__device__ __forceinline__ void store_item(float* oplane, int64_t oy, int64_t ox, const ConsumerGeom& g,
                                           bool out_vec_aligned, const float (&acc)[TH][TW]) {
  float* dst = oplane + oy * g.nx + ox;
  if (out_vec_aligned && oy + TH <= g.ny && ox + TW <= g.nx) {
#pragma unroll
    for (int o = 0; o < TH; ++o)
#pragma unroll
      for (int v = 0; v < TW / 4; ++v)
        reinterpret_cast<float4*>(dst + o * g.nx)[v] =
            make_float4(acc[o][4 * v], acc[o][4 * v + 1], acc[o][4 * v + 2], acc[o][4 * v + 3]);
    return;
  }
#pragma unroll
  for (int o = 0; o < TH; ++o) {
    if (oy + o >= g.ny) break;
#pragma unroll
    for (int v = 0; v < TW / 4; ++v) {
      if (ox + 4 * v >= g.nx) break;
      const float q[4] = {acc[o][4 * v], acc[o][4 * v + 1], acc[o][4 * v + 2], acc[o][4 * v + 3]};
      store_outputs<float>(dst + o * g.nx + 4 * v, g.nx - ox - 4 * v, q);
    }
  }
}

template <int I, int N, class F>
__device__ __forceinline__ void static_for(F&& f) {
  if constexpr (I < N) {
    f(std::integral_constant<int, I>{});
    static_for<I + 1, N>(f);
  }
}

// consume_tile_wide with each tap row's weights read once per item instead of once per output row
// that uses it: window row r brings tap row r into register slot r % TH, where the TH tap rows a
// window row applies (r - TH + 1 .. r) all still are; the slots are compile-time, so the middle
// rows run as a loop unrolled by TH (code about twice consume_tile_wide's).
template <int TH, int TW>
__device__ __noinline__ void consume_items_rot(uint32_t stage_s, uint32_t w_s, ConsumerGeom g, float* out, int rank,
                                               int size) {
  constexpr int KH = K, KW = K, kPerVec = 4;
  constexpr int M = (kPerVec - (KW / 2) % kPerVec) % kPerVec;
  constexpr int NX = TW + KW - 1;
  constexpr int NV = (M + NX + kPerVec - 1) / kPerVec;
  constexpr int KWV = (KW + kPerVec - 1) / kPerVec;
  constexpr int kMid = KH - TH + 1, kPeriods = kMid / TH, kRest = kMid % TH;
  const char* stage = static_cast<const char*>(__cvta_shared_to_generic(stage_s));
  const float4* w = static_cast<const float4*>(__cvta_shared_to_generic(w_s));
  const TileHeader t = *reinterpret_cast<const TileHeader*>(stage);
  const int shift = *reinterpret_cast<const int*>(stage + sizeof(TileHeader));
  const char* rows = stage + g.hdr_bytes + shift - M * 4;
  float* oplane = out + t.b * g.ny * g.nx;
  const bool out_vec_aligned = (reinterpret_cast<uintptr_t>(out) & 15) == 0;
  for (int p = rank; p < g.items; p += size) {
    const int j0 = (p & ((1 << g.cols_log2) - 1)) * TW, o0 = (p >> g.cols_log2) * TH;
    const int64_t oy = t.y0 + o0, ox = t.x0 + j0;
    if (oy >= g.ny || ox >= g.nx) continue;
    const char* item = rows + o0 * g.pitch + j0 * 4;
    float acc[TH][TW] = {};
    float wr[TH][KWV * kPerVec];
    // Window row r (runtime) whose slot r % TH is RM; tap rows k = r - o of the output rows o that
    // use it (R0: r itself when known, else -1: every o uses it).
    auto apply_row = [&](int r, auto rm_c, auto r0_c) {
      constexpr int RM = decltype(rm_c)::value, R0 = decltype(r0_c)::value;
      uint32_t words[NV * 4];
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        const uint4 u = reinterpret_cast<const uint4*>(item + r * g.pitch)[i];
        words[4 * i] = u.x; words[4 * i + 1] = u.y; words[4 * i + 2] = u.z; words[4 * i + 3] = u.w;
      }
      if (R0 < 0 || R0 < KH) {
#pragma unroll
        for (int i = 0; i < KWV; ++i) {
          const float4 v = w[r * (kWideWeightPitch / kPerVec) + i];
          wr[RM][4 * i] = v.x; wr[RM][4 * i + 1] = v.y; wr[RM][4 * i + 2] = v.z; wr[RM][4 * i + 3] = v.w;
        }
      }
      float x[NX];
#pragma unroll
      for (int e = 0; e < NX; ++e) x[e] = __uint_as_float(words[M + e]);
#pragma unroll
      for (int o = 0; o < TH; ++o) {
        if (R0 >= 0 && (R0 - o < 0 || R0 - o >= KH)) continue;
        constexpr int kSlots = TH;
        const int slot = ((RM - o) % kSlots + kSlots) % kSlots;
#pragma unroll
        for (int c = 0; c < KW; ++c)
#pragma unroll
          for (int tt = 0; tt < TW; ++tt) acc[o][tt] = fma(wr[slot][c], x[tt + c], acc[o][tt]);
      }
    };
    static_for<0, TH - 1>([&](auto rc) {
      apply_row(rc.value, std::integral_constant<int, rc.value % TH>{}, rc);
    });
#pragma unroll 1
    for (int i = 0; i < kPeriods; ++i)
      static_for<0, TH>([&](auto u) {
        apply_row(TH - 1 + i * TH + u.value, std::integral_constant<int, (TH - 1 + u.value) % TH>{},
                  std::integral_constant<int, -1>{});
      });
    static_for<0, kRest>([&](auto u) {
      constexpr int r = TH - 1 + kPeriods * TH + u.value;
      apply_row(r, std::integral_constant<int, r % TH>{}, std::integral_constant<int, r>{});
    });
    static_for<KH, KH + TH - 1>([&](auto rc) {
      apply_row(rc.value, std::integral_constant<int, rc.value % TH>{}, rc);
    });
    store_item<TH, TW>(oplane, oy, ox, g, out_vec_aligned, acc);
  }
}

// The library's narrow 9x9 kernel (stencil_kernel with NarrowK = 9, tma, two stages, zero
// boundary) with consume_tile_wide<9, 9, TH, TW> (Rot: consume_items_rot).
template <int TH, int TW, int MinBlocks, bool Rot>
__global__ void __launch_bounds__(128, MinBlocks)
    box9_items_kernel(const float* __restrict__ x, float* __restrict__ out, const float* __restrict__ weights,
                      StencilGeom g, Boundary /* zero: the probe's only */, const __grid_constant__ CUtensorMap tmap) {
  using Ring = engine::Ring<engine::Mechanism::Tma, 2, 16>;
  extern __shared__ __align__(engine::kStageAlign) char smem[];
  __shared__ engine::RawShared<typename Ring::SharedState> ss;
  float* w_s = reinterpret_cast<float*>(smem + 2 * g.stage_bytes);
  auto stage_weights = [&] {
    for (int i = threadIdx.x; i < g.kh_pad * g.kw_pad; i += blockDim.x) {
      const int a = i / g.kw_pad, c = i - a * g.kw_pad;
      w_s[i] = a < K && c < K ? weights[a * K + c] : 0.f;
    }
    __syncthreads();
  };
  Ring ring(ss.get(), smem, static_cast<int>(g.stage_bytes));
  const int64_t mine = block_tiles(g);
  auto load = [&](const auto& w, int64_t k) {
    load_stencil_tile<float, false>(w, x, g, Boundary::Zero, blockIdx.x + k * gridDim.x, &tmap);
  };
  const ConsumerGeom cg{g.ny, g.nx, K, K, g.kw_pad, g.pitch, g.hdr_bytes, g.items, g.cols_log2};
  auto consume = [&](const char* stage, int64_t, engine::Team team) {
    const uint32_t st = static_cast<uint32_t>(__cvta_generic_to_shared(stage));
    const uint32_t ws = static_cast<uint32_t>(__cvta_generic_to_shared(w_s));
    if constexpr (Rot) consume_items_rot<TH, TW>(st, ws, cg, out, team.rank, team.size);
    else consume_tile_wide<K, K, TH, TW>(st, ws, cg, out, team.rank, team.size);
  };
  engine::run_ring(ring, mine, load, consume, stage_weights);
}

using Buffers = ProbeBoxBuffers;

// A configuration, ready to launch: kernel, grid, shared memory, geometry, tensor map.
struct Config {
  const char* name;
  int th, tw, tile_h, tile_w, blocks_per_sm;
  int64_t grid;
  std::vector<float> ms;
  std::vector<double> mj, watts;  // per call; the round's mean
  std::vector<unsigned> mhz;   // after the round
  std::function<void()> launch;
};

StencilParams params(const Buffers& b) {
  StencilParams p;
  p.x = b.x; p.out = b.out; p.weights = b.w; p.dtype = DType::F32;
  p.batch = 1; p.ny = b.ny; p.nx = b.nx; p.ry = R; p.rx = R; p.boundary = Boundary::Zero;
  p.mechanism = engine::Mechanism::Tma; p.stages = 2;
  return p;
}

// A configuration of `kernel` (the library's stencil_kernel or box9_items_kernel) on tiles `g`:
// persistent blocks, one tensor-map box per tile.
template <class Kernel>
Config make_config(const char* name, int th, int tw, Kernel kernel, StencilGeom g, const Buffers& b) {
  const DeviceInfo dev = device_info(current_device());
  g.tensor_tiles = true;
  const size_t smem = 2 * static_cast<size_t>(g.stage_bytes) + g.weight_bytes;
  prepare_smem(kernel, smem, "probe");
  Config c;
  c.name = name;
  c.th = th; c.tw = tw; c.tile_h = g.tile_h; c.tile_w = g.tile_w;
  c.blocks_per_sm = blocks_per_sm(kernel, 128, smem);
  c.grid = std::min<int64_t>(int64_t(dev.num_sms) * c.blocks_per_sm, g.ntiles);
  set_block_tiles(g, c.grid);
  const CUtensorMap tmap =
      make_plane_map(b.x, DType::F32, 4, 1, b.ny, b.nx, g.pitch, g.win_h, stencil_l2_promotion(dev));
  const unsigned grid = static_cast<unsigned>(c.grid);
  c.launch = [=] { kernel<<<grid, 128, smem>>>(b.x, b.out, b.w, g, Boundary::Zero, tmap); };
  return c;
}

// The library's kernel, configured as its launcher does (narrow_wide_geom; probe_stencil_wide.cu's
// narrow/128/0).
Config library_config(const Buffers& b) {
  const int64_t budget = device_info(current_device()).max_smem_optin - 1024;
  StencilGeom g;
  if (!narrow_wide_geom(g, params(b), budget, 128) || !widen_weight_rows(g, 2, budget)) {
    std::fprintf(stderr, "no wide 9x9 consumer\n");
    std::exit(1);
  }
  auto kernel = stencil_kernel<engine::Mechanism::Tma, 2, float, true, 9, 128>;
  return make_config("library", kNarrowWideTH, kNarrowWideTW, kernel, g, b);
}

// box9_items_kernel<TH, TW> on tiles of `rows` x `items_across * TW` outputs.
template <int TH, int TW, int MinBlocks, bool Rot = false>
Config items_config(const Buffers& b, const char* name, int rows, int items_across) {
  const StencilParams p = params(b);
  const int64_t budget = device_info(current_device()).max_smem_optin - 1024;
  // make_stencil_geom counts tiles in 8 x 4 Box items: box_cols = tile_w / 4, and as many
  // consumers as make rows / 8 rows of them.
  const int tile_w = items_across * TW;
  StencilGeom g = make_stencil_geom(p, 4, 4, rows / 8 * (tile_w / 4), budget, 128, tile_w / 4);
  if (g.tile_w != tile_w || g.tile_h != rows || !widen_weight_rows(g, 2, budget)) {
    std::fprintf(stderr, "%s: tile %d x %d (asked %d x %d)\n", name, g.tile_h, g.tile_w, rows, tile_w);
    std::exit(1);
  }
  g.fixed = StencilFixed::Box9x9;
  g.cols_log2 = 0;
  while ((1 << g.cols_log2) < items_across) ++g.cols_log2;
  g.items = (rows / TH) << g.cols_log2;
  return make_config(name, TH, TW, box9_items_kernel<TH, TW, MinBlocks, Rot>, g, b);
}

void check(const Buffers& b, bool against_base, const char* what) {
  probe_check(b.out, against_base ? b.base : nullptr, b.ref, b.ny * b.nx, kTol, what);
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 2000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  const Buffers b = probe_box_buffers<K>(8192, 8192);
  const int64_t n = b.ny * b.nx;

  std::vector<Config> cs;
  cs.push_back(library_config(b));
  cs.push_back(items_config<4, 8, 4>(b, "4x8/32x128", 32, 16));  // the library's until the thirty-fourth run
  cs.push_back(items_config<3, 12, 4>(b, "3x12/48x96", 48, 8));
  cs.push_back(items_config<3, 12, 4>(b, "3x12/24x192", 24, 16));
  cs.push_back(items_config<3, 8, 4>(b, "3x8/24x128", 24, 16));
  cs.push_back(items_config<2, 12, 4>(b, "2x12/32x96", 32, 8));
  cs.push_back(items_config<4, 12, 3>(b, "4x12/64x96", 64, 8));
  cs.push_back(items_config<3, 12, 4, true>(b, "3x12r/48x96", 48, 8));
  for (size_t i = 0; i < cs.size(); ++i) {
    probe_fill_value<<<1024, 256>>>(b.out, n, 1e30f);  // poison
    cs[i].launch();
    PROBE_CHECK(cudaGetLastError());
    PROBE_CHECK(cudaDeviceSynchronize());
    check(b, i > 0, cs[i].name);
    if (i == 0) PROBE_CHECK(cudaMemcpy(b.base, b.out, n * sizeof(float), cudaMemcpyDeviceToDevice));
  }
  const float copy_ms = probe_median_ms([&] {
    PROBE_CHECK(cudaMemcpyAsync(b.base, b.x, n * sizeof(float), cudaMemcpyDeviceToDevice));
  }, 200);
  const Nvml nvml;
  for (int r = 0; r < rounds; ++r)
    for (auto& c : cs) {
      const double e0 = nvml.joules();
      const auto t0 = std::chrono::steady_clock::now();
      c.ms.push_back(probe_median_ms(c.launch, reps));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double e = nvml.joules() - e0;
      c.mj.push_back(1e3 * e / (reps + 1));
      c.watts.push_back(e / s);
      c.mhz.push_back(nvml.mhz());
    }
  std::printf("fp32 9x9 8192^2, tma/2, persistent; cudaMemcpyAsync %.4f ms; median of %d queued launches per round\n",
              copy_ms, reps);
  std::printf("%-13s %5s %9s %6s %6s  %s\n", "config", "item", "tile", "blk/SM", "grid",
              "ms per round (TFLOP/s of the best)");
  for (const auto& c : cs) {
    char item[16], tile[16];
    std::snprintf(item, sizeof(item), "%dx%d", c.th, c.tw);
    std::snprintf(tile, sizeof(tile), "%dx%d", c.tile_h, c.tile_w);
    std::printf("%-13s %5s %9s %6d %6lld ", c.name, item, tile, c.blocks_per_sm, static_cast<long long>(c.grid));
    for (float m : c.ms) std::printf(" %.4f", m);
    std::printf("  (%.1f)\n", 2.0 * K * K * n / (*std::min_element(c.ms.begin(), c.ms.end()) * 1e9));
    std::printf("%-13s  mJ/call", "");
    for (double m : c.mj) std::printf(" %.1f", m);
    std::printf("   W");
    for (double w : c.watts) std::printf(" %.0f", w);
    std::printf("   MHz");
    for (unsigned m : c.mhz) std::printf(" %u", m);
    std::printf("\n");
  }
  return 0;
}
