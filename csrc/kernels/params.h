// Plain-struct interface between the torch binding layer (csrc/ops, g++) and the CUDA
// launchers (csrc/kernels, nvcc). No torch headers here, and none in the .cu files: that keeps
// every .cu file a fast, torch-free compile.
#pragma once

#include <cstdint>
#include <functional>

#include "engine/mechanism.h"

struct CUstream_st;

namespace cupipe {

using Stream = CUstream_st*;  // == cudaStream_t, without pulling in the CUDA runtime header

enum class DType : int { F32 = 0, F16 = 1, BF16 = 2, F64 = 3 };

inline int dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::F64: return 8;
  }
  return 0;
}

enum class Boundary : int { Zero = 0, Replicate = 1, Circular = 2, Reflect = 3 };

// Sum..Amin fold one value (reduce/combine.cuh); Var..Norm carry a state (reduce/states.h).
enum class ReduceOp : int { Sum = 0, Mean = 1, Amax = 2, Amin = 3, Var = 4, Std = 5, Argmax = 6, Argmin = 7,
                            Logsumexp = 8, Norm = 9 };
inline bool is_state_op(ReduceOp op) { return static_cast<int>(op) >= static_cast<int>(ReduceOp::Var); }
constexpr bool is_arg_op(ReduceOp op) { return op == ReduceOp::Argmax || op == ReduceOp::Argmin; }  // one dim or all

// stream_copy: `bytes` bytes from `src` to `dst`, any alignment. The engine aligns its tiles to
// `dst` (the unaligned head is copied directly); when `src` and `dst` disagree modulo the copy
// width, the width narrows to what both allow (below 4 bytes: the sync mechanism; tma needs
// 16-byte agreement and otherwise runs as primitives). The launcher reports what it ran.
struct StreamCopyParams {
  const void* src = nullptr;
  void* dst = nullptr;
  int64_t bytes = 0;
  engine::Mechanism mechanism = engine::Mechanism::Sync;
  int stages = 2;       // 1..8
  int vec_bytes = 16;   // 4, 8 or 16: width of one async copy
  int tile_bytes = 0;   // bytes per stage; 0 = launcher default
  int max_blocks = 0;   // blocks of the grid, at most one per tile (0 = the launcher's grid of
                        // short-lived blocks, copy_tiles_per_block tiles each); few for latency studies
  Stream stream = nullptr;
};

// A 2-D stencil over a batch of (ny, nx) planes with a (2ry+1) x (2rx+1) window.
// stencil1d maps onto it: along the last dim as ry = 0, along another dim as rx = 0.
// out[b, i, j] = sum_{a, c} w[a, c] * x[b, map_y(i + a - ry), map_x(j + c - rx)], where map_*
// applies `boundary` (zero: out-of-range reads are 0).
struct StencilParams {
  const void* x = nullptr;
  void* out = nullptr;
  const void* weights = nullptr;  // (2ry+1)*(2rx+1) contiguous values of weights_dtype, on device
  DType dtype = DType::F32;       // of x and out
  // Any of the four: the kernels convert the weights to the accumulation type (float; double for
  // F64) as they stage them in shared memory, so that weights in x's dtype (as F.conv2d takes
  // them) need no conversion kernel of their own before the launch.
  DType weights_dtype = DType::F32;
  // The weights came in x's dtype (exact in it): a hint for the launcher's kernel choice, as the
  // tensor-core kernels then multiply one weight term (they find that out themselves too).
  bool weights_exact = false;
  int64_t batch = 0, ny = 0, nx = 0;
  // x's row and plane strides in elements when its planes are pitched (a crop or a step of a larger
  // tensor); 0: dense (nx and ny * nx). out is always dense.
  int64_t x_row = 0, x_plane = 0;
  // Elements between x's taps along x: 1, or the extent of a batch dim inside the rows
  // (channels_last's C), whose values are filtered apart; the boundary maps whole points of
  // x_step values (nx a multiple of it). out has the same rows.
  int64_t x_step = 1;
  // Bytes of x's own storage just before x (its offset in it, up to 16): tma's tensor maps need a
  // 16-byte aligned base, so an x 8 bytes off 16 (a crop) is mapped from 8 bytes before it.
  int64_t x_lead = 0;
  int ry = 0, rx = 0;
  Boundary boundary = Boundary::Zero;
  engine::Mechanism mechanism = engine::Mechanism::Sync;
  int stages = 2;
  int free_sms = 0;  // SMs the launch leaves to other streams' kernels (0: the whole device)
  int64_t blocks = 0;  // blocks of the grid (0: one wave of resident blocks); for sweeps
  int tiles_per_block = 0;  // when blocks == 0: about ntiles / tiles_per_block blocks, at least one
                            // wave (0: one wave of persistent blocks); ignored when free_sms > 0
  Stream stream = nullptr;
  // Device scratch of the given bytes, ordered on `stream` (the fused steps' star pair: one int a block).
  std::function<void*(int64_t)> workspace;
};

