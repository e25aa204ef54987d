// The stencil kernel families: which consumer a stencil_kernel instance compiles, in what block
// size, under what register budget. The launch plan (launch_plan.cuh) picks one per call; the
// reasons and measurements behind each are in docs/design.md (4.2, "Consumers and kernel families").
#pragma once

#include <algorithm>
#include <type_traits>

namespace cupipe {
namespace kernels {

enum class StencilFamily : int {
  Row,      // 1-D signals and planes too short for Box items: the Row blocking or a fixed row
            // consumer (Row3..Row9), light and inlined, three blocks per SM
  Box,      // the general 2-D kernel: any box, through the Box blocking chosen per call
  Narrow3,  // the fixed 3x3 consumer alone (2- and 4-byte types, 1-2 stages)
  Narrow5,  // the fixed 5x5 consumer alone (fp32, 1-2 stages)
  Wide9,    // the fp32 9x9 wide consumer alone, on 3 x 12 items (two stages)
  Mma5,     // the 2-byte tensor-core consumer alone with 5, 7 or 9 tap rows in registers
  Mma7,     // (two stages)
  Mma9,
  BoxMma,   // the 2-byte tensor-core consumer over any tap rows, on Box's block and tiles
  SteppedRow,  // taps a step apart (g.step > 1): the stepped consumer on Row's items and block,
  SteppedBox,  // on Box's
  BoxFixed,    // the fixed 3x3/5x5 and fp32 9x9 wide consumers on Box's block and tiles (deeper
               // rings, fp64, tiles the alone-kernels do not take)
};
// BoxMma, BoxFixed and the Stepped families were run-time branches of Box (and Row): apart, no
// kernel compiles a consumer it does not run, which keeps each first-use compile short.

// Output rows per item of the Narrow3/Narrow5 kernels: half a Box item, so that the 3x3 compiles
// within its register budget without spilling.
constexpr int kNarrowTH = 4;

// Block size of the kernels that run one consumer alone (every type): short-lived blocks, four
// to six per SM, meet their tiles' barriers less in step than two large ones.
constexpr int kNarrowThreads = 128;
constexpr int kStencilThreads = 256;

constexpr bool is_mma_family(StencilFamily f) {
  return f == StencilFamily::Mma5 || f == StencilFamily::Mma7 || f == StencilFamily::Mma9;
}

constexpr bool is_stepped_family(StencilFamily f) {
  return f == StencilFamily::SteppedRow || f == StencilFamily::SteppedBox;
}

// The families on Row's or Box's block size (the others run kNarrowThreads).
constexpr bool is_wide_block_family(StencilFamily f) {
  return f == StencilFamily::Row || f == StencilFamily::Box || f == StencilFamily::BoxMma ||
         f == StencilFamily::BoxFixed || is_stepped_family(f);
}

template <StencilFamily F, typename T>
struct StencilFamilyTraits {
  static constexpr bool kBox = F != StencilFamily::Row && F != StencilFamily::SteppedRow;  // 2-D tiles of Box items
  static constexpr bool kStepped = is_stepped_family(F);
  // The CUDA-core consumers that run alone: they stage the weights while the first tile loads,
  // and every warp loads (no one-warp tensor-map load).
  static constexpr bool kFixedAlone =
      F == StencilFamily::Narrow3 || F == StencilFamily::Narrow5 || F == StencilFamily::Wide9;
  static constexpr int kFixedK = F == StencilFamily::Narrow3 ? 3 : F == StencilFamily::Narrow5 ? 5 : 0;
  // Tap rows held at compile time by the tensor-core families (0 otherwise).
  static constexpr int kMmaRows = F == StencilFamily::Mma5 ? 5 : F == StencilFamily::Mma7 ? 7 : F == StencilFamily::Mma9 ? 9 : 0;
  static constexpr int kThreads = is_wide_block_family(F) ? kStencilThreads : kNarrowThreads;
  // Resident warps per SM the register budget is compiled for (65536 / (32 x warps) registers a
  // thread): Row and Narrow3 24 (85, 80), Narrow5 20 (102), Box, Wide9 and the Mma kinds 16
  // (128), fp64 Box 8 (what its 9-wide passes need); SteppedRow as Row, BoxFixed as Box, SteppedBox
  // as Box but 24 for the 2-byte types (their tiles of wide points fit three blocks' rings: §4.2).
  static constexpr int kMinWarps = !kBox || F == StencilFamily::Narrow3                            ? 24
                                   : F == StencilFamily::Narrow5                                     ? 20
                                   : F == StencilFamily::SteppedBox && sizeof(T) == 2               ? 24
                                   : kThreads == kStencilThreads && sizeof(T) == 8                  ? 8
                                                                                                     : 16;
  static constexpr int kMinBlocks = std::max(1, kMinWarps / (kThreads / 32));
  // Rows per tensor-core round: 8, halved for 9 tap rows, whose fragments need the registers.
  static constexpr int kMmaRoundRows = kMmaRows <= 7 ? 8 : 4;
};

inline const char* stencil_family_name(StencilFamily f) {
  switch (f) {
    case StencilFamily::Row: return "row";
    case StencilFamily::Box: return "box";
    case StencilFamily::Narrow3: return "narrow3";
    case StencilFamily::Narrow5: return "narrow5";
    case StencilFamily::Wide9: return "wide9";
    case StencilFamily::Mma5: return "mma5";
    case StencilFamily::Mma7: return "mma7";
    case StencilFamily::Mma9: return "mma9";
    case StencilFamily::BoxMma: return "box_mma";
    case StencilFamily::SteppedRow: return "stepped_row";
    case StencilFamily::SteppedBox: return "stepped_box";
    case StencilFamily::BoxFixed: return "box_fixed";
  }
  return "?";
}

// The enumerator as written in a kernel id (kernel_id.h).
inline const char* stencil_family_enumerator(StencilFamily f) {
  switch (f) {
    case StencilFamily::Row: return "StencilFamily::Row";
    case StencilFamily::Box: return "StencilFamily::Box";
    case StencilFamily::Narrow3: return "StencilFamily::Narrow3";
    case StencilFamily::Narrow5: return "StencilFamily::Narrow5";
    case StencilFamily::Wide9: return "StencilFamily::Wide9";
    case StencilFamily::Mma5: return "StencilFamily::Mma5";
    case StencilFamily::Mma7: return "StencilFamily::Mma7";
    case StencilFamily::Mma9: return "StencilFamily::Mma9";
    case StencilFamily::BoxMma: return "StencilFamily::BoxMma";
    case StencilFamily::SteppedRow: return "StencilFamily::SteppedRow";
    case StencilFamily::SteppedBox: return "StencilFamily::SteppedBox";
    case StencilFamily::BoxFixed: return "StencilFamily::BoxFixed";
  }
  return "?";
}

// The block size of a family (the host's view of StencilFamilyTraits::kThreads).
constexpr int stencil_family_threads(StencilFamily f) {
  return is_wide_block_family(f) ? kStencilThreads : kNarrowThreads;
}

// Which families have instances for a stage count and element type: the alone-kernels only where
// they are chosen (1-2 stages; deeper rings do not fit their blocks per SM), so that the
// instances stay few (cupipe/_kernels.py lists the same). plan_stencil picks only these.
template <typename T>
constexpr bool stencil_family_exists(StencilFamily f, int stages) {
  switch (f) {
    case StencilFamily::Row:
    case StencilFamily::Box:
    case StencilFamily::SteppedRow:
    case StencilFamily::SteppedBox:
    case StencilFamily::BoxFixed: return true;
    case StencilFamily::Narrow3: return stages <= 2 && sizeof(T) <= 4;
    case StencilFamily::Narrow5: return stages <= 2 && std::is_same_v<T, float>;
    case StencilFamily::Wide9: return stages == 2 && std::is_same_v<T, float>;
    case StencilFamily::BoxMma: return sizeof(T) == 2;
    default: return stages == 2 && sizeof(T) == 2;  // Mma5/7/9
  }
}

}  // namespace kernels
}  // namespace cupipe
