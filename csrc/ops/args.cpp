#include "ops/args.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

namespace cupipe {
namespace ops {

namespace {

// Indexed by the enums' values (kernels/params.h).
constexpr const char* kBoundaryNames[] = {"zero", "replicate", "circular", "reflect"};
constexpr const char* kReduceOpNames[] = {"sum", "mean", "amax", "amin", "var", "std",
                                          "argmax", "argmin", "logsumexp", "norm"};
static_assert(static_cast<int>(Boundary::Reflect) == 3 && static_cast<int>(ReduceOp::Norm) == 9,
              "the name tables follow the enums of kernels/params.h");

}  // namespace

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::vector<std::string> mechanism_names() {
  std::vector<std::string> out{kAutoMechanism};
  for (int i = 0; i < engine::kNumMechanisms; ++i)
    out.emplace_back(engine::mechanism_name(static_cast<engine::Mechanism>(i)));
  return out;
}

const char* boundary_name(Boundary b) { return kBoundaryNames[static_cast<int>(b)]; }

std::vector<std::string> boundary_names() {
  return std::vector<std::string>(std::begin(kBoundaryNames), std::end(kBoundaryNames));
}

const char* reduce_op_name(ReduceOp op) { return kReduceOpNames[static_cast<int>(op)]; }

std::vector<std::string> reduce_op_names() {
  return std::vector<std::string>(std::begin(kReduceOpNames), std::end(kReduceOpNames));
}

MechanismArg parse_mechanism(const char* op, c10::string_view name) {
  MechanismArg out;
  if (name == kAutoMechanism) return out;
  for (int i = 0; i < engine::kNumMechanisms; ++i) {
    auto m = static_cast<engine::Mechanism>(i);
    if (name == engine::mechanism_name(m)) {
      out.is_auto = false;
      out.mechanism = m;
      return out;
    }
  }
  TORCH_CHECK_VALUE(false, "cupipe.", op, ": unknown mechanism '", std::string(name),
                    "'; expected one of ", join_names(mechanism_names()));
  return out;  // not reached: the check above throws
}

Boundary parse_boundary(const char* op, c10::string_view name) {
  for (int i = 0; i < static_cast<int>(std::size(kBoundaryNames)); ++i)
    if (name == kBoundaryNames[i]) return static_cast<Boundary>(i);
  TORCH_CHECK_VALUE(false, "cupipe.", op, ": unknown boundary '", std::string(name),
                    "'; expected one of ", join_names(boundary_names()));
  return Boundary::Zero;  // not reached
}

ReduceOp parse_reduce_op(const char* op, c10::string_view name) {
  for (int i = 0; i < static_cast<int>(std::size(kReduceOpNames)); ++i)
    if (name == kReduceOpNames[i]) return static_cast<ReduceOp>(i);
  TORCH_CHECK_VALUE(false, "cupipe.", op, ": unknown op '", std::string(name),
                    "'; expected one of ", join_names(reduce_op_names()));
  return ReduceOp::Sum;  // not reached
}

void check_stages(const char* op, int64_t stages) {
  TORCH_CHECK_VALUE(stages >= 0 && stages <= engine::kMaxStages, "cupipe.", op,
                    ": stages must be 0 (auto) or 1..", engine::kMaxStages, ", got ", stages);
}

StencilKnobs check_stencil_knobs(const char* op, c10::string_view boundary, c10::string_view mechanism,
                                 int64_t stages, int64_t steps) {
  StencilKnobs k;
  k.boundary = parse_boundary(op, boundary);
  k.mechanism = parse_mechanism(op, mechanism);
  check_stages(op, stages);
  TORCH_CHECK_VALUE(steps >= 1, "cupipe.", op, ": steps must be >= 1, got ", steps);
  return k;
}

void check_vec_bytes(const char* op, int64_t vec_bytes) {
  TORCH_CHECK_VALUE(vec_bytes == 0 || vec_bytes == 4 || vec_bytes == 8 || vec_bytes == 16,
                    "cupipe.", op, ": vec_bytes must be 0 (auto), 4, 8 or 16, got ", vec_bytes);
}

bool is_supported_float(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16 || t == at::kDouble;
}

DType to_kernel_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DType::F32;
    case at::kHalf: return DType::F16;
    case at::kBFloat16: return DType::BF16;
    case at::kDouble: return DType::F64;
    default: break;
  }
  TORCH_CHECK_TYPE(false, "cupipe: unsupported dtype ", t);
  return DType::F32;  // not reached
}