// The element a plane's map counts in: 8-byte words whatever the data type, so that a box row
// may be up to 2 KiB wide (256 units) instead of 256 elements (512 bytes of a 2-byte type: the
// stencils' tiles of 256 columns). Every box the stencils ask for starts and ends on a 16-byte
// boundary and the rows are whole 16-byte multiples, so a word never holds an element inside the
// plane and one outside it, and the zeros delivered for words outside are zeros of any type.
constexpr int tensor_map_unit(int /*esz*/) { return 8; }

// The weight gradient of that stencil: grad_w[a, c] = sum over outputs (b, i, j) of
// grad[b, i, j] * x[b, map_y(i + a - ry), map_x(j + c - rx)]. The launcher writes one row of
// (2ry+1)*(2rx+1) partial sums (accumulation type) per block into `partials` and returns the
// number of blocks; the caller sums the rows (a fixed order: deterministic).
struct StencilWeightGradParams {
  const void* x = nullptr;     // contiguous (batch, ny, nx)
  const void* grad = nullptr;  // the upstream gradient, same shape, contiguous
  void* partials = nullptr;    // max_blocks rows
  int64_t max_blocks = 0;      // kMaxBlocksPerSm * SMs is always enough
  DType dtype = DType::F32;
  int64_t batch = 0, ny = 0, nx = 0;
  int ry = 0, rx = 0;
  Boundary boundary = Boundary::Zero;
  Stream stream = nullptr;
};
constexpr int kMaxBlocksPerSm = 8;  // of the 256-thread stencil kernels (2048 threads per SM)

// The 3-D stencil of a contiguous (batch, nz, ny, nx) stack into a contiguous out.
struct Stencil3dParams {
  const void* x = nullptr;
  void* out = nullptr;
  const void* weights = nullptr;  // (2rz+1)*(2ry+1)*(2rx+1) contiguous values of weights_dtype
  DType dtype = DType::F32;
  DType weights_dtype = DType::F32;
  int64_t batch = 0, nz = 0, ny = 0, nx = 0;
  int rz = 1, ry = 0, rx = 0;  // rz 1..4 (rz = 0 is stencil2d's), ry and rx 0..4
  Boundary boundary = Boundary::Zero;
  engine::Mechanism mechanism = engine::Mechanism::Sync;
  int stages = 2;
  Stream stream = nullptr;
  // Device scratch of the given bytes, ordered on `stream` (the star pair's flags, one int a block).
  std::function<void*(int64_t)> workspace;
};

// A reduction of a contiguous (outer, r, inner) view over its middle dim into (outer, inner).
struct ReduceParams {
  const void* x = nullptr;
  void* out = nullptr;
  DType in_dtype = DType::F32;
  DType out_dtype = DType::F32;
  bool acc_double = false;  // accumulate in double (fp64 input or dtype=float64)
  int64_t outer = 0, r = 0, inner = 0;
  int64_t fold = 1;              // > 1: the innermost fold elements of each inner row reduce too (a fused
                                 // step of two runs of reduced dims; where reduce_folds says so)
  ReduceOp op = ReduceOp::Sum;
  double correction = 1;         // var, std: the divisor is max(r - correction, 0)
  double ord = 2;                // norm: 0, 1, 2, inf or -inf
  engine::Mechanism mechanism = engine::Mechanism::Sync;
  int stages = 2;
  int tile_bytes = 0;            // bytes per stage (columns: whole rows of a 512 B..4 KiB chunk); 0 = default
  int64_t blocks = 0;            // blocks of the main pass (0 = one wave of resident blocks); for sweeps
                                 // (the wide rows and the chunked long rows of reduce/rows.cuh take a
                                 // block per tile or chunk whatever it says)
  void* workspace = nullptr;     // scratch for split reductions, see reduce_workspace_bytes
  int64_t workspace_bytes = 0;
  Stream stream = nullptr;
};

