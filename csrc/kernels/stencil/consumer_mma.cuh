// The tensor-core consumer of the 2-byte stencils (fp16, bf16; sm_80+): StencilFixed::Mma in the
// Box kernel, alone in the Mma5/Mma7/Mma9 kernels.
//
// One output row of a stencil is a banded (Toeplitz) matrix product. A unit of 128 consecutive
// outputs of one row is a 16 x 8 matrix, 16 groups m of 8 outputs j, and tap row k adds
//
//   out[8m + j] += sum_i A_k[m][i] * B_k[i][j],   A_k[m][i] = win[o + k][8m - a + i],
//                                                   B_k[i][j] = w[k][i - j - a]  (0 off the stencil)
//
// with i < 16: one m16n8k16 MMA per tap row when a + kw <= 9. A_k's 16 rows are overlapping runs
// of one window row, 16 bytes apart, so one ldmatrix.x4 loads them (conflict-free: each of its
// four 8x8 matrices is 128 contiguous bytes) from 16-byte boundaries, which is what `a` is for:
// window column -a sits on one. B_k is the same for every unit: each block builds the fragments
// once, into shared memory after the weights. Two consumers: consume_tile_mma (the general
// kernel's, any number of tap rows) reloads one tap row's fragments per round of R = 4 units
// (their accumulators stay in registers across all tap rows); consume_tile_mma_rows (the narrow
// tensor-core kernels', KH tap rows at compile time) keeps every fragment in registers and takes
// rounds of R rows of one unit column, loading each window row once for all the tap rows it
// meets (R + KH - 1 ldmatrix per round instead of R x KH).
//
// The weights are fp32 (the accumulation type). For fp16 each is scaled by a power of two (the
// largest |w| lands in [0.5, 1): inside fp16's range; bf16 has fp32's exponents and stays as it
// is, see mma_weight_exponent) and split into two 2-byte terms w = w_1 + w_2, w_2 the rounding of
// what w_1 left: fp16's carry 22 bits (a weight below 2^-14 of the largest loses bits to fp16's
// subnormals: at most 2^-22 of the largest weight), bf16's 16, each weight within 2^-16 of itself.
// fp32 accumulation errs by ~2^-24 per tap; bf16's 2^-16 of sum |w x| is 2^7 below its result's
// own rounding (half an ulp, 2^-9) unless the sum cancels by more than that, and 2^7 finer than
// F.conv2d's bf16 weights (8 bits). A third bf16 term (fp32's 24 bits) costs 15 MMAs per tap row
// and unit where two cost 10, and put the bf16 5x5 behind the CUDA cores (docs/design.md). The inputs are exact 2-byte values, so every product
// is exact and the MMAs accumulate in fp32, as the CUDA-core consumer does; the result is unscaled
// exactly (a power of two).
//
// A's elements outside one output's stencil meet zeros of B, and 0 * inf is NaN: an inf or NaN in
// the window would reach up to 16 neighbouring outputs. So a unit whose result is not all finite
// is recomputed exactly on the CUDA cores (every tap, like the reference): only units near
// non-finite inputs (or sums that overflow) pay for it, and no output differs from the
// CUDA-core consumer's but by fp32 rounding.
//
// Preconditions (the launcher's choice, choose_mma in launch_plan.cuh): every window row shares one
// shift, 2a bytes, which the tiles' column phase arranges (choose_mma_phase: tiles start up to 62
// columns left of the usual grid); tiles start at even columns (outputs leave as 2-element
// words) and are a multiple of 128 outputs wide; 3 <= kw <= 9, a + kw <= 9. A tile whose rows
// arrive at another shift (none should) is computed on the exact path. Tensor-map boxes can not
// start at the window instead (a = 0 without a phase): an innermost box coordinate off a 16-byte
// boundary faults (illegal instruction).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/numeric.cuh"
#include "kernels/stencil/geometry.cuh"