void check_float_input(const char* op, const char* arg, const at::Tensor& t) {
  TORCH_CHECK_TYPE(is_supported_float(t.scalar_type()), "cupipe.", op, ": ", arg,
                   " must be float32, float16, bfloat16 or float64, got ", t.scalar_type());
}

namespace {

void check_weights_common(const char* op, const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK_TYPE(at::isFloatingType(w.scalar_type()), "cupipe.", op,
                   ": weights must be a floating-point tensor, got ", w.scalar_type());
  TORCH_CHECK_VALUE(w.device() == x.device(), "cupipe.", op,
                    ": weights must be on the same device as x (x on ", x.device(),
                    ", weights on ", w.device(), ")");
}

void check_reflect(const char* op, Boundary b, int64_t size, int64_t r, const char* what) {
  TORCH_CHECK_VALUE(b != Boundary::Reflect || r == 0 || size > r, "cupipe.", op,
                    ": boundary='reflect' needs size > radius along ", what, " (size ", size,
                    ", radius ", r, ")");
}

// Every row of the stack (and, pitched, every row's and plane's stride) a whole 16-byte multiple.
bool strides16(const StencilGeometry& g) {
  return g.nx * g.esz % 16 == 0 && g.xs_row * g.esz % 16 == 0 && g.xs_plane * g.esz % 16 == 0;
}

// The zero boundary's 2-byte unit-step stacks 8 bytes off 16 count as rows16 where the kernels map
// them from the 8 bytes of x's storage before them (StencilParams::x_lead; measured in design.md
// §4.2); other boundaries would take the edge tiles, all of a small plane's, off the maps.
bool lead_maps(const StencilGeometry& g, Boundary b) { return b == Boundary::Zero && g.esz == 2 && g.step == 1; }
}  // namespace

bool rows16(const StencilGeometry& g, const void* data, int64_t lead_bytes, Boundary b) {
  const uintptr_t mis = reinterpret_cast<uintptr_t>(data) % 16;
  return strides16(g) && (mis == 0 || (mis == 8 && lead_bytes >= 8 && lead_maps(g, b)));
}

bool rows16_of(const at::Tensor& x, const StencilGeometry& g, Boundary b) {
  const int64_t mis = g.in_place ? x.storage_offset() * g.esz % 16 : 0;
  return strides16(g) && (mis == 0 || (mis == 8 && lead_maps(g, b)));
}

StencilGeometry stencil_memory_geometry(const at::Tensor& x, const StencilGeometry& logical,
                                        std::optional<int64_t> dim, std::string* why) {
  const std::vector<int64_t> sizes = x.sizes().vec(), strides = x.strides().vec();
  const StencilLayoutPlan p =
      dim ? plan_stencil1d_layout(sizes, strides, static_cast<int>(*dim), std::max(logical.ry, logical.rx),
                                  static_cast<int>(x.element_size()))
          : plan_stencil2d_layout(sizes, strides, logical.ry, logical.rx, static_cast<int>(x.element_size()));
  if (why) *why = p.describe();
  StencilGeometry g = logical;
  g.batch = p.batch; g.ny = p.ny; g.nx = p.nx; g.ry = p.ry; g.rx = p.rx;
  g.in_place = !p.copy;
  g.transposed = p.transposed;
  g.xs_row = p.xs_row;
  g.xs_plane = p.xs_plane;
  g.step = p.rx > 0 ? p.step : 1;  // without taps along x the step changes nothing (plain rows)
  // x.contiguous() of a contiguous x is x itself: in place in all but name.
  if (p.copy && x.is_contiguous()) g.in_place = true;
  return g;
}

void StencilTensors::finish() {
  if (!kout.is_same(out)) out.copy_(kout);
}

