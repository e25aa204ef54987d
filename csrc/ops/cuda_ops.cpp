// CUDA implementations of the ops: argument checks (shared with CPU), layout preparation and
// output allocation with ATen, then a plain-struct call into csrc/kernels on the current stream.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#if CUPIPE_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include <exception>

#include "ops/args.h"
#include "ops/tuning.h"

namespace cupipe {
namespace ops {
namespace {

Stream current_stream() { return reinterpret_cast<Stream>(c10::cuda::getCurrentCUDAStream().stream()); }

// A launcher's scratch (the params' `workspace`): the caching allocator's bytes on the current
// stream (a graph capture takes them too), held in `holder` until the call returns.
std::function<void*(int64_t)> scratch_bytes(const at::Tensor& like, at::Tensor& holder) {
  return [&like, &holder](int64_t bytes) {
    holder = at::empty({bytes}, like.options().dtype(at::kByte));
    return holder.data_ptr();
  };
}

// Kernel launch failures arrive as std::runtime_error from the launchers; re-raise them as
// torch errors so Python sees a RuntimeError with the launcher's message.
template <typename F>
void run_launcher(const char* op, F&& f) {
  try {
    f();
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "cupipe.", op, ": ", e.what());
  }
}

void check_mechanism_supported(const char* op, engine::Mechanism m, const DeviceInfo& dev) {
  if (m != engine::Mechanism::Tma) return;
  TORCH_CHECK_VALUE(dev.sm >= 90, "cupipe.", op,
                    ": mechanism='tma' needs an sm_90 (Hopper) or newer GPU; this device is sm_", dev.sm);
  // A build without sm_90 code runs older PTX here, compiled without the bulk-copy instructions.
  TORCH_CHECK_VALUE(dev.code_sm >= 90, "cupipe.", op,
                    ": mechanism='tma' needs kernels compiled for sm_90 or newer, and this build's run on "
                    "this sm_", dev.sm, " device as sm_", dev.code_sm,
                    " (PTX of an older architecture); rebuild with 9.0 in TORCH_CUDA_ARCH_LIST");
}

at::Tensor stream_copy_impl(const char* op, const at::Tensor& x, c10::string_view mechanism,
                            int64_t stages, int64_t vec_bytes, int64_t tile_bytes, int64_t max_blocks) {
  MechanismArg mech = parse_mechanism(op, mechanism);
  check_stages(op, stages);
  check_vec_bytes(op, vec_bytes);
  c10::cuda::CUDAGuard guard(x.device());
  const DeviceInfo dev = device_info(x.get_device());
  const at::Tensor src = x.contiguous();
  at::Tensor out = at::empty(src.sizes(), src.options());
  StreamCopyParams p;
  p.src = src.data_ptr();
  p.dst = out.data_ptr();
  p.bytes = src.numel() * static_cast<int64_t>(src.element_size());
  const CopyConfig cfg = resolve_stream_copy(dev, mech, stages, vec_bytes, p.bytes);
  check_mechanism_supported(op, cfg.mechanism, dev);
  p.mechanism = cfg.mechanism;
  p.stages = cfg.stages;
  p.vec_bytes = cfg.vec_bytes;
  p.tile_bytes = static_cast<int>(tile_bytes);
  p.max_blocks = static_cast<int>(max_blocks);
  p.stream = current_stream();
  if (p.bytes > 0) run_launcher(op, [&] { launch_stream_copy(p); });
  return out;
}

at::Tensor stream_copy_cuda(const at::Tensor& x, c10::string_view mechanism, int64_t stages,
                            int64_t vec_bytes) {
  return stream_copy_impl("stream_copy", x, mechanism, stages, vec_bytes, 0, 0);
}

at::Tensor stream_copy_ex_cuda(const at::Tensor& x, c10::string_view mechanism, int64_t stages,
                               int64_t vec_bytes, int64_t tile_bytes, int64_t max_blocks) {
  TORCH_CHECK_VALUE(tile_bytes == 0 || (tile_bytes >= 16 && tile_bytes % 16 == 0 && tile_bytes <= (1 << 20)),
                    "cupipe._stream_copy_ex: tile_bytes must be 0 or a multiple of 16 in [16, 1 MiB], got ",
                    tile_bytes);
  TORCH_CHECK_VALUE(max_blocks >= 0, "cupipe._stream_copy_ex: max_blocks must be >= 0, got ", max_blocks);
  return stream_copy_impl("_stream_copy_ex", x, mechanism, stages, vec_bytes, tile_bytes, max_blocks);
}

// The kernel's parameters for one stencil call, but its output and grid; t holds the tensors p
// points into.
struct StencilCall {
  StencilTensors t;
  at::Tensor w;
  StencilParams p;
};

// g: the checked call's logical geometry; dim: stencil1d's dim (nullopt: stencil2d).
StencilCall stencil_call(const char* op, const at::Tensor& x, const at::Tensor& weights, const StencilGeometry& logical,
                         std::optional<int64_t> dim, Boundary boundary, MechanismArg mech, int64_t stages,
                         const DeviceInfo& dev) {
  StencilCall c;
  const StencilGeometry g = stencil_memory_geometry(x, logical, dim);
  c.t = stencil_tensors(x, weights, g);
  // fp32, fp16, bf16 and fp64 weights go to the kernel as they are (it converts them while staging
  // them: no conversion kernel per call); other floating types (fp8) are converted first.
  const at::ScalarType wt = weights.scalar_type();
  const bool as_is = wt == at::kFloat || wt == at::kHalf || wt == at::kBFloat16 || wt == at::kDouble;
  c.w = as_is ? c.t.w.contiguous() : weights_for_kernel(x, c.t.w);
  StencilParams& p = c.p;
  p.x = c.t.x.data_ptr();
  p.x_lead = std::min<int64_t>(c.t.x.storage_offset() * c.t.x.element_size(), 16);
  p.out = c.t.kout.data_ptr();
  p.weights = c.w.data_ptr();
  p.weights_dtype = to_kernel_dtype(c.w.scalar_type());
  p.dtype = to_kernel_dtype(x.scalar_type());
  p.weights_exact = weights.scalar_type() == x.scalar_type();
  p.batch = g.batch; p.ny = g.ny; p.nx = g.nx; p.ry = g.ry; p.rx = g.rx;
  p.x_row = g.xs_row; p.x_plane = g.xs_plane;
  p.x_step = g.step;
  p.boundary = boundary;
  StencilGeometry tg = g;
  tg.rows16 = rows16(g, p.x, p.x_lead, boundary);
  const CopyConfig cfg = resolve_stencil(dev, mech, stages, tg);
  check_mechanism_supported(op, cfg.mechanism, dev);
  p.mechanism = cfg.mechanism;
  p.stages = cfg.stages;
  p.tiles_per_block = cfg.tiles_per_block;
  p.stream = current_stream();
  return c;
}

at::Tensor stencil_cuda(const char* op, const at::Tensor& x, const at::Tensor& weights,
                        const StencilGeometry& g, std::optional<int64_t> dim, Boundary boundary, MechanismArg mech,
                        int64_t stages, int64_t free_sms = 0, int64_t blocks = 0) {
  c10::cuda::CUDAGuard guard(x.device());
  if (x.numel() == 0) return at::empty_like(x);
  const DeviceInfo dev = device_info(x.get_device());
  StencilCall c = stencil_call(op, x, weights, g, dim, boundary, mech, stages, dev);
  c.p.free_sms = static_cast<int>(free_sms);
  c.p.blocks = blocks;
  run_launcher(op, [&] { launch_stencil(c.p); });
  c.t.finish();
  return c.t.out;
}

// steps applications of the stencil: one call, or the fused kernel's passes (stencil/steps.cuh) where
// it has one for the call's geometry, or else a loop of single calls.
at::Tensor stencil_steps_cuda(const char* op, const at::Tensor& x, const at::Tensor& weights, const StencilGeometry& g,
                              std::optional<int64_t> dim, Boundary boundary, MechanismArg mech, int64_t stages,
                              int64_t steps) {
  if (steps == 1 || x.numel() == 0) return stencil_cuda(op, x, weights, g, dim, boundary, mech, stages);
  c10::cuda::CUDAGuard guard(x.device());
  const DeviceInfo dev = device_info(x.get_device());
  StencilCall c = stencil_call(op, x, weights, g, dim, boundary, mech, stages, dev);
  const int per_pass = stencil_steps_per_pass(c.p.ry, c.p.rx, dtype_size(c.p.dtype), c.p.x_step);
  if (per_pass < 2) {
    return repeat_steps(steps, x, [&](const at::Tensor& in) {
      return stencil_cuda(op, in, weights, g, dim, boundary, mech, stages);
    });
  }
  const CopyConfig cfg = resolve_stencil_steps(dev, mech, stages);
  check_mechanism_supported(op, cfg.mechanism, dev);
  c.p.mechanism = cfg.mechanism;
  c.p.stages = cfg.stages;
  const at::Tensor scratch = steps > per_pass ? at::empty({c.p.batch * c.p.ny * c.p.nx}, c.t.kout.options()) : at::Tensor();
  at::Tensor flags;
  c.p.workspace = scratch_bytes(x, flags);
  run_launcher(op, [&] { launch_stencil_steps(c.p, steps, scratch.defined() ? scratch.data_ptr() : nullptr); });
  c.t.finish();
  return c.t.out;
}

at::Tensor stencil1d_cuda(const at::Tensor& x, const at::Tensor& weights, int64_t dim,
                          c10::string_view boundary, c10::string_view mechanism, int64_t stages, int64_t steps) {
  const StencilKnobs knobs = check_stencil_knobs("stencil1d", boundary, mechanism, stages, steps);
  const Boundary b = knobs.boundary;
  const MechanismArg mech = knobs.mechanism;
  const StencilGeometry g = check_stencil1d(x, weights, dim, b);
  return stencil_steps_cuda("stencil1d", x, weights, g, dim, b, mech, stages, steps);
}

at::Tensor stencil2d_cuda(const at::Tensor& x, const at::Tensor& weights, c10::string_view boundary,
                          c10::string_view mechanism, int64_t stages, int64_t steps) {
  const StencilKnobs knobs = check_stencil_knobs("stencil2d", boundary, mechanism, stages, steps);
  const Boundary b = knobs.boundary;
  const MechanismArg mech = knobs.mechanism;
  const StencilGeometry g = check_stencil2d(x, weights, b);
  return stencil_steps_cuda("stencil2d", x, weights, g, std::nullopt, b, mech, stages, steps);
}

at::Tensor stencil3d_cuda_step(const at::Tensor& x, const at::Tensor& weights, const Stencil3dGeometry& g, Boundary b,
                               MechanismArg mech, int64_t stages) {
  const char* op = "stencil3d";
  if (g.rz == 0) {  // a batch of 2-D stencils, the (..., D) dims its batch
    const at::Tensor w2 = weights.select(0, 0);
    return stencil_cuda(op, x, w2, check_stencil2d(x, w2, b), std::nullopt, b, mech, stages);
  }
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty_like(x);  // x's layout when x is dense, as the fake kernel says
  if (x.numel() == 0) return out;
  const DeviceInfo dev = device_info(x.get_device());
  const at::Tensor xc = x.contiguous();
  at::Tensor kout = out.is_contiguous() ? out : at::empty(x.sizes(), x.options());
  const at::ScalarType wt = weights.scalar_type();
  const bool as_is = wt == at::kFloat || wt == at::kHalf || wt == at::kBFloat16 || wt == at::kDouble;
  const at::Tensor w = as_is ? weights.contiguous() : weights_for_kernel(x, weights);
  Stencil3dParams p;
  p.x = xc.data_ptr();
  p.out = kout.data_ptr();
  p.weights = w.data_ptr();
  p.dtype = to_kernel_dtype(x.scalar_type());
  p.weights_dtype = to_kernel_dtype(w.scalar_type());
  p.batch = g.batch; p.nz = g.nz; p.ny = g.ny; p.nx = g.nx;
  p.rz = g.rz; p.ry = g.ry; p.rx = g.rx;
  p.boundary = b;
  const CopyConfig cfg = resolve_stencil3d(dev, mech, stages);
  check_mechanism_supported(op, cfg.mechanism, dev);
  p.mechanism = cfg.mechanism;
  p.stages = cfg.stages;
  p.stream = current_stream();
  at::Tensor flags;
  p.workspace = scratch_bytes(x, flags);
  run_launcher(op, [&] { launch_stencil3d(p); });
  if (!kout.is_same(out)) out.copy_(kout);
  return out;
}

at::Tensor stencil3d_cuda(const at::Tensor& x, const at::Tensor& weights, c10::string_view boundary,
                          c10::string_view mechanism, int64_t stages, int64_t steps) {
  const StencilKnobs knobs = check_stencil_knobs("stencil3d", boundary, mechanism, stages, steps);
  const Boundary b = knobs.boundary;
  const MechanismArg mech = knobs.mechanism;
  const Stencil3dGeometry g = check_stencil3d(x, weights, b);
  return repeat_steps(steps, x,
                      [&](const at::Tensor& in) { return stencil3d_cuda_step(in, weights, g, b, mech, stages); });
}

void check_ex_grid_args(const char* op, int64_t free_sms, int64_t blocks) {
  TORCH_CHECK_VALUE(free_sms >= 0 && free_sms < (1 << 16), "cupipe.", op, ": free_sms must be in [0, 65535], got ",
                    free_sms);
  TORCH_CHECK_VALUE(blocks >= 0 && blocks <= (1 << 20), "cupipe.", op, ": blocks must be in [0, 2^20], got ", blocks);
}

at::Tensor stencil1d_ex_cuda(const at::Tensor& x, const at::Tensor& weights, int64_t dim,
                             c10::string_view boundary, c10::string_view mechanism, int64_t stages,
                             int64_t free_sms, int64_t blocks) {
  check_ex_grid_args("_stencil1d_ex", free_sms, blocks);
  const Boundary b = parse_boundary("stencil1d", boundary);
  const MechanismArg mech = parse_mechanism("stencil1d", mechanism);
  check_stages("stencil1d", stages);
  const StencilGeometry g = check_stencil1d(x, weights, dim, b);
  return stencil_cuda("stencil1d", x, weights, g, dim, b, mech, stages, free_sms, blocks);
}

at::Tensor stencil2d_ex_cuda(const at::Tensor& x, const at::Tensor& weights, c10::string_view boundary,
                             c10::string_view mechanism, int64_t stages, int64_t free_sms,
                             int64_t blocks) {
  check_ex_grid_args("_stencil2d_ex", free_sms, blocks);
  const Boundary b = parse_boundary("stencil2d", boundary);
  const MechanismArg mech = parse_mechanism("stencil2d", mechanism);
  check_stages("stencil2d", stages);
  const StencilGeometry g = check_stencil2d(x, weights, b);
  return stencil_cuda("stencil2d", x, weights, g, std::nullopt, b, mech, stages, free_sms, blocks);
}

at::Tensor stencil_weight_grad_cuda(const char* op, const at::Tensor& x, const at::Tensor& grad,
                                    const at::Tensor& weights, const StencilGeometry& g, Boundary boundary) {
  check_stencil_grad(op, x, grad);
  c10::cuda::CUDAGuard guard(x.device());
  const auto acc = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  if (x.numel() == 0) return at::zeros(weights.sizes(), x.options().dtype(acc));
  const DeviceInfo dev = device_info(x.get_device());
  const at::Tensor xc = x.contiguous(), gc = grad.contiguous();
  const int64_t taps = (2 * int64_t(g.ry) + 1) * (2 * int64_t(g.rx) + 1);
  at::Tensor partials = at::empty({int64_t(dev.num_sms) * kMaxBlocksPerSm, taps}, x.options().dtype(acc));
  StencilWeightGradParams p;
  p.x = xc.data_ptr();
  p.grad = gc.data_ptr();
  p.partials = partials.data_ptr();
  p.max_blocks = partials.size(0);
  p.dtype = to_kernel_dtype(x.scalar_type());
  p.batch = g.batch; p.ny = g.ny; p.nx = g.nx; p.ry = g.ry; p.rx = g.rx;
  p.boundary = boundary;
  p.stream = current_stream();
  int64_t blocks = 0;
  run_launcher(op, [&] { blocks = launch_stencil_weight_grad(p); });
  // The blocks' rows added in a fixed order (deterministic).
  return partials.narrow(0, 0, blocks).sum(0).view(weights.sizes());
}

at::Tensor stencil1d_weight_grad_cuda(const at::Tensor& x, const at::Tensor& grad, const at::Tensor& weights,
                                      int64_t dim, c10::string_view boundary) {
  const Boundary b = parse_boundary("_stencil1d_weight_grad", boundary);
  const StencilGeometry g = check_stencil1d(x, weights, dim, b);
  return stencil_weight_grad_cuda("_stencil1d_weight_grad", x, grad, weights, g, b);
}

at::Tensor stencil2d_weight_grad_cuda(const at::Tensor& x, const at::Tensor& grad, const at::Tensor& weights,
                                      c10::string_view boundary) {
  const Boundary b = parse_boundary("_stencil2d_weight_grad", boundary);
  const StencilGeometry g = check_stencil2d(x, weights, b);
  return stencil_weight_grad_cuda("_stencil2d_weight_grad", x, grad, weights, g, b);
}

at::Tensor reduce_impl(const at::Tensor& x, c10::string_view op, at::OptionalIntArrayRef dim,
                       bool keepdim, std::optional<at::ScalarType> dtype, double correction, double ord,
                       c10::string_view mechanism, int64_t stages, int64_t tile_bytes, int64_t blocks) {
  const MechanismArg mech = parse_mechanism("reduce", mechanism);
  check_stages("reduce", stages);
  const ReducePlan plan = check_reduce(x, op, dim, keepdim, dtype, correction, ord);
  c10::cuda::CUDAGuard guard(x.device());
  const DeviceInfo dev = device_info(x.get_device());
  // The kernels accumulate in double only for double input; dtype=float64 on a narrower input
  // (like torch.sum(x, dtype=torch.float64)) converts the input first.
  const at::Tensor xin = plan.acc_double && x.scalar_type() != at::kDouble ? x.to(at::kDouble) : x;
  std::function<void(const at::Tensor&, at::Tensor&, const ReduceStep&)> step;
  step = [&](const at::Tensor& in, at::Tensor& out, const ReduceStep& s) {
    ReduceParams p;
    p.x = in.data_ptr();
    p.out = out.data_ptr();
    p.in_dtype = to_kernel_dtype(in.scalar_type());
    // (argmax/argmin write int64 indices whatever out_dtype says)
    p.out_dtype = out.scalar_type() == at::kLong ? DType::F32 : to_kernel_dtype(out.scalar_type());
    p.acc_double = plan.acc_double;
    p.outer = s.outer; p.r = s.r; p.inner = s.inner; p.fold = s.fold;
    p.op = plan.op;
    p.correction = plan.correction;
    p.ord = plan.ord;
    const CopyConfig cfg =
        resolve_reduce(dev, mech, stages, s.outer, s.r, s.inner, static_cast<int>(in.element_size()), plan.op,
                       reduce_step_rows16(s.outer, s.r, s.inner, static_cast<int>(in.element_size()),
                                          address_alignment(reinterpret_cast<uintptr_t>(in.data_ptr()))),
                       s.fold > 1);
    check_mechanism_supported("reduce", cfg.mechanism, dev);
    p.mechanism = cfg.mechanism;
    p.stages = cfg.stages;
    p.tile_bytes = static_cast<int>(tile_bytes);
    p.blocks = blocks;
    p.stream = current_stream();
    if (p.fold > 1 && !reduce_folds(p)) return run_fold_as_two(in, out, s, plan, step);  // (a mechanism asked for)
    at::Tensor workspace;
    const int64_t ws = reduce_workspace_bytes(p);
    if (ws > 0) {
      workspace = at::empty({ws}, x.options().dtype(at::kByte));
      p.workspace = workspace.data_ptr();
      p.workspace_bytes = ws;
    }
    run_launcher("reduce", [&] { launch_reduce(p); });
  };
  // The state kinds fold two runs of reduced dims only on their direct kernel: under auto or sync.
  return run_reduce(xin, plan, step, mech.is_auto || mech.mechanism == engine::Mechanism::Sync);
}

at::Tensor reduce_cuda(const at::Tensor& x, c10::string_view op, at::OptionalIntArrayRef dim,
                       bool keepdim, std::optional<at::ScalarType> dtype, double correction, double ord,
                       c10::string_view mechanism, int64_t stages) {
  return reduce_impl(x, op, dim, keepdim, dtype, correction, ord, mechanism, stages, 0, 0);
}

at::Tensor reduce_ex_cuda(const at::Tensor& x, c10::string_view op, at::OptionalIntArrayRef dim,
                          bool keepdim, c10::string_view mechanism, int64_t stages, int64_t tile_bytes,
                          int64_t blocks) {
  // Columns take tile_bytes / chunk bytes rows (at least one) of a 512-byte to 4 KiB chunk per stage.
  TORCH_CHECK_VALUE(tile_bytes == 0 || (tile_bytes >= 2048 && tile_bytes <= 65536 && tile_bytes % 512 == 0),
                    "cupipe._reduce_ex: tile_bytes must be 0 or a multiple of 512 in [2048, 65536], got ",
                    tile_bytes);
  TORCH_CHECK_VALUE(blocks >= 0 && blocks <= (1 << 20), "cupipe._reduce_ex: blocks must be in [0, 2^20], got ", blocks);
  return reduce_impl(x, op, dim, keepdim, std::nullopt, 1.0, 2.0, mechanism, stages, tile_bytes, blocks);
}

}  // namespace

// The kernel family stencil1d (dim given) or stencil2d (dim None) would launch for these
// arguments ("" for an empty input): explain's and the tests' view of the launch plan.
std::string stencil_family_cuda(const at::Tensor& x, const at::Tensor& weights, std::optional<int64_t> dim,
                                c10::string_view boundary, c10::string_view mechanism, int64_t stages) {
  const char* op = dim ? "stencil1d" : "stencil2d";
  const Boundary b = parse_boundary(op, boundary);
  const MechanismArg mech = parse_mechanism(op, mechanism);
  check_stages(op, stages);
  TORCH_CHECK_VALUE(x.is_cuda(), "cupipe.", op, ": stencil_family needs a CUDA tensor");
  int64_t d = dim.value_or(0);
  const StencilGeometry g = dim ? check_stencil1d(x, weights, d, b) : check_stencil2d(x, weights, b);
  if (x.numel() == 0) return "";
  c10::cuda::CUDAGuard guard(x.device());
  const StencilCall c = stencil_call(op, x, weights, g, dim ? std::optional<int64_t>(d) : std::nullopt, b, mech,
                                     stages, device_info(x.get_device()));
  return ::cupipe::stencil_family(c.p);
}

TORCH_LIBRARY_IMPL(cupipe, CUDA, m) {
  m.impl("stream_copy", &stream_copy_cuda);
  m.impl("_stream_copy_ex", &stream_copy_ex_cuda);
  m.impl("stencil1d", &stencil1d_cuda);
  m.impl("stencil2d", &stencil2d_cuda);
  m.impl("stencil3d", &stencil3d_cuda);
  m.impl("_stencil1d_ex", &stencil1d_ex_cuda);
  m.impl("_stencil2d_ex", &stencil2d_ex_cuda);
  m.impl("_stencil1d_weight_grad", &stencil1d_weight_grad_cuda);
  m.impl("_stencil2d_weight_grad", &stencil2d_weight_grad_cuda);
  m.impl("reduce", &reduce_cuda);
  m.impl("_reduce_ex", &reduce_ex_cuda);
}

}  // namespace ops
}  // namespace cupipe
#endif  // CUPIPE_WITH_CUDA