namespace cupipe {
namespace kernels {

constexpr int kMmaUnit = 128;  // outputs per unit (16 groups of 8)
constexpr int kMmaMaxKh = 17;  // tap rows whose fragments the launcher agrees to hold
constexpr int kMmaMinTaps = 35;  // in the general kernel (choose_mma); the narrow kernels go lower

// 2-byte terms that carry an fp32 weight (see above).
template <typename T>
constexpr int kMmaTerms = 2;

// Shared memory of the fragments (kh x terms x 32 lanes x 8 bytes), then the float 2^e that
// undoes the weights' scale and the int count of terms that carry anything (MmaFragTail).
inline int64_t mma_fragment_bytes(int kh, int terms) { return int64_t(kh) * terms * 32 * 8 + 16; }

// The tiles' column phase (tiles start at tx * tile_w - phase, 0 <= phase < 64) and the A offset
// a, for an input whose data pointer lies `x_off` elements past a 128-byte boundary (rows of whole
// 16-byte multiples) and window rows `pitch` bytes wide: an even origin residue r (mod 64) whose
// window column -a lands on a 16-byte boundary with a + kw <= 9 (the MMA's layout), and of those
// the one whose window rows, read from that boundary, touch the fewest 128-byte lines (then the
// smallest phase). False when no residue is valid (an odd offset with rx = 4).
// The lines are what the tensor-map loads pay for (docs/design.md). Rows whose length is not a
// multiple of 128 bytes start at other offsets; the rule then fits the first row.
inline bool choose_mma_phase(int x_off, int rx, int kw, int pitch, int& phase, int& a) {
  int best = 1 << 30;
  for (int r = 0; r < 64; r += 2) {
    const int aa = ((x_off + r - rx) % 8 + 8) % 8;
    if (aa + kw > 9) continue;
    const int start = (((x_off + r - rx - aa) % 64) + 64) % 64 * 2;  // byte offset in its line
    const int lines = (start + pitch + 127) / 128, ph = (64 - r) % 64;
    if (lines * 64 + ph < best) {
      best = lines * 64 + ph;
      phase = ph;
      a = aa;
    }
  }
  return best < (1 << 30);
}

struct MmaGeom {
  int64_t ny, nx;
  int kh, kw, kw_pad, pitch, hdr_bytes;
  int tile_h, units_log2;  // units per tile row: 1 << units_log2
  int a;
};

#if defined(__CUDACC__)

template <typename T>
__device__ __forceinline__ float round_to(float v) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(__float2half_rn(v));
  else return __bfloat162float(__float2bfloat16_rn(v));
}

// Two values rounded to T, the first in the low half (the lower matrix index).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

// The power of two e with the largest finite |w| in [0.5, 1) * 2^e (0 when there is none),
// clamped so that 2^-e and 2^e are normal floats; 0 also when the largest |w| is in [0.5, 4)
// (common weights: inside fp16's range as they are, and the narrow kernel skips the unscale
// multiply, 32 FMULs per round), and for bf16 whenever it is in [2^-100, 2^100]: bf16 has fp32's
// exponent range, so its terms stay normal unscaled. By whole warps, each lane a share of the
// weights and one max over the warp (the largest |w| by its bits: non-negative floats order as
// their bit patterns): every thread scanning all kh x kw weights was the largest part of a short-
// lived block's set-up.
template <typename T>
__device__ __forceinline__ int mma_weight_exponent(const float* w, int kh, int kw, int kw_pad, int lane) {
  unsigned bits = 0;
  for (int i = lane; i < kh * kw; i += 32) {
    const int k = i / kw;
    const float v = fabsf(w[k * kw_pad + (i - k * kw)]);
    if (v <= 3.0e38f) bits = max(bits, __float_as_uint(v));  // skips inf and NaN
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  bits = __reduce_max_sync(0xffffffffu, bits);
#else
  for (int d = 16; d > 0; d >>= 1) bits = max(bits, __shfl_xor_sync(0xffffffffu, bits, d));
#endif
  const float m = __uint_as_float(bits);
  if (!(m > 0.f)) return 0;
  int e;
  frexpf(m, &e);
  if (std::is_same_v<T, __nv_bfloat16> && e >= -100 && e <= 100) return 0;
  return e >= 0 && e <= 2 ? 0 : max(-100, min(100, e));
}

// What follows the fragments: the unscale factor, and 1 when every weight (scaled) is exact in T,
// so that the later terms are all zero and a consumer may skip their MMAs (weights given in the
// input's own dtype, as F.conv2d takes them: half the MMAs; the sums are the same), else
// kMmaTerms<T>.
struct MmaFragTail {
  float unscale;
  int terms;
};

// The B fragments of every tap row and term, fragment (k * terms + term) * 32 + lane, then the
// MmaFragTail, by every thread (tid, nthreads: whole warps) of the block (it ends in a block-wide
// vote).
// Lane (g, t) of an m16n8k16 B fragment holds B[2t][g], B[2t + 1][g] (first word) and
// B[2t + 8][g], B[2t + 9][g] (second).
template <typename T>
__device__ void build_mma_fragments(const float* w, int kh, int kw, int kw_pad, int a, uint2* frag, int tid,
                                    int nthreads) {
  constexpr int NT = kMmaTerms<T>;
  const int e = mma_weight_exponent<T>(w, kh, kw, kw_pad, tid & 31);
  const float s = ldexpf(1.f, -e);
  bool later_terms = false;  // does a term past the first carry anything?
  for (int idx = tid; idx < kh * NT * 32; idx += nthreads) {
    const int lane = idx & 31, k = (idx >> 5) / NT, term = (idx >> 5) % NT;
    const int g = lane >> 2, t = lane & 3;
    float v[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int c = 2 * t + (q & 1) + (q >> 1) * 8 - g - a;  // tap column of B[i][g]
      float r = c >= 0 && c < kw ? w[k * kw_pad + c] * s : 0.f;
      for (int i = 0; i < term; ++i) r -= round_to<T>(r);  // what the earlier terms left
      v[q] = r;
      later_terms |= term > 0 && r != 0.f;
    }
    frag[idx] = make_uint2(pack2<T>(v[0], v[1]), pack2<T>(v[2], v[3]));
  }
  const bool any_later = __syncthreads_or(later_terms);
  if (tid == 0) *reinterpret_cast<MmaFragTail*>(frag + kh * NT * 32) = {ldexpf(1.f, e), any_later ? NT : 1};
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint2 b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
  }
#else
  __trap();  // the launcher never selects the consumer below sm_80
#endif
}

// Outputs col and col + 1 of an output row (col even: one 4-byte word when both are in the plane).
template <typename T>
__device__ __forceinline__ void store_pair(T* orow, int64_t col, int64_t nx, float v0, float v1) {
  if (col >= 0 && col + 1 < nx) {
    *reinterpret_cast<uint32_t*>(orow + col) = pack2<T>(v0, v1);
  } else {
    if (col >= 0 && col < nx) orow[col] = from_acc<T>(v0);
    if (col + 1 >= 0 && col + 1 < nx) orow[col + 1] = from_acc<T>(v1);
  }
}

// Unit (o, s) computed tap by tap on the CUDA cores, every tap multiplied as the reference does:
// the exact answer where the MMAs met a non-finite value. `rows` is window row 0's column 0.
template <typename T>
__device__ __noinline__ void mma_unit_exact(const char* rows, const float* w, MmaGeom g, int o, int s, int64_t x0,
                                            T* orow, int lane) {
  for (int q = 0; q < kMmaUnit / 32; ++q) {
    const int j = s * kMmaUnit + 32 * q + lane;  // tile column
    if (x0 + j < 0 || x0 + j >= g.nx) continue;
    float acc = 0.f;
    for (int k = 0; k < g.kh; ++k) {
      const T* r = reinterpret_cast<const T*>(rows + (o + k) * g.pitch) + j;
      for (int c = 0; c < g.kw; ++c) acc = fmaf(w[k * g.kw_pad + c], to_acc<float>(r[c]), acc);
    }
    orow[x0 + j] = from_acc<T>(acc);
  }
}

// Every unit of the tile on the exact path, by the consuming warps: a tile whose rows arrived at
// another shift than the fragments' layout (none should).
template <typename T>
__device__ __forceinline__ void mma_tile_exact(const char* stage, int shift, const TileHeader& t, const float* w,
                                               MmaGeom g, T* out, int warp, int nwarps, int lane) {
  const int smask = (1 << g.units_log2) - 1;
  for (int u = warp; u < (g.tile_h << g.units_log2); u += nwarps) {
    const int o = u >> g.units_log2;
    if (t.y0 + o < g.ny)
      mma_unit_exact<T>(stage + g.hdr_bytes + shift, w, g, o, u & smask, t.x0, out + (t.b * g.ny + t.y0 + o) * g.nx,
                        lane);
  }
}

// Unit (o, s) of a tile whose row o is in the plane, from its accumulators times `scale`: checked
// stores (edge tiles), or the exact path when the accumulators are not all finite.
template <typename T>
__device__ __forceinline__ void mma_store_unit_checked(const float (&acc)[4], float scale, const char* stage,
                                                       int shift, const TileHeader& t, const float* w, MmaGeom g,
                                                       int o, int s, T* orow, int lane, int lane_col) {
  if (!__all_sync(0xffffffffu, isfinite((acc[0] + acc[1]) + (acc[2] + acc[3])))) {
    mma_unit_exact<T>(stage + g.hdr_bytes + shift, w, g, o, s, t.x0, orow, lane);
    return;
  }
  const int64_t col = t.x0 + s * kMmaUnit + lane_col;
  store_pair<T>(orow, col, g.nx, acc[0] * scale, acc[1] * scale);
  store_pair<T>(orow, col + 64, g.nx, acc[2] * scale, acc[3] * scale);
}

// The tile in `stage` (shared address) on the tensor cores, by the consuming warps (rank, size:
// whole warps), R units per warp at a time. `frag_s`: the B fragments and the unscale factor;
// `w_s`: the fp32 weights (for mma_unit_exact). Inlined: a call would make the kernel save its
// live registers around it.
template <typename T, int R>
__device__ __forceinline__ void consume_tile_mma(uint32_t stage_s, uint32_t frag_s, uint32_t w_s, MmaGeom g, T* out,
                                                 int rank, int size) {
  constexpr int NT = kMmaTerms<T>;
  const int lane = rank & 31, warp = rank >> 5, nwarps = size >> 5;
  const char* stage = static_cast<const char*>(__cvta_shared_to_generic(stage_s));
  const uint2* frag = static_cast<const uint2*>(__cvta_shared_to_generic(frag_s));
  const float unscale = reinterpret_cast<const MmaFragTail*>(frag + g.kh * NT * 32)->unscale;
  const TileHeader t = *reinterpret_cast<const TileHeader*>(stage);
  const int shift = *reinterpret_cast<const int*>(stage + sizeof(TileHeader));  // == 2a, every row
  const uint32_t rows_s = stage_s + g.hdr_bytes;  // window column -a of row 0: 16-byte aligned
  // ldmatrix: lanes 8q .. 8q + 7 address the rows of matrix q: A rows m = (lane & 7) + 8 (q & 1),
  // columns 8 (q >> 1) on (16 bytes per 8 columns; A row m starts 16 m bytes in).
  const uint32_t lane_off = 16u * ((lane & 7) + 8 * ((lane >> 3) & 1) + (lane >> 4));
  const int nunits = g.tile_h << g.units_log2, smask = (1 << g.units_log2) - 1;
  const uint32_t pitch = static_cast<uint32_t>(g.pitch);
  // Outputs of unit u: tile_out + (u >> units_log2) * nx + (u & smask) * 128 + 8g + 2t (+64). A
  // tile inside the plane (most) stores them unchecked.
  const int64_t tile_out = (t.b * g.ny + t.y0) * g.nx + t.x0;
  const bool inside = t.x0 >= 0 && t.x0 + (int64_t(kMmaUnit) << g.units_log2) <= g.nx && t.y0 + g.tile_h <= g.ny;
  const int lane_col = 8 * (lane >> 2) + 2 * (lane & 3);
  if (shift != 2 * g.a) {  // not the layout the fragments were built for
    mma_tile_exact<T>(stage, shift, t, static_cast<const float*>(__cvta_shared_to_generic(w_s)), g, out, warp, nwarps,
                      lane);
    return;
  }
  // A warp takes rounds of R consecutive units (rows of the tile, or runs of a wide row). No
  // per-unit guards in the MMA loop (each would cost a branch and a warp sync per instruction):
  // a round past the tile's last unit recomputes that unit and stores nothing.
  for (int u0 = warp * R; u0 < nunits; u0 += nwarps * R) {
    uint32_t addr[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int u = min(u0 + i, nunits - 1);
      addr[i] = rows_s + static_cast<uint32_t>(u >> g.units_log2) * pitch +
                static_cast<uint32_t>(u & smask) * (2 * kMmaUnit) + lane_off;
    }
    float acc[R][4] = {};
    // Pipelined over the tap rows: tap row k + 1's fragments load while k's MMAs run.
    const uint2* fk = frag + lane;
    uint2 b[NT];
    uint32_t a[R][4];
#pragma unroll
    for (int term = 0; term < NT; ++term) b[term] = fk[term * 32];
#pragma unroll
    for (int i = 0; i < R; ++i) ldmatrix_x4(a[i], addr[i]);
    for (int k = 0; k < g.kh; ++k) {
      const int kn = min(k + 1, g.kh - 1);  // the last row reloads itself: no branch
      uint2 bn[NT];
      uint32_t an[R][4];
#pragma unroll
      for (int term = 0; term < NT; ++term) bn[term] = fk[(kn * NT + term) * 32];
#pragma unroll
      for (int i = 0; i < R; ++i) ldmatrix_x4(an[i], addr[i] + static_cast<uint32_t>(kn) * pitch);
#pragma unroll
      for (int term = 0; term < NT; ++term)
#pragma unroll
        for (int i = 0; i < R; ++i) mma_16816<T>(acc[i], a[i], b[term]);
#pragma unroll
      for (int term = 0; term < NT; ++term) b[term] = bn[term];
#pragma unroll
      for (int i = 0; i < R; ++i)
#pragma unroll
        for (int q = 0; q < 4; ++q) a[i][q] = an[i][q];
    }
    // One non-finite product makes the sum non-finite (a finite sum that overflows sends the
    // round to the checked path too, which is right for it).
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < R; ++i) sum += (acc[i][0] + acc[i][1]) + (acc[i][2] + acc[i][3]);
    const bool finite = __all_sync(0xffffffffu, isfinite(sum));
    if (finite && inside && u0 + R <= nunits) {
#pragma unroll
      for (int i = 0; i < R; ++i) {
        const int u = u0 + i;
        T* p = out + tile_out + static_cast<int64_t>(u >> g.units_log2) * g.nx + (u & smask) * kMmaUnit + lane_col;
        // C fragment: lane (g, t) holds outputs 8g + 2t, +1 (group g) and 64 + 8g + 2t, +1 (g + 8).
        *reinterpret_cast<uint32_t*>(p) = pack2<T>(acc[i][0] * unscale, acc[i][1] * unscale);
        *reinterpret_cast<uint32_t*>(p + 64) = pack2<T>(acc[i][2] * unscale, acc[i][3] * unscale);
      }
      continue;
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {  // edge tiles, the last round, non-finite values: unit by unit
      const int u = u0 + i;
      if (u >= nunits) break;
      const int o = u >> g.units_log2, s = u & smask;
      const int64_t oy = t.y0 + o;
      if (oy >= g.ny) continue;  // warp-uniform: the whole unit is past the plane
      mma_store_unit_checked<T>(acc[i], unscale, stage, shift, t, static_cast<const float*>(__cvta_shared_to_generic(w_s)),
                                g, o, s, out + (t.b * g.ny + oy) * g.nx, lane, lane_col);
    }
  }
}

// The same products by rounds of R consecutive rows of one unit column (the narrow kernel's
// consumer: KH, the tap rows, is a compile-time constant). Window row r of a round feeds output
// rows r - k for every tap row k, so a round loads R + KH - 1 A fragments instead of R x KH, and
// every tap row's B fragments stay in registers for the whole tile. R rows' accumulators give the
// tensor pipe R independent chains. NTU: the weight terms it multiplies, the first NTU of
// kMmaTerms<T>; where the fragments need more (MmaFragTail::terms) the tile takes the exact path.
// Preconditions as consume_tile_mma's, and tile_h % R == 0.
template <typename T, int KH, int R, int NTU = kMmaTerms<T>>
__device__ __forceinline__ void consume_tile_mma_rows(uint32_t stage_s, uint32_t frag_s, uint32_t w_s, MmaGeom g,
                                                      T* out, int rank, int size) {
  constexpr int NT = kMmaTerms<T>;
  static_assert(NTU >= 1 && NTU <= NT, "terms used: the first NTU of the fragments' NT");
  const int lane = rank & 31, warp = rank >> 5, nwarps = size >> 5;
  const char* stage = static_cast<const char*>(__cvta_shared_to_generic(stage_s));
  const uint2* frag = static_cast<const uint2*>(__cvta_shared_to_generic(frag_s));
  const TileHeader t = *reinterpret_cast<const TileHeader*>(stage);
  const int shift = *reinterpret_cast<const int*>(stage + sizeof(TileHeader));
  const float* w = static_cast<const float*>(__cvta_shared_to_generic(w_s));
  const int smask = (1 << g.units_log2) - 1, nrounds = (g.tile_h / R) << g.units_log2;
  const MmaFragTail tail = *reinterpret_cast<const MmaFragTail*>(frag + KH * NT * 32);
  // Not the layout the fragments were built for, or weights that need more terms (block-uniform).
  if (shift != 2 * g.a || tail.terms > NTU) {
    mma_tile_exact<T>(stage, shift, t, w, g, out, warp, nwarps, lane);
    return;
  }
  const float unscale = tail.unscale;
  uint2 b[KH][NTU];
#pragma unroll
  for (int k = 0; k < KH; ++k)
#pragma unroll
    for (int term = 0; term < NTU; ++term) b[k][term] = frag[(k * NT + term) * 32 + lane];
  const uint32_t lane_off = 16u * ((lane & 7) + 8 * ((lane >> 3) & 1) + (lane >> 4));  // as consume_tile_mma
  const uint32_t pitch = static_cast<uint32_t>(g.pitch);
  const int lane_col = 8 * (lane >> 2) + 2 * (lane & 3);
  const bool inside = t.x0 >= 0 && t.x0 + (int64_t(kMmaUnit) << g.units_log2) <= g.nx && t.y0 + g.tile_h <= g.ny;
  for (int round = warp; round < nrounds; round += nwarps) {
    const int o0 = (round >> g.units_log2) * R, s = round & smask;
    const uint32_t addr = stage_s + g.hdr_bytes + static_cast<uint32_t>(o0) * pitch + s * (2u * kMmaUnit) + lane_off;
    float acc[R][4] = {};
#pragma unroll
    for (int r = 0; r < R + KH - 1; ++r) {
      uint32_t a[4];
      ldmatrix_x4(a, addr + r * pitch);
#pragma unroll
      for (int term = 0; term < NTU; ++term)
#pragma unroll
        for (int i = 0; i < R; ++i)
          if (r - i >= 0 && r - i < KH) mma_16816<T>(acc[i], a, b[r - i][term]);
    }
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < R; ++i) sum += (acc[i][0] + acc[i][1]) + (acc[i][2] + acc[i][3]);
    if (unscale != 1.f) {  // block-uniform (see mma_weight_exponent)
#pragma unroll
      for (int i = 0; i < R; ++i)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[i][q] *= unscale;
    }
    if (__all_sync(0xffffffffu, isfinite(sum)) && inside) {
      T* p = out + (t.b * g.ny + t.y0 + o0) * g.nx + t.x0 + s * kMmaUnit + lane_col;
#pragma unroll
      for (int i = 0; i < R; ++i) {
        *reinterpret_cast<uint32_t*>(p + i * g.nx) = pack2<T>(acc[i][0], acc[i][1]);
        *reinterpret_cast<uint32_t*>(p + i * g.nx + 64) = pack2<T>(acc[i][2], acc[i][3]);
      }
      continue;
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {  // edge tiles and non-finite values: row by row
      const int64_t oy = t.y0 + o0 + i;
      if (oy >= g.ny) break;  // warp-uniform: this row and the rest are past the plane
      mma_store_unit_checked<T>(acc[i], 1.f, stage, shift, t, w, g, o0 + i, s, out + (t.b * g.ny + oy) * g.nx, lane,
                                lane_col);  // (acc already unscaled)
    }
  }
}

#endif  // __CUDACC__

}  // namespace kernels
}  // namespace cupipe