StencilTensors stencil_tensors(const at::Tensor& x, const at::Tensor& weights, const StencilGeometry& g) {
  StencilTensors t;
  t.w = g.transposed ? weights.t() : weights;
  t.out = at::empty_like(x);
  t.x = g.in_place ? x : x.contiguous();
  // The kernels write a dense block in the order they read: x's own strides for a dense x, the
  // dense strides of x's memory order for a pitched one, logical order (contiguous) for a copy.
  // A result of any other layout gets a buffer copied into it.
  std::vector<int64_t> written;
  if (g.in_place && g.xs_row == 0) {
    written = x.strides().vec();
  } else {
    std::vector<int64_t> order(static_cast<size_t>(x.dim()));
    for (int64_t d = 0; d < x.dim(); ++d) order[static_cast<size_t>(d)] = d;
    if (g.in_place)
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return x.stride(a) > x.stride(b); });
    written.assign(order.size(), 1);
    int64_t stride = 1;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      written[static_cast<size_t>(*it)] = stride;
      stride *= x.size(*it);
    }
  }
  bool same = true;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (x.size(d) > 1 && t.out.stride(d) != written[static_cast<size_t>(d)]) same = false;
  t.kout = same ? t.out : at::empty_strided(x.sizes(), written, x.options());
  return t;
}

StencilGeometry check_stencil1d(const at::Tensor& x, const at::Tensor& weights, int64_t& dim,
                                Boundary boundary) {
  const char* op = "stencil1d";
  check_float_input(op, "x", x);
  check_weights_common(op, x, weights);
  TORCH_CHECK_VALUE(weights.dim() == 1, "cupipe.stencil1d: weights must be 1-D, got ",
                    weights.dim(), "-D with shape ", weights.sizes());
  const int64_t k = weights.size(0);
  TORCH_CHECK_VALUE(k % 2 == 1, "cupipe.stencil1d: weights must have odd length 2r+1, got ", k);
  TORCH_CHECK_VALUE(x.dim() >= 1, "cupipe.stencil1d: x must have at least 1 dim, got a 0-d tensor");
  const int64_t nd = x.dim();
  TORCH_CHECK_INDEX(dim >= -nd && dim < nd, "cupipe.stencil1d: dim ", dim,
                    " is out of range for x with ", nd, " dims");
  if (dim < 0) dim += nd;
  const int r = static_cast<int>((k - 1) / 2);
  check_reflect(op, boundary, x.size(dim), r, "dim");
  StencilGeometry g;
  g.esz = static_cast<int>(x.element_size());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
  for (int64_t d = dim + 1; d < nd; ++d) inner *= x.size(d);
  if (inner == 1) {  // along the contiguous dim: rows of length L, stencil along x
    g.batch = 1; g.ny = outer; g.nx = x.size(dim); g.ry = 0; g.rx = r;
  } else {           // along a strided dim: planes (L, inner), stencil along y
    g.batch = outer; g.ny = x.size(dim); g.nx = inner; g.ry = r; g.rx = 0;
  }
  return g;
}

namespace {
// The checks stencil2d and stencil3d share: x a floating tensor of at least nd dims, weights nd-D
// of odd sizes (at most max_size where it is > 0) on x's device. `dims` names x's last nd dims.
void check_plane_stencil(const char* op, const at::Tensor& x, const at::Tensor& weights, int64_t nd,
                         int64_t max_size, const char* dims) {
  check_float_input(op, "x", x);
  check_weights_common(op, x, weights);
  TORCH_CHECK_VALUE(weights.dim() == nd, "cupipe.", op, ": weights must be ", nd, "-D, got ", weights.dim(),
                    "-D with shape ", weights.sizes());
  for (int64_t d = 0; d < nd; ++d)
    TORCH_CHECK_VALUE(weights.size(d) % 2 == 1 && (max_size <= 0 || weights.size(d) <= max_size), "cupipe.", op,
                      ": weights must have odd sizes 2r+1", max_size > 0 ? " of at most " : "",
                      max_size > 0 ? std::to_string(max_size) : std::string(), ", got ", weights.sizes());
  TORCH_CHECK_VALUE(x.dim() >= nd, "cupipe.", op, ": x must have at least ", nd, " dims (", dims, "), got ",
                    x.dim(), "-D");
}
}  // namespace

StencilGeometry check_stencil2d(const at::Tensor& x, const at::Tensor& weights, Boundary boundary) {
  const char* op = "stencil2d";
  check_plane_stencil(op, x, weights, 2, 0, "..., H, W");
  StencilGeometry g;
  g.esz = static_cast<int>(x.element_size());
  g.ry = static_cast<int>((weights.size(0) - 1) / 2);
  g.rx = static_cast<int>((weights.size(1) - 1) / 2);
  g.ny = x.size(-2);
  g.nx = x.size(-1);
  g.batch = 1;
  for (int64_t d = 0; d < x.dim() - 2; ++d) g.batch *= x.size(d);
  check_reflect(op, boundary, g.ny, g.ry, "H (dim -2)");
  check_reflect(op, boundary, g.nx, g.rx, "W (dim -1)");
  return g;
}

