// The stencil's launch plan: which kernel family, tile geometry and grid a call gets, and the
// launch. Everything here runs on the host; the numbers behind each rule are in docs/design.md.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/kernel_id.h"
#include "kernels/launch_utils.cuh"
#include "kernels/stencil/kernel.cuh"
#include "kernels/tensor_map.cuh"

namespace cupipe {
namespace kernels {

static_assert(int(StencilFixed::Row9) - int(StencilFixed::Row3) == 3 &&
                  int(StencilFixed::Col9) - int(StencilFixed::Col3) == 3,
              "the fixed rows and columns are runs of four");
// The fixed consumer of n taps in a run of four (Row3..Row9, Col3..Col9: n = 3, 5, 7, 9), else None.
inline StencilFixed fixed_of_taps(int n, StencilFixed first) {
  if (n < 3 || n > 9 || n % 2 == 0) return StencilFixed::None;
  return static_cast<StencilFixed>(static_cast<int>(first) + (n - 3) / 2);
}

// The fixed consumer for this launch, or None (see StencilFixed): shapes with one, tiles whose
// rows share one shift (rows of whole 16-byte multiples), and a data pointer aligned to the
// consumer's vectors (then the shift puts the first taps where the consumer expects them). Taps a
// step apart: the stepped fixed rows and 3x3 box (below), else the general stepped consumer.
inline StencilFixed choose_fixed(const StencilGeom& g, const void* x, int esz) {
  if (g.step != 1) {
    // Taps a step apart: the stepped fixed rows and 3x3 box where x is aligned and a step is whole
    // 16-byte vectors or kCompiledStep (rows of up to kCompiledStepTaps) (consume_stepped_rows_fixed,
    // consume_stepped_box_fixed); else the general stepped consumer.
    const int kw = 2 * g.rx + 1;  // the compiled window's phase is the fixed consumer's radius's
    const bool compiled = g.step == kCompiledStep && (g.blocking == StencilBlocking::Row ? kw <= kCompiledStepTaps : kw == 3);
    if ((g.step * esz % 16 != 0 && !compiled) || !rows_of_16(g, esz) || reinterpret_cast<uintptr_t>(x) % 16 != 0 ||
        (esz == 2 && g.tile_w % kTwoByteTW != 0))
      return StencilFixed::None;
    if (g.blocking == StencilBlocking::Box3 && g.ry == 1) return StencilFixed::Box3x3;
    if (g.blocking != StencilBlocking::Row) return StencilFixed::None;
    return fixed_of_taps(kw, StencilFixed::Row3);
  }
  // The consumers' vectors are 16 bytes (kVecBytes, and the 2-byte types' items of kTwoByteTW
  // outputs where the Row and Narrow3 kernels take them; those need tiles of whole items). The
  // 2-byte box consumers also run items of kTW outputs, 8-byte vectors (StencilGeom::half_items).
  const uintptr_t mis = reinterpret_cast<uintptr_t>(x) % 16;
  if (!rows_of_16(g, esz) || (mis != 0 && !(mis == 8 && esz == 2 && g.blocking != StencilBlocking::Row)))
    return StencilFixed::None;
  if (esz == 2 && mis == 0 && g.tile_w % kTwoByteTW != 0) return StencilFixed::None;
  const int kh = 2 * g.ry + 1, kw = 2 * g.rx + 1;
  if (g.blocking == StencilBlocking::Row) return kh == 1 ? fixed_of_taps(kw, StencilFixed::Row3) : StencilFixed::None;
  if (g.blocking == StencilBlocking::Box1) return fixed_of_taps(kh, StencilFixed::Col3);  // one tap column (kw = 1)
  if (g.blocking == StencilBlocking::Box3 && kh == 3) return StencilFixed::Box3x3;
  if (g.blocking == StencilBlocking::Box5 && kh == 5) return StencilFixed::Box5x5;
  // The wide consumer: items 8 columns wide (tiles of at least two fp32 Box items across).
  if (g.blocking == StencilBlocking::Box9 && kh == 9 && kw == 9 && esz == 4 && g.tile_w % kWideTW == 0)
    return StencilFixed::Box9x9;
  return StencilFixed::None;
}

// The wide consumer reads its tap rows as 16-byte vectors: weight rows padded to
// kWideWeightPitch. False (and g unchanged) when the larger weights would not fit beside the
// stages.
inline bool widen_weight_rows(StencilGeom& g, int stages, int64_t smem_budget) {
  const int64_t bytes = engine::align_up(int64_t(g.kh_pad) * kWideWeightPitch * 4, 16);
  if (stages * g.stage_bytes + bytes > smem_budget) return false;
  g.kw_pad = kWideWeightPitch;
  g.weight_bytes = bytes;
  return true;
}

// The Wide9 kernel's tiles: 24 x 192 outputs, 8 x 16 items of kNarrowWideTH x
// kNarrowWideTW (make_stencil_geom counts in 8 x 4 Box items and gives a tile as many of them as
// it has consumers: 3 rows of 48), fewer columns and more rows for narrow planes. False (g
// unchanged) where the input has no wide consumer or the plane's size leaves tiles that are not
// whole items, a power of two of them across (the general kernel then runs the 4 x 8 items on its
// own tiles).
inline bool narrow_wide_geom(StencilGeom& g, const StencilParams& p, int64_t smem_budget, int align) {
  constexpr int kItemRows = 8, kItemCols = 16;  // items down and across a tile
  constexpr int kBoxRows = kItemRows * kNarrowWideTH / 8, kBoxColsWide = kItemCols * kNarrowWideTW / 4;
  static_assert(kItemRows * kNarrowWideTH % 8 == 0 && kItemCols * kNarrowWideTW % 4 == 0, "whole Box items");
  StencilGeom n = make_stencil_geom(p, 4, 4, kBoxRows * kBoxColsWide, smem_budget, align, kBoxColsWide);
  n.fixed = choose_fixed(n, p.x, 4);
  const int across = n.tile_w / kNarrowWideTW;
  if (n.fixed != StencilFixed::Box9x9 || n.tile_h % kNarrowWideTH != 0 || n.tile_w % kNarrowWideTW != 0 ||
      (across & (across - 1)) != 0)
    return false;
  n.cols_log2 = 0;
  while ((1 << n.cols_log2) < across) ++n.cols_log2;
  n.items = (n.tile_h / kNarrowWideTH) << n.cols_log2;
  g = n;
  return true;
}

// The tensor-core consumer for a 2-byte input where it applies (consumer_mma.cuh): sm_80+,
// 2-D boxes of at least kMmaMinTaps taps (3 <= kw <= 9, kh <= kMmaMaxKh), rows of whole 16-byte
// multiples (one shift for every row), tiles a multiple of 128 outputs wide, room for the
// fragments, and a column phase that lines the window rows up with ldmatrix (choose_mma_phase).
// Re-derives the tile grid for the phase. CUPIPE_STENCIL_MMA=0 turns it off (to compare).
// In the Box kernel only from kMmaMinTaps taps: below, the latency-bound MMA loop loses to the CUDA
// cores; 1-D rows measured even and stay on the CUDA cores (docs/design.md).
inline void choose_mma(StencilGeom& g, const StencilParams& p, const DeviceInfo& dev, int stages,
                       int min_taps = kMmaMinTaps) {
  const char* env = std::getenv("CUPIPE_STENCIL_MMA");
  if (env != nullptr && env[0] == '0') return;
  const int kh = 2 * g.ry + 1, kw = 2 * g.rx + 1, esz = 2;
  if (dev.code_sm < 80 || g.step != 1 || g.blocking == StencilBlocking::Row || kh * kw < min_taps || kw < 3 || kw > 9 ||
      kh > kMmaMaxKh || !rows_of_16(g, esz) || g.tile_w % kMmaUnit != 0 ||
      reinterpret_cast<uintptr_t>(p.out) % 4 != 0 || reinterpret_cast<uintptr_t>(p.x) % esz != 0)
    return;
  const int64_t frag = mma_fragment_bytes(kh, 2);  // kMmaTerms
  if (stages * g.stage_bytes + g.weight_bytes + frag > dev.max_smem_optin - 1024) return;
  int phase = 0, a = 0;
  if (!choose_mma_phase(static_cast<int>(reinterpret_cast<uintptr_t>(p.x) % 128 / esz), g.rx, kw, g.pitch, phase, a))
    return;
  g.fixed = StencilFixed::Mma;
  g.x_phase = phase;
  g.mma_a = a;
  g.frag_bytes = frag;
  set_tile_grid(g);
}

// The star pair's launches (stencil/star_pair.cuh), each through launch(kernel, flags): the star
// instance with one int of flags a block from `workspace`, then the general one; without a pair,
// the general one alone with null flags.
template <class K, class Launch>
void launch_star_pair(bool pair, K star, K general, int64_t grid, const std::function<void*(int64_t)>& workspace,
                      Launch&& launch) {
  int* flags = nullptr;
  if (pair) {
    if (!planning_kernels()) flags = static_cast<int*>(workspace(grid * static_cast<int64_t>(sizeof(int))));
    launch(star, flags);
  }
  launch(general, flags);
}

// The L2 promotion of the stencils' tensor maps, by the DRAM's peak rate: 128 bytes on the faster
// (HBM3e) parts, 256 on the slower ones; the same kernels prefer opposite settings (docs/design.md).
inline CUtensorMapL2promotion stencil_l2_promotion(const DeviceInfo& dev) {
  return dev.dram_peak_gbps >= 4000.0 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
}

// The alone-kernel for a box the Box geometry found a fixed consumer for, at one or two stages:
// Narrow3 for 2- and 4-byte types, Narrow5 for fp32 (the 2-byte 5x5 runs the tensor cores),
// Wide9 for fp32 at two stages; else Box.
template <typename T>
StencilFamily alone_family(StencilFixed f, int stages) {
  if (stages > 2 || sizeof(T) > 4) return StencilFamily::Box;
  if (f == StencilFixed::Box3x3) return StencilFamily::Narrow3;
  if (f == StencilFixed::Box5x5 && std::is_same_v<T, float>) return StencilFamily::Narrow5;
  if (f == StencilFixed::Box9x9 && std::is_same_v<T, float> && stages == 2) return StencilFamily::Wide9;
  return StencilFamily::Box;
}

// The Mma family for a 2-byte box of 5, 7 or 9 tap rows and 5 to 9 columns at two stages on
// sm_80+, else Box (choose_mma still has to agree).
inline StencilFamily mma_family(const StencilGeom& g, int stages, int sm) {
  const int kh = 2 * g.ry + 1, kw = 2 * g.rx + 1;
  if (stages != 2 || sm < 80 || g.blocking == StencilBlocking::Row || kw < 5 || kw > 9) return StencilFamily::Box;
  return kh == 5 ? StencilFamily::Mma5 : kh == 7 ? StencilFamily::Mma7 : kh == 9 ? StencilFamily::Mma9 : StencilFamily::Box;
}

// The header that defines stencil_kernel (an instance's compile includes it), and an instance's id.
constexpr const char* kStencilHeader = "kernels/stencil/kernel.cuh";
template <typename T>
std::string stencil_kernel_id(engine::Mechanism m, int stages, StencilFamily f, int terms) {
  return kernel_id("stencil_kernel", m, stages, type_c<T>{}, stencil_family_enumerator(f), terms);
}

struct StencilPlan {
  StencilGeom g;
  StencilFamily family;
};

// Stepped Box tiles (wide points: channels_last with many channels) whose ring would not hold the
// `blocks` an SM the family is compiled for: 8 halos across instead of 16, rows halved until the
// ring fits that share of the budget (measured in docs/design.md §4.2; rings that already fit lost
// with narrower tiles). No change where even that does not fit. `consumers`: the count g was tiled for.
inline void fit_stepped_blocks(StencilGeom& g, const StencilParams& p, int esz, int acc_size, int stages, int consumers,
                               int blocks, int64_t smem_budget, int align) {
  if (stages * g.stage_bytes + g.weight_bytes <= smem_budget / blocks) return;
  StencilGeom h = make_stencil_geom(p, esz, acc_size, consumers, smem_budget / blocks, align, kBoxCols, 8);
  if (h.blocking == g.blocking && stages * h.stage_bytes + h.weight_bytes <= smem_budget / blocks) {
    h.fixed = choose_fixed(h, p.x, esz);  // the fixed box's tiles of whole items: asked again of these
    g = h;
  }
}

// The family and geometry of one call. The 2-byte Narrow3 tiles are twice as wide (32 x 256: two
// 8-output items per thread and tile), which made the 2-byte types' 128-thread blocks win.
// The mechanism and stage count are p's (run-time values here: only the kernels are compiled
// per mechanism and stage count).
template <typename T>
StencilPlan plan_stencil(const StencilParams& p, const DeviceInfo& dev) {
  using A = acc_t<T>;
  const engine::Mechanism M = p.mechanism;
  const int S = p.stages;
  const bool kTma = M == engine::Mechanism::Tma;
  constexpr int64_t esz = sizeof(T);
  const int64_t smem_budget = dev.max_smem_optin - 1024, align = kTma ? 128 : 16;
  // A family of another block size tiles for its own consumer count (the fixed consumer's choice
  // does not depend on the tile).
  auto geom_for = [&](StencilFamily f, bool wide = false) {
    const int consumers = engine::consumer_threads(M, stencil_family_threads(f)) * (wide ? 2 : 1);
    StencilGeom gb = make_stencil_geom(p, esz, sizeof(A), consumers, smem_budget, align,
                                       wide ? 2 * kBoxCols : kBoxCols);
    gb.fixed = choose_fixed(gb, p.x, esz);
    // A 2-byte x 8 bytes off 16 (a crop 4 elements in): the fixed consumers take items of kTW
    // outputs, whose 8-byte vectors that alignment allows.
    gb.half_items = gb.fixed != StencilFixed::None && esz == 2 && reinterpret_cast<uintptr_t>(p.x) % 16 != 0;
    return gb;
  };
  StencilGeom g = geom_for(StencilFamily::Box);
  // Stepped tiles run in the SteppedRow/SteppedBox kernels whatever their consumer.
  StencilFamily fam = g.blocking == StencilBlocking::Row || g.step != 1 ? StencilFamily::Box
                                                                         : alone_family<T>(g.fixed, S);
  if (fam == StencilFamily::Wide9) {
    if (!narrow_wide_geom(g, p, smem_budget, align)) fam = StencilFamily::Box;
  } else if (fam != StencilFamily::Box) {
    g = geom_for(fam, esz == 2 && fam == StencilFamily::Narrow3);
  }
  if constexpr (esz == 2) {
    if (const StencilFamily mf = fam == StencilFamily::Box ? mma_family(g, S, dev.code_sm) : StencilFamily::Box;
        mf != StencilFamily::Box) {
      StencilGeom gm = geom_for(mf);
      choose_mma(gm, p, dev, S, 0);
      if (gm.fixed == StencilFixed::Mma) {
        g = gm;
        fam = mf;
      }
    }
  }
  if (g.fixed == StencilFixed::Box9x9 && !widen_weight_rows(g, S, smem_budget)) {
    g.fixed = StencilFixed::None;
    if (fam == StencilFamily::Wide9) {  // the general kernel and consumer, on its own tiles
      g = geom_for(StencilFamily::Box);
      g.fixed = StencilFixed::None;
      fam = StencilFamily::Box;
    }
  }
  if (g.step != 1 && g.blocking != StencilBlocking::Row)
    fit_stepped_blocks(g, p, esz, sizeof(A), S, engine::consumer_threads(M, stencil_family_threads(fam)),
                       StencilFamilyTraits<StencilFamily::SteppedBox, T>::kMinBlocks, smem_budget, align);
  // tma moves a 2-D tile as one tensor-map box when the map can describe the input: rows of
  // whole 16-byte multiples from a 16-byte aligned base, boxes of at most 256 x 256. An x 8 bytes
  // off 16 (a crop) is mapped from the 8 bytes of its storage before it (map_lead).
  constexpr int64_t kMaxCoord = 0x7fffffff;
  const uintptr_t mis = reinterpret_cast<uintptr_t>(p.x) % 16;
  g.tensor_tiles = kTma && dev.code_sm >= 90 && g.blocking != StencilBlocking::Row && rows_of_16(g, esz) &&
                   (mis == 0 || (mis == 8 && p.x_lead >= 8)) && g.pitch / tensor_map_unit(esz) <= 256 &&
                   g.win_h <= 256 && p.nx <= kMaxCoord && p.ny <= kMaxCoord && p.batch <= kMaxCoord;
  g.map_lead = g.tensor_tiles ? static_cast<int>(mis) : 0;
  if constexpr (esz == 2) {
    if (fam == StencilFamily::Box) {
      choose_mma(g, p, dev, S);
      if (g.fixed == StencilFixed::Mma) fam = StencilFamily::BoxMma;
    }
  }
  if (g.blocking == StencilBlocking::Row) fam = StencilFamily::Row;
  if (g.step != 1) fam = fam == StencilFamily::Row ? StencilFamily::SteppedRow : StencilFamily::SteppedBox;
  if (fam == StencilFamily::Box && g.fixed != StencilFixed::None) fam = StencilFamily::BoxFixed;
  return StencilPlan{g, fam};
}

// Whether family f's kernel runs the consumer the geometry asks for: each family compiles its own
// consumers only (family.cuh), and another would read g.fixed as something else.
inline bool family_fits(StencilFamily f, const StencilGeom& g) {
  if ((g.step != 1) != is_stepped_family(f)) return false;
  const bool fixed_box = g.fixed == StencilFixed::Box3x3 || g.fixed == StencilFixed::Box5x5 ||
                         g.fixed == StencilFixed::Box9x9 ||
                         (g.fixed >= StencilFixed::Col3 && g.fixed <= StencilFixed::Col9);
  switch (f) {
    case StencilFamily::Row:
    case StencilFamily::SteppedRow:
      return g.fixed == StencilFixed::None || (g.fixed >= StencilFixed::Row3 && g.fixed <= StencilFixed::Row9);
    case StencilFamily::SteppedBox: return g.fixed == StencilFixed::None || g.fixed == StencilFixed::Box3x3;
    case StencilFamily::Box: return g.fixed == StencilFixed::None;
    case StencilFamily::BoxFixed: return fixed_box;
    case StencilFamily::Narrow3: return g.fixed == StencilFixed::Box3x3;
    case StencilFamily::Narrow5: return g.fixed == StencilFixed::Box5x5;
    case StencilFamily::Wide9: return g.fixed == StencilFixed::Box9x9;
    case StencilFamily::Mma5:
    case StencilFamily::Mma7:
    case StencilFamily::Mma9:
    case StencilFamily::BoxMma: return g.fixed == StencilFixed::Mma;
  }
  return false;
}

inline void launch_stencil_plan(const StencilParams& p) {
  if (p.stages < 1 || p.stages > engine::kMaxStages)
    throw std::runtime_error("stages must be 1..8, got " + std::to_string(p.stages));
  const int S = p.stages;
  dispatch_dtype(p.dtype, [&](auto tv) {
    using T = decltype(tv);
    const DeviceInfo dev = device_info(current_device());
    StencilPlan plan = plan_stencil<T>(p, dev);
    StencilGeom& g = plan.g;
    CUtensorMap tmap{};
    if (g.tensor_tiles)
      tmap = make_plane_map(static_cast<const char*>(p.x) - g.map_lead, p.dtype, static_cast<int>(sizeof(T)), p.batch,
                            p.ny, p.nx, g.xs_row, g.xs_plane, g.pitch, g.win_h, stencil_l2_promotion(dev), g.map_lead);
    // plan_stencil picks families that have an instance for (S, T) and run its consumer; a plan
    // that does not is a bug here, reported rather than launched.
    const StencilFamily fam = plan.family;
    if (!stencil_family_exists<T>(fam, S) || !family_fits(fam, g))
      throw std::logic_error(std::string("cupipe: the stencil plan does not fit kernel family ") +
                             stencil_family_name(fam));
    const int threads = stencil_family_threads(fam);
    const cudaStream_t stream = reinterpret_cast<cudaStream_t>(p.stream);
    auto launch = [&](int terms) {
      const auto kernel = kernel_ref<const T*, T*, const void*, StencilGeom, Boundary, CUtensorMap>(
          kStencilHeader, stencil_kernel_id<T>(p.mechanism, S, fam, terms), stream);
      const size_t smem = static_cast<size_t>(S) * g.stage_bytes + g.weight_bytes + g.frag_bytes;
      prepare_smem(kernel, smem, "stencil");
      // One wave of persistent blocks; free_sms leaves SMs for another stream's kernels (the
      // halo exchange of cupipe.distributed's overlap), which could not start before it ends.
      // With tiles_per_block, more blocks than one wave (the scheduler balances the SMs) except
      // when SMs are to stay free: later waves would fill them.
      const int sms = std::max(1, dev.num_sms - std::max(0, p.free_sms));
      int64_t grid = static_cast<int64_t>(sms) * blocks_per_sm(kernel, threads, smem);
      if (p.blocks > 0) grid = p.blocks;
      else if (p.tiles_per_block > 0 && p.free_sms <= 0)
        grid = std::max(grid, (g.ntiles + p.tiles_per_block - 1) / p.tiles_per_block);
      if (grid > g.ntiles) grid = g.ntiles;
      if (grid < 1) grid = 1;
      if (p.blocks <= 0 && p.tiles_per_block <= 0 && grid < g.ntiles && g.blocking != StencilBlocking::Row)
        grid = column_coprime_grid(grid, g.tiles_x);  // one wave of persistent 2-D blocks
      set_block_tiles(g, grid);
      launch_kernel(kernel, dim3(static_cast<unsigned>(grid)), dim3(threads), smem, stream, false,
                    static_cast<const T*>(p.x), static_cast<T*>(p.out), p.weights, g, p.boundary, tmap);
    };
    // Mma families take one weight term for weights that came in x's dtype.
    launch(is_mma_family(fam) && p.weights_exact ? 1 : kMmaTerms<T>);
  });
}

}  // namespace kernels
}  // namespace cupipe
