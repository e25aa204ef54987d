// Argument parsing and validation shared by the CPU and CUDA implementations of every op.
// Every check names the op and the argument, and raises the Python exception type a user
// expects (ValueError for bad values, TypeError for bad dtypes, IndexError for bad dims).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kernels/params.h"
#include "ops/layout.h"

namespace cupipe {
namespace ops {

// A mechanism argument: a concrete one, or "auto" (resolved per device and shape later).
struct MechanismArg {
  bool is_auto = true;
  engine::Mechanism mechanism = engine::Mechanism::Sync;
};

// The names the ops accept, in enum order; Python reads them through cupipe._C (MECHANISMS,
// BOUNDARIES, REDUCE_OPS), so these lists are their only definition.
constexpr const char* kAutoMechanism = "auto";
std::vector<std::string> mechanism_names();  // "auto", then engine::mechanism_name of each mechanism
const char* boundary_name(Boundary b);
std::vector<std::string> boundary_names();
const char* reduce_op_name(ReduceOp op);
std::vector<std::string> reduce_op_names();
std::string join_names(const std::vector<std::string>& names);  // "a, b, c"

MechanismArg parse_mechanism(const char* op, c10::string_view name);
Boundary parse_boundary(const char* op, c10::string_view name);
ReduceOp parse_reduce_op(const char* op, c10::string_view name);
void check_stages(const char* op, int64_t stages);
void check_vec_bytes(const char* op, int64_t vec_bytes);

// The stencils' knobs, parsed and checked: boundary, mechanism, stages, steps.
struct StencilKnobs {
  Boundary boundary = Boundary::Zero;
  MechanismArg mechanism;
};
StencilKnobs check_stencil_knobs(const char* op, c10::string_view boundary, c10::string_view mechanism,
                                 int64_t stages, int64_t steps);

// The stencils' `steps`: step(x) applied `steps` times, each on the previous result (a loop of
// single calls, rounded to x's dtype between steps). Fused steps are issue 47's kernels.
template <class F>
at::Tensor repeat_steps(int64_t steps, const at::Tensor& x, F&& step) {
  at::Tensor y = step(x);
  for (int64_t i = 1; i < steps; ++i) y = step(y);
  return y;
}

// Floating dtypes the stencil and reduce kernels support.
bool is_supported_float(at::ScalarType t);
DType to_kernel_dtype(at::ScalarType t);
void check_float_input(const char* op, const char* arg, const at::Tensor& t);

// Stencil geometry: a contiguous (batch, ny, nx) stack with a (2ry+1, 2rx+1) window. check_stencil*
// give it in x's logical order (x.contiguous()); stencil_memory_geometry in x's memory order.
struct StencilGeometry {
  int64_t batch = 1, ny = 1, nx = 1;
  int ry = 0, rx = 0;
  int esz = 4;  // bytes per element of x (the tuning table depends on it)
  // Rows of whole 16-byte multiples from a 16-byte aligned pointer (as the kernels see x; or 8 bytes
  // off one, see rows16 below): the condition of tma's tensor-map tiles, which the table depends on.
  bool rows16 = false;
  bool in_place = false;    // the stack is x's own memory (else x.contiguous())
  int64_t xs_row = 0, xs_plane = 0;  // in place, not dense: x's row and plane strides (layout.h)
  bool transposed = false;  // stencil2d: y is W and x is H; the weights go transposed
  int64_t step = 1;         // x's taps lie step elements apart, a batch dim inside the rows (layout.h)
};

// Whether the kernels' tiles of x may be tensor-map boxes (StencilGeometry::rows16), for the stack's
// data at `data`, with lead_bytes of its storage before it (StencilParams::x_lead), under b.
bool rows16(const StencilGeometry& g, const void* data, int64_t lead_bytes, Boundary b);
// The same without a data pointer (explain, fake tensors): a copy made by .contiguous() is a fresh
// allocation, and storages start 16-byte aligned, so only an in-place x's offset matters.
bool rows16_of(const at::Tensor& x, const StencilGeometry& g, Boundary b);

// Validates x/weights/boundary for stencil1d and returns the geometry along `dim`
// (normalised in place), in logical order.
StencilGeometry check_stencil1d(const at::Tensor& x, const at::Tensor& weights, int64_t& dim,
                                Boundary boundary);
StencilGeometry check_stencil2d(const at::Tensor& x, const at::Tensor& weights, Boundary boundary);

// The geometry the kernels run a checked call with (the layout planner, ops/layout.h): x's memory
// in place where its layout has a (batch, ny, nx) view, else the logical geometry of x.contiguous().
// `dim`: stencil1d's (normalised) dim; nullopt for stencil2d. `why`: the plan in words, for explain.
StencilGeometry stencil_memory_geometry(const at::Tensor& x, const StencilGeometry& logical,
                                        std::optional<int64_t> dim, std::string* why = nullptr);

// A stencil call's tensors as the kernels see them, for the geometry stencil_memory_geometry gave.
struct StencilTensors {
  at::Tensor x;     // what the kernels read: x itself (in place) or x.contiguous()
  at::Tensor w;     // the weights as given, transposed when the geometry is
  at::Tensor out;   // the result: empty_like(x), so x's layout when x is dense (as torch.empty_like)
  at::Tensor kout;  // what the kernels write: out, or a contiguous buffer when out's layout differs
  void finish();    // kout into out, when they differ
};
StencilTensors stencil_tensors(const at::Tensor& x, const at::Tensor& weights, const StencilGeometry& g);

// stencil3d: a contiguous (batch, nz, ny, nx) stack of volumes with a (2rz+1, 2ry+1, 2rx+1)
// window, in x's logical order (the kernels read x.contiguous()).
struct Stencil3dGeometry {
  int64_t batch = 1, nz = 1, ny = 1, nx = 1;
  int rz = 0, ry = 0, rx = 0;
  int esz = 4;
};
constexpr int kStencil3dMaxRadius = 4;  // the API's radii 0..4 (the kernels unroll over them)
Stencil3dGeometry check_stencil3d(const at::Tensor& x, const at::Tensor& weights, Boundary boundary);

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
  bool all_dims = false;            // every dim reduced (argmax/argmin: the flat index)
  double correction = 1;            // var, std
  double ord = 2;                   // norm
};

ReducePlan check_reduce(const at::Tensor& x, c10::string_view op, at::OptionalIntArrayRef dim,
                        bool keepdim, std::optional<at::ScalarType> dtype, double correction = 1,
                        double ord = 2);

// Bytes per element the reduce kernels read: dtype=float64 converts a narrower x first.
int reduce_kernel_esz(const at::Tensor& x, const ReducePlan& plan);

// The layout plan of a checked reduction of x (ops/layout.h); on CUDA, the first two steps folded
// into one where the direct column kernels can run it (fold_reduce_steps). `direct`: the call's
// mechanism is auto or sync (the state kinds fold only then).
ReduceLayoutPlan reduce_layout(const at::Tensor& x, const ReducePlan& plan, bool direct = true);

// Whether run_reduce copies x's kept dims, then its reduced dims, contiguous and runs one step of
// rows (a state reduction whose layout plan has several steps, or argmax/argmin over every dim of
// a non-contiguous x): explain's table shape follows it.
bool reduce_copies_rows(const at::Tensor& x, const ReducePlan& plan, const ReduceLayoutPlan& lp);

// The dtype values keep between steps: the accumulation type (x's dtype for amax/amin).
at::ScalarType reduce_between_dtype(const at::Tensor& x, const ReducePlan& plan);

// Runs a checked reduction of x as its layout plan's steps and returns the result. The state
// reductions (var .. norm) run in one step: where the plan has several, or argmax/argmin over every
// dim of an x whose memory order is not its logical order, x's kept dims then its reduced dims
// are copied contiguous first, and the step is (kept, reduced, 1). `step(in, out,
// s)` reduces the contiguous (s.outer, s.r, s.inner) values at in.data_ptr() (x's memory block,
// or the previous step's output) over r into out, with plan.op, in in's and out's dtypes. Between
// steps the values stay in the accumulation type (x's dtype for amax/amin). A folded step (fold >
// 1) comes only from reduce_layout on CUDA; a step that cannot run it calls run_fold_as_two.
// `direct`: as reduce_layout's.
at::Tensor run_reduce(const at::Tensor& x, const ReducePlan& plan,
                      const std::function<void(const at::Tensor&, at::Tensor&, const ReduceStep&)>& step,
                      bool direct = true);

// A folded step another way: the sum kinds as the two steps it fuses (a temporary between, in the
// accumulation type); the state kinds as rows of each output's values (a permuted copy).
void run_fold_as_two(const at::Tensor& in, at::Tensor& out, const ReduceStep& s, const ReducePlan& plan,
                     const std::function<void(const at::Tensor&, at::Tensor&, const ReduceStep&)>& step);

}  // namespace ops
}  // namespace cupipe
