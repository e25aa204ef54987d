// Argument parsing and validation shared by the CPU and CUDA implementations of every op.
// Every check names the op and the argument, and raises the Python exception type a user
// expects (ValueError for bad values, TypeError for bad dtypes, IndexError for bad dims).
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "kernels/params.h"

namespace cupipe {
namespace ops {

// A mechanism argument: a concrete one, or "auto" (resolved per device and shape later).
struct MechanismArg {
  bool is_auto = true;
  engine::Mechanism mechanism = engine::Mechanism::Sync;
};

MechanismArg parse_mechanism(const char* op, c10::string_view name);
Boundary parse_boundary(const char* op, c10::string_view name);
ReduceOp parse_reduce_op(const char* op, c10::string_view name);
void check_stages(const char* op, int64_t stages);
void check_vec_bytes(const char* op, int64_t vec_bytes);

// Floating dtypes the stencil and reduce kernels support.
bool is_supported_float(at::ScalarType t);
DType to_kernel_dtype(at::ScalarType t);
void check_float_input(const char* op, const char* arg, const at::Tensor& t);

// Stencil geometry: x viewed as a contiguous (batch, ny, nx) stack with a (2ry+1, 2rx+1) window.
struct StencilGeometry {
  int64_t batch = 1, ny = 1, nx = 1;
  int ry = 0, rx = 0;
  int esz = 4;  // bytes per element of x (the tuning table depends on it)
  // Rows of whole 16-byte multiples from a 16-byte aligned pointer (as the kernels see x, after
  // .contiguous()): the condition of tma's tensor-map tiles, which the table depends on.
  bool rows16 = false;
};

// Validates x/weights/boundary for stencil1d and returns the geometry along `dim`
// (normalised in place).
StencilGeometry check_stencil1d(const at::Tensor& x, const at::Tensor& weights, int64_t& dim,
                                Boundary boundary);
StencilGeometry check_stencil2d(const at::Tensor& x, const at::Tensor& weights, Boundary boundary);

// The upstream gradient of a stencil's weight-gradient op: x's shape, dtype and device.
void check_stencil_grad(const char* op, const at::Tensor& x, const at::Tensor& grad);

// Weights converted to the kernels' accumulation type (float, or double for fp64 x), contiguous.
at::Tensor weights_for_kernel(const at::Tensor& x, const at::Tensor& weights);

// Reduction arguments, normalised.
struct ReducePlan {
  ReduceOp op = ReduceOp::Sum;
  std::vector<bool> reduced;        // per input dim
  std::vector<int64_t> out_shape;   // with keepdim applied
  at::ScalarType out_dtype = at::kFloat;
  bool acc_double = false;
  int64_t numel_reduced = 1;        // product of reduced sizes
  int64_t numel_kept = 1;
};

ReducePlan check_reduce(const at::Tensor& x, c10::string_view op, at::OptionalIntArrayRef dim,
                        bool keepdim, std::optional<at::ScalarType> dtype);

// x rearranged (a copy only when needed) so that it is a contiguous (outer, r, inner) block with
// the reduced dims in the middle. Fills outer/r/inner.
at::Tensor reduce_canonical_view(const at::Tensor& x, const ReducePlan& plan, int64_t& outer,
                                 int64_t& r, int64_t& inner);

}  // namespace ops
}  // namespace cupipe