Stencil3dGeometry check_stencil3d(const at::Tensor& x, const at::Tensor& weights, Boundary boundary) {
  const char* op = "stencil3d";
  check_plane_stencil(op, x, weights, 3, 2 * kStencil3dMaxRadius + 1, "..., D, H, W");
  Stencil3dGeometry g;
  g.esz = static_cast<int>(x.element_size());
  g.rz = static_cast<int>((weights.size(0) - 1) / 2);
  g.ry = static_cast<int>((weights.size(1) - 1) / 2);
  g.rx = static_cast<int>((weights.size(2) - 1) / 2);
  g.nz = x.size(-3);
  g.ny = x.size(-2);
  g.nx = x.size(-1);
  for (int64_t d = 0; d < x.dim() - 3; ++d) g.batch *= x.size(d);
  check_reflect(op, boundary, g.nz, g.rz, "D (dim -3)");
  check_reflect(op, boundary, g.ny, g.ry, "H (dim -2)");
  check_reflect(op, boundary, g.nx, g.rx, "W (dim -1)");
  return g;
}

void check_stencil_grad(const char* op, const at::Tensor& x, const at::Tensor& grad) {
  TORCH_CHECK_VALUE(grad.sizes() == x.sizes(), "cupipe.", op, ": grad must have x's shape ", x.sizes(),
                    ", got ", grad.sizes());
  TORCH_CHECK_TYPE(grad.scalar_type() == x.scalar_type(), "cupipe.", op, ": grad must have x's dtype ",
                   x.scalar_type(), ", got ", grad.scalar_type());
  TORCH_CHECK_VALUE(grad.device() == x.device(), "cupipe.", op, ": grad must be on x's device ", x.device(),
                    ", got ", grad.device());
}

at::Tensor weights_for_kernel(const at::Tensor& x, const at::Tensor& weights) {
  const auto acc = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  return weights.to(acc).contiguous();
}

