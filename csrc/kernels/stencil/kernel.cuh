// The pipelined 2-D stencil kernel (stencil1d maps onto it with ry = 0 or rx = 0): tiles stream
// through the engine's stage ring (tile_loader.cuh fills a stage, a consumer computes it). One
// template, one instance per mechanism, stage count, element type and kernel family
// (family.cuh); the family fixes the consumer, the block size and the register budget.
#pragma once

#include <cuda.h>  // CUtensorMap

#include <type_traits>

#include "engine/engine.cuh"
#include "kernels/numeric.cuh"
#include "kernels/stencil/consumer_fixed.cuh"
#include "kernels/stencil/consumer_general.cuh"
#include "kernels/stencil/consumer_mma.cuh"
#include "kernels/stencil/consumer_wide.cuh"
#include "kernels/stencil/family.cuh"
#include "kernels/stencil/geometry.cuh"
#include "kernels/stencil/tile_loader.cuh"

namespace cupipe {
namespace kernels {

// Runs the fixed consumer the launcher chose (see StencilFixed): the Row shapes in the Row kernel,
// the Box and column shapes in the BoxFixed kernel (each compiled under its kernel's register budget).
template <typename T, bool Box>
__device__ __forceinline__ void consume_fixed(StencilFixed f, uint32_t st, uint32_t ws, const ConsumerGeom& cg, T* out,
                                              int rank, int size) {
  if constexpr (Box) {
    if constexpr (std::is_same_v<T, float>) {
      if (f == StencilFixed::Box9x9) {
        consume_box9x9(st, ws, cg, out, rank, size);
        return;
      }
    }
    constexpr int TH = BoxBlocking<1>::TH;
    switch (f) {
      case StencilFixed::Box3x3: consume_tile_fixed<T, BoxBlocking<3>::TH, 3, 3>(st, ws, cg, out, rank, size); break;
      case StencilFixed::Box5x5: consume_tile_fixed<T, BoxBlocking<5>::TH, 5, 5>(st, ws, cg, out, rank, size); break;
      case StencilFixed::Col3: consume_tile_fixed<T, TH, 3, 1>(st, ws, cg, out, rank, size); break;
      case StencilFixed::Col5: consume_tile_fixed<T, TH, 5, 1>(st, ws, cg, out, rank, size); break;
      case StencilFixed::Col7: consume_tile_fixed<T, TH, 7, 1>(st, ws, cg, out, rank, size); break;
      default: consume_tile_fixed<T, TH, 9, 1>(st, ws, cg, out, rank, size); break;
    }
  } else {
    constexpr int TW = kItemTW<T>;
    const ConsumerGeom rg = in_item_tw<T>(cg);
    switch (f) {
      case StencilFixed::Row3: consume_tile_fixed<T, 1, 1, 3, TW>(st, ws, rg, out, rank, size); break;
      case StencilFixed::Row5: consume_tile_fixed<T, 1, 1, 5, TW>(st, ws, rg, out, rank, size); break;
      case StencilFixed::Row7: consume_tile_fixed<T, 1, 1, 7, TW>(st, ws, rg, out, rank, size); break;
      default: consume_tile_fixed<T, 1, 1, 9, TW>(st, ws, rg, out, rank, size); break;
    }
  }
}

// F: the family (family.cuh), with its preconditions from the launch plan: Narrow3/Narrow5 need
// g.fixed to be that box, Wide9 Box9x9 with widened weight rows (narrow_wide_geom), Mma5/7/9 and
// BoxMma g.fixed == Mma (choose_mma), BoxFixed a fixed box, SteppedRow/SteppedBox g.step > 1 (a fixed
// row / 3x3 box, or none), Box no fixed consumer, Row a fixed row or none (family_fits). Terms (Mma
// families): the weight terms the consumer multiplies, kMmaTerms<T>, or 1 for weights that came in
// x's dtype (a block whose fragments need more computes its tiles on the exact path).
template <engine::Mechanism M, int S, typename T, StencilFamily F, int Terms = kMmaTerms<T>>
__global__ void __launch_bounds__(StencilFamilyTraits<F, T>::kThreads, StencilFamilyTraits<F, T>::kMinBlocks)
    stencil_kernel(const T* __restrict__ x, T* __restrict__ out, const void* __restrict__ weights,
                   StencilGeom g, Boundary boundary, const __grid_constant__ CUtensorMap tmap) {
  if constexpr (!engine::mechanism_in_this_pass(M)) { __trap(); return; }  // tma below sm_90 (mechanism.h)
  using Fam = StencilFamilyTraits<F, T>;
  constexpr bool kBox = Fam::kBox;
  using A = acc_t<T>;
  using Ring = engine::Ring<M, S, 16>;
  extern __shared__ __align__(engine::kStageAlign) char smem[];
  __shared__ engine::RawShared<typename Ring::SharedState> ss;
  const int kh = 2 * g.ry + 1, kw = 2 * g.rx + 1;
  // The weights live in shared memory after the stages, loaded once per block and zero-padded to
  // whole passes and chunks: any radius fits (kernel parameters would cap it near 4 KiB), and a
  // pass reads its DY x CK weights once into registers with broadcast loads.
  A* w_s = reinterpret_cast<A*>(smem + static_cast<int64_t>(S) * g.stage_bytes);
  auto stage_weights = [&] {
    for (int i = threadIdx.x; i < g.kh_pad * g.kw_pad; i += blockDim.x) {
      const int a = i / g.kw_pad, c = i - a * g.kw_pad;
      w_s[i] = a < kh && c < kw ? weight_as<A>(weights, g.wdt, a * kw + c) : A(0);
    }
    __syncthreads();
  };
  // The alone-kernels run short-lived blocks: they set up (weights; fragments for Mma where every
  // tile is one tensor-map box, which writes every byte of its stage rows so no stage needs
  // zeroing) while the first tile loads (run_ring's ready). The persistent kernels set up first.
  bool late_setup = false;
  if constexpr (Fam::kMmaRows > 0 && M == engine::Mechanism::Tma) late_setup = g.tensor_tiles && boundary == Boundary::Zero;
  uint2* frag_s = reinterpret_cast<uint2*>(smem + static_cast<int64_t>(S) * g.stage_bytes + g.weight_bytes);
  if constexpr (!Fam::kFixedAlone) {
    if (!late_setup) stage_weights();
  }
  // The tensor-core consumer: its weight fragments, and the stages zeroed once, for the bytes the
  // loads leave unwritten that its 16-byte runs read and multiply by zero weights (finite, they
  // add nothing; left as they were, a NaN there would send units to the exact path).
  if constexpr (Fam::kMmaRows > 0 || F == StencilFamily::BoxMma) {
    static_assert(sizeof(T) == 2, "the tensor-core families are the 2-byte types'");
    if (!late_setup) {
      build_mma_fragments<T>(w_s, kh, kw, g.kw_pad, g.mma_a, frag_s, threadIdx.x, blockDim.x);
      for (int64_t i = threadIdx.x; i < S * g.stage_bytes / 16; i += blockDim.x)
        reinterpret_cast<uint4*>(smem)[i] = make_uint4(0, 0, 0, 0);
      if constexpr (M == engine::Mechanism::Tma) engine::sm90::fence_proxy_async_shared();  // bulk copies follow
      __syncthreads();
    }
  }
  Ring ring(ss.get(), smem, static_cast<int>(g.stage_bytes));

  const int64_t mine = block_tiles(g);
  auto load = [&](const auto& w, int64_t k) {
    load_stencil_tile<T, !Fam::kFixedAlone>(w, x, g, boundary, blockIdx.x + k * gridDim.x, &tmap);
  };

  const ConsumerGeom cg{g.ny, g.nx, kh, kw, g.kw_pad, g.pitch, g.hdr_bytes, g.items, g.cols_log2, g.step};
  auto consume = [&](const char* stage, int64_t, engine::Team team) {
    if constexpr (M == engine::Mechanism::Tma) {
      if (g.map_lead != 0 && boundary == Boundary::Zero) zero_lead_columns<T, true>(const_cast<char*>(stage), g, team);
    }
    if constexpr (Fam::kMmaRows > 0) {
      const MmaGeom mg{g.ny, g.nx, kh, kw, g.kw_pad, g.pitch, g.hdr_bytes, g.tile_h, g.cols_log2 - 5, g.mma_a};
      const uint32_t ws = static_cast<uint32_t>(__cvta_generic_to_shared(w_s));
      const uint32_t st = static_cast<uint32_t>(__cvta_generic_to_shared(stage));
      const uint32_t fs = ws + static_cast<uint32_t>(g.weight_bytes);
      consume_tile_mma_rows<T, Fam::kMmaRows, Fam::kMmaRoundRows, Terms>(st, fs, ws, mg, out, team.rank, team.size);
    } else if constexpr (F == StencilFamily::BoxMma) {
      const MmaGeom mg{g.ny, g.nx, kh, kw, g.kw_pad, g.pitch, g.hdr_bytes, g.tile_h, g.cols_log2 - 5, g.mma_a};
      const uint32_t ws = static_cast<uint32_t>(__cvta_generic_to_shared(w_s));
      consume_tile_mma<T, 4>(static_cast<uint32_t>(__cvta_generic_to_shared(stage)),
                             ws + static_cast<uint32_t>(g.weight_bytes), ws, mg, out, team.rank, team.size);
    } else if constexpr (Fam::kStepped) {  // taps a step apart, on Row's or Box's items
      const uint32_t st = static_cast<uint32_t>(__cvta_generic_to_shared(stage));
      const uint32_t ws = static_cast<uint32_t>(__cvta_generic_to_shared(w_s));
      // Steps of whole vectors (SC = 0) or the compiled step: the fixed rows and 3x3 box.
      auto fixed = [&](auto sc) {
        constexpr int SC = decltype(sc)::value;
        const ConsumerGeom rg = in_item_tw<T>(cg);
        if constexpr (!kBox) {
          if constexpr (SC > 0) {  // rows of up to kCompiledStepTaps
            if (g.fixed == StencilFixed::Row3) consume_stepped_rows_fixed<T, 3, SC>(st, ws, rg, out, team.rank, team.size);
            else consume_stepped_rows_fixed<T, 5, SC>(st, ws, rg, out, team.rank, team.size);
          } else {
            switch (g.fixed) {
              case StencilFixed::Row3: consume_stepped_rows_fixed<T, 3>(st, ws, rg, out, team.rank, team.size); break;
              case StencilFixed::Row5: consume_stepped_rows_fixed<T, 5>(st, ws, rg, out, team.rank, team.size); break;
              case StencilFixed::Row7: consume_stepped_rows_fixed<T, 7>(st, ws, rg, out, team.rank, team.size); break;
              default: consume_stepped_rows_fixed<T, 9>(st, ws, rg, out, team.rank, team.size); break;
            }
          }
        } else {
          consume_stepped_box_fixed<T, 3, 3, BoxBlocking<9>::TH, SC>(st, ws, rg, out, team.rank, team.size);
        }
      };
      if (kBox ? g.fixed == StencilFixed::Box3x3 : g.fixed != StencilFixed::None) {
        if (g.step == kCompiledStep) fixed(std::integral_constant<int, kCompiledStep>{});
        else fixed(std::integral_constant<int, 0>{});
        return;
      }
      consume_stepped_tile<T, std::conditional_t<kBox, BoxBlocking<9>, RowBlocking>>(st, ws, cg, out, team.rank,
                                                                                      team.size);
    } else if constexpr (F == StencilFamily::Wide9) {
      static_assert(std::is_same_v<T, float>, "the Wide9 kernel is the fp32 wide consumer's");
      consume_tile_wide<9, 9, kNarrowWideTH, kNarrowWideTW>(static_cast<uint32_t>(__cvta_generic_to_shared(stage)),
                                                            static_cast<uint32_t>(__cvta_generic_to_shared(w_s)), cg,
                                                            out, team.rank, team.size);
    } else if constexpr (Fam::kFixedK > 0) {
      static_assert(BoxBlocking<3>::TH == BoxBlocking<5>::TH, "narrow items split the Box item");
      ConsumerGeom ng = cg;
      ng.items = cg.items * (BoxBlocking<3>::TH / kNarrowTH);  // the same tile in items of kNarrowTH rows
      const uint32_t st = static_cast<uint32_t>(__cvta_generic_to_shared(stage));
      const uint32_t ws = static_cast<uint32_t>(__cvta_generic_to_shared(w_s));
      if constexpr (kItemTW<T> != kTW<T>) {
        if (g.half_items) {  // x 8 bytes off 16: the tile's own kTW items
          consume_tile_fixed<T, kNarrowTH, Fam::kFixedK, Fam::kFixedK, kTW<T>>(st, ws, ng, out, team.rank, team.size);
          return;
        }
      }
      consume_tile_fixed<T, kNarrowTH, Fam::kFixedK, Fam::kFixedK, kItemTW<T>>(st, ws, in_item_tw<T>(ng), out,
                                                                                team.rank, team.size);
    } else if constexpr (F == StencilFamily::BoxFixed) {
      consume_fixed<T, true>(g.fixed, static_cast<uint32_t>(__cvta_generic_to_shared(stage)),
                             static_cast<uint32_t>(__cvta_generic_to_shared(w_s)), cg, out, team.rank, team.size);
    } else {
      if constexpr (!kBox) {
        if (g.fixed != StencilFixed::None)
          consume_fixed<T, false>(g.fixed, static_cast<uint32_t>(__cvta_generic_to_shared(stage)),
                                  static_cast<uint32_t>(__cvta_generic_to_shared(w_s)), cg, out, team.rank, team.size);
        else
          consume_tile<T, RowBlocking>(stage, w_s, cg, out, team.rank, team.size);
      } else {
        const uint32_t st = static_cast<uint32_t>(__cvta_generic_to_shared(stage));
        const uint32_t ws = static_cast<uint32_t>(__cvta_generic_to_shared(w_s));
        switch (g.blocking) {
          case StencilBlocking::Box1: consume_box_tile<T, 1>(st, ws, cg, out, team.rank, team.size); break;
          case StencilBlocking::Box3: consume_box_tile<T, 3>(st, ws, cg, out, team.rank, team.size); break;
          case StencilBlocking::Box5: consume_box_tile<T, 5>(st, ws, cg, out, team.rank, team.size); break;
          default: consume_box_tile<T, 9>(st, ws, cg, out, team.rank, team.size); break;
        }
      }
    }
  };
  if constexpr (Fam::kFixedAlone) {
    engine::run_ring(ring, mine, load, consume, stage_weights);
  } else if constexpr (Fam::kMmaRows > 0) {
    engine::run_ring(ring, mine, load, consume, [&] {
      if (!late_setup) return;  // block-uniform
      stage_weights();
      build_mma_fragments<T>(w_s, kh, kw, g.kw_pad, g.mma_a, frag_s, threadIdx.x, blockDim.x);
      __syncthreads();  // the fragments' tail, written by thread 0
    });
  } else {
    engine::run_ring(ring, mine, load, consume);
  }
}

}  // namespace kernels
}  // namespace cupipe