// Launchers. Each returns normally on success and throws std::runtime_error with a readable
// message on failure (bad configuration for the device, CUDA error at launch).
void launch_stream_copy(const StreamCopyParams& p);
void launch_stencil(const StencilParams& p);
// The kernel family launch_stencil runs for p ("row", "box", "narrow3", ...; family.cuh), for
// explain and the tests. Needs the device; p describes a non-empty input.
const char* stencil_family(const StencilParams& p);
// steps=k of that stencil, fused (stencil/steps.cuh): the steps one pass of its kernel applies
// for radii ry (along the rows) and rx, esz-byte elements and taps x_step apart, or 1 where it has
// no kernel: taps x_step > 1 apart (channels_last), or an fp64 radius of 3 or 4 (two levels of its
// register queue do not fit). The kernel keeps K * 2ry * 4 partial sums a thread within
// stencil_steps_queue_regs; a stencil along the rows keeps none and takes 16. launch_stencil_steps runs
// ceil(steps / K) passes into p.out, through `scratch` (dense, p.out's size) when there are two or more.
// The queue's registers: 32 for ry = 1 and elements of 4 bytes or fewer, whose kernel then runs 4
// blocks an SM at 128 registers (fewer levels a pass, more warps to hide latency: docs/design.md §4.9); else 64.
constexpr int stencil_steps_queue_regs(int ry, int esz) { return ry == 1 && esz <= 4 ? 32 : 64; }
constexpr int stencil_steps_per_pass(int ry, int rx, int esz, int64_t x_step) {
  if (x_step != 1 || ry < 0 || ry > 4 || rx < 0 || rx > 4) return 1;
  if (ry == 0) return 16;
  const int k = stencil_steps_queue_regs(ry, esz) / (2 * ry * 4 * (esz == 8 ? 2 : 1));
  return k > 1 ? k : 1;
}
void launch_stencil_steps(const StencilParams& p, int64_t steps, void* scratch);
int64_t launch_stencil_weight_grad(const StencilWeightGradParams& p);
void launch_stencil3d(const Stencil3dParams& p);
int64_t reduce_workspace_bytes(const ReduceParams& p);
void launch_reduce(const ReduceParams& p);
// Whether launch_reduce runs p's fold (p.fold > 1) in one pass: on the direct column kernels (sync,
// 16-byte aligned rows and folds), every op but argmax / argmin. Otherwise the caller runs it another way.
bool reduce_folds(const ReduceParams& p);
// The state reductions (is_state_op), which launch_reduce and reduce_workspace_bytes forward to.
int64_t reduce_state_workspace_bytes(const ReduceParams& p);
void launch_reduce_state(const ReduceParams& p);

// Device facts the binding layer needs for checks (sm version, shared memory per block).
struct DeviceInfo {
  int sm = 0;                  // the device's compute capability, 10 * major + minor
  // The architecture this build's kernels run as on the device: the PTX version of the code the
  // driver loads for them. It equals sm's major architecture where the build has code for it, and is
  // older where the device JIT-compiles an older architecture's PTX (TORCH_CUDA_ARCH_LIST="8.0+PTX"
  // on an sm_90 device, whose kernels then have no sm_90 instructions: their 'tma' is a trap). What
  // needs sm_90 instructions in the kernels ('tma', dependent launches) and the tuning table ask this.
  int code_sm = 0;
  // Whether the module's ahead-of-time kernels have code this device runs; when not, every kernel
  // is compiled for the device on first use (registry.h) and code_sm is sm.
  bool ahead_of_time_code = true;
  int num_sms = 0;
  int max_smem_optin = 0;      // bytes of dynamic shared memory a block may opt in to
  double dram_peak_gbps = 0;   // DRAM peak rate: memory clock x bus width, double data rate
};
DeviceInfo device_info(int device);

}  // namespace cupipe