ReducePlan check_reduce(const at::Tensor& x, c10::string_view op, at::OptionalIntArrayRef dim,
                        bool keepdim, std::optional<at::ScalarType> dtype, double correction, double ord) {
  ReducePlan plan;
  plan.op = parse_reduce_op("reduce", op);
  const std::string name(op);
  check_float_input("reduce", "x", x);
  const bool arg = is_arg_op(plan.op);
  const int64_t nd = x.dim();
  plan.reduced.assign(static_cast<size_t>(nd), false);
  bool all = !dim.has_value() || dim->empty();
  TORCH_CHECK_VALUE(!arg || all || dim->size() == 1, "cupipe.reduce: op='", name,
                    "' takes dim=None or one dim (as torch.", name, "), got dim=", *dim);
  if (!all) {
    bool scalar_dim_seen = false;  // a 0-d tensor has no dims to mark, but 0 and -1 still repeat
    for (int64_t d : *dim) {
      const int64_t lim = std::max<int64_t>(nd, 1);  // a 0-d tensor accepts dim 0 / -1, like torch
      TORCH_CHECK_INDEX(d >= -lim && d < lim, "cupipe.reduce: dim ", d,
                        " is out of range for x with ", nd, " dims");
      if (d < 0) d += lim;
      const bool repeated = nd == 0 ? scalar_dim_seen : plan.reduced[static_cast<size_t>(d)];
      TORCH_CHECK_VALUE(!repeated, "cupipe.reduce: dim ", d, " appears more than once in dim=",
                        *dim);
      if (nd == 0) {
        scalar_dim_seen = true;
        continue;
      }
      plan.reduced[static_cast<size_t>(d)] = true;
    }
  } else {
    std::fill(plan.reduced.begin(), plan.reduced.end(), true);
  }
  plan.all_dims = all || nd == 0 || std::all_of(plan.reduced.begin(), plan.reduced.end(), [](bool b) { return b; });
  for (int64_t d = 0; d < nd; ++d) {
    if (plan.reduced[static_cast<size_t>(d)]) {
      plan.numel_reduced *= x.size(d);
      if (keepdim) plan.out_shape.push_back(1);
    } else {
      plan.numel_kept *= x.size(d);
      plan.out_shape.push_back(x.size(d));
    }
  }
  if (dtype.has_value()) {
    TORCH_CHECK_VALUE(plan.op == ReduceOp::Sum || plan.op == ReduceOp::Mean || plan.op == ReduceOp::Norm,
                      "cupipe.reduce: dtype= is only accepted for op='sum', 'mean' and 'norm' "
                      "(as torch.sum, torch.mean and torch.linalg.vector_norm), got op='", name, "'");
    TORCH_CHECK_TYPE(is_supported_float(*dtype),
                     "cupipe.reduce: dtype must be float32, float16, bfloat16 or float64, got ",
                     *dtype);
    plan.out_dtype = *dtype;
  } else {
    plan.out_dtype = arg ? at::kLong : x.scalar_type();
  }
  TORCH_CHECK_VALUE(plan.op == ReduceOp::Var || plan.op == ReduceOp::Std || correction == 1.0,
                    "cupipe.reduce: correction= is only used by op='var' and 'std', got op='", name,
                    "' with correction=", correction);
  TORCH_CHECK_VALUE(std::isfinite(correction), "cupipe.reduce: correction must be finite, got ", correction);
  plan.correction = correction;
  TORCH_CHECK_VALUE(plan.op == ReduceOp::Norm || ord == 2.0, "cupipe.reduce: ord= is only used by op='norm', got op='",
                    name, "' with ord=", ord);
  TORCH_CHECK_VALUE(!std::isnan(ord), "cupipe.reduce: ord must be a number or +-inf for op='norm', got ord=", ord);
  plan.ord = ord;
  plan.acc_double = x.scalar_type() == at::kDouble || plan.out_dtype == at::kDouble;
  // Reductions with no identity raise on empty reduced dims, as torch does.
  const bool no_identity = plan.op == ReduceOp::Amax || plan.op == ReduceOp::Amin || arg ||
                           (plan.op == ReduceOp::Norm && std::isinf(ord));
  if (no_identity) {
    TORCH_CHECK_VALUE(plan.numel_reduced > 0 || plan.numel_kept == 0,
                      "cupipe.reduce: op='", name, "'", plan.op == ReduceOp::Norm ? " with an infinite ord" : "",
                      " of an empty reduction is undefined (x has shape ", x.sizes(),
                      " and the reduced dims have size 0); torch raises here too");
    TORCH_CHECK_VALUE(!arg || !all || x.numel() > 0, "cupipe.reduce: op='", name,
                      "' of an empty x with dim=None is undefined; torch raises here too");
  }
  return plan;
}

int reduce_kernel_esz(const at::Tensor& x, const ReducePlan& plan) {
  return plan.acc_double ? 8 : static_cast<int>(x.element_size());
}

ReduceLayoutPlan reduce_layout(const at::Tensor& x, const ReducePlan& plan, bool direct) {
  ReduceLayoutPlan lp = plan_reduce_layout(x.sizes().vec(), x.strides().vec(), plan.reduced);
  // On CUDA the first two runs of reduced dims fold into one pass where the inner run's rows are
  // whole 16-byte vectors from an aligned start (the direct column kernels). The sum kinds' fold
  // runs as the two steps it fuses under another mechanism than sync; the state kinds' (var, std,
  // logsumexp, norm) only where the direct kernel may run (else their copy, run_reduce).
  const bool may_fold = !is_arg_op(plan.op) && (!is_state_op(plan.op) || direct);
  if (x.is_cuda() && may_fold && lp.steps.size() >= 2 && lp.steps[0].inner == 1) {
    const int esz = reduce_kernel_esz(x, plan);
    // (metadata only, as explain plans fake tensors: the storage's start is taken as aligned; the
    // launch checks the pointer and runs the two steps where it is not)
    const bool fresh = lp.copy || esz != static_cast<int>(x.element_size());  // the kernels read a new tensor
    const bool aligned = fresh || x.storage_offset() * esz % 16 == 0;
    if (aligned && lp.steps[0].r * esz % 16 == 0) fold_reduce_steps(lp);
  }
  return lp;
}

bool reduce_copies_rows(const at::Tensor& x, const ReducePlan& plan, const ReduceLayoutPlan& lp) {
  return is_state_op(plan.op) &&
         (lp.steps.size() != 1 || (is_arg_op(plan.op) && plan.all_dims && !x.is_contiguous()));
}

at::ScalarType reduce_between_dtype(const at::Tensor& x, const ReducePlan& plan) {
  const bool minmax = plan.op == ReduceOp::Amax || plan.op == ReduceOp::Amin;
  return minmax ? x.scalar_type() : plan.acc_double ? at::kDouble : at::kFloat;
}

void run_fold_as_two(const at::Tensor& in, at::Tensor& out, const ReduceStep& s, const ReducePlan& plan,
                     const std::function<void(const at::Tensor&, at::Tensor&, const ReduceStep&)>& step) {
  if (is_state_op(plan.op)) {  // a state does not reduce in two steps: each output's values as one row
    const int64_t mid = s.inner / s.fold;
    const at::Tensor rows = in.view({s.outer, s.r, mid, s.fold}).permute({0, 2, 1, 3}).contiguous();
    return step(rows, out, ReduceStep{s.outer * mid, s.r * s.fold, 1});
  }
  const ReduceStep rows = s.fold_rows(), cols = s.fold_columns();
  at::Tensor tmp = at::empty({rows.outputs()}, in.options().dtype(reduce_between_dtype(in, plan)));
  step(in, tmp, rows);
  step(tmp, out, cols);
}

at::Tensor run_reduce(const at::Tensor& x, const ReducePlan& plan,
                      const std::function<void(const at::Tensor&, at::Tensor&, const ReduceStep&)>& step,
                      bool direct) {
  at::Tensor out = at::empty(plan.out_shape, x.options().dtype(plan.out_dtype));
  if (out.numel() == 0) return out;
  if (x.numel() == 0) {  // reduced dims of size 0 (those without an identity raised in check_reduce)
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const bool nan_fill = plan.op == ReduceOp::Mean || plan.op == ReduceOp::Var || plan.op == ReduceOp::Std;
    return out.fill_(nan_fill ? nan : plan.op == ReduceOp::Logsumexp ? -std::numeric_limits<double>::infinity() : 0.0);
  }
  const ReduceLayoutPlan lp = reduce_layout(x, plan, direct);
  if (reduce_copies_rows(x, plan, lp)) {
    std::vector<int64_t> perm;
    for (int64_t d = 0; d < x.dim(); ++d)
      if (!plan.reduced[static_cast<size_t>(d)]) perm.push_back(d);
    for (int64_t d = 0; d < x.dim(); ++d)
      if (plan.reduced[static_cast<size_t>(d)]) perm.push_back(d);
    const at::Tensor xc = x.permute(perm).contiguous();
    step(xc, out, ReduceStep{plan.numel_kept, plan.numel_reduced, 1});
    return out;
  }
  const at::ScalarType between = reduce_between_dtype(x, plan);
  at::Tensor in = lp.copy ? x.contiguous() : x;
  for (size_t i = 0; i < lp.steps.size(); ++i) {
    const ReduceStep& s = lp.steps[i];
    const bool last = i + 1 == lp.steps.size();
    at::Tensor dst = last && !lp.permuted_out ? out
                     : at::empty({s.outputs()}, x.options().dtype(last ? plan.out_dtype : between));
    step(in, dst, s);
    in = dst;
  }
  if (lp.permuted_out) {  // in holds the kept dims in memory order: permute them into out's order
    const std::vector<int64_t> sizes = x.sizes().vec();
    std::vector<int64_t> mem_sizes, sorted_dims(lp.out_dims.begin(), lp.out_dims.end()), perm;
    for (int d : lp.out_dims) mem_sizes.push_back(sizes[static_cast<size_t>(d)]);
    std::sort(sorted_dims.begin(), sorted_dims.end());
    std::vector<int64_t> out_sizes;
    for (int64_t d : sorted_dims) {
      out_sizes.push_back(sizes[static_cast<size_t>(d)]);
      perm.push_back(std::find(lp.out_dims.begin(), lp.out_dims.end(), static_cast<int>(d)) - lp.out_dims.begin());
    }
    out.view(out_sizes).copy_(in.view(mem_sizes).permute(perm));
  }
  return out;
}

}  // namespace ops
}  // namespace cupipe
