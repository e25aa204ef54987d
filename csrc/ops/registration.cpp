// The op schemas (the API in README.md) and the Python module cupipe._C.
// CPU kernels register in cpu_kernels.cpp, CUDA kernels in cuda_ops.cpp.
// Not <torch/extension.h>: it brings the whole C++ frontend, and a build took twice as long.
#include <ATen/core/Tensor.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include "kernels/params.h"
#if CUPIPE_WITH_CUDA
#include "kernels/registry.h"
#endif
#include "ops/tuning.h"

TORCH_LIBRARY(cupipe, m) {
  m.def("stream_copy(Tensor x, *, str mechanism=\"auto\", int stages=0, int vec_bytes=0) -> Tensor");
  m.def(
      "stencil1d(Tensor x, Tensor weights, *, int dim=-1, str boundary=\"zero\", "
      "str mechanism=\"auto\", int stages=0, int steps=1) -> Tensor");
  m.def(
      "stencil2d(Tensor x, Tensor weights, *, str boundary=\"zero\", str mechanism=\"auto\", "
      "int stages=0, int steps=1) -> Tensor");
  m.def(
      "stencil3d(Tensor x, Tensor weights, *, str boundary=\"zero\", str mechanism=\"auto\", "
      "int stages=0, int steps=1) -> Tensor");
  // Not part of the public API: stream_copy with the engine's tile size and grid cap exposed, for
  // benchmarks and the latency study (tile_bytes = 0 / max_blocks = 0: defaults).
  m.def(
      "_stream_copy_ex(Tensor x, str mechanism, int stages, int vec_bytes, int tile_bytes, "
      "int max_blocks) -> Tensor");
  // Not part of the public API: the stencils leaving `free_sms` SMs to other streams (the halo
  // exchange that cupipe.distributed overlaps with the interior), and with their grid exposed
  // (`blocks`, 0: one wave of resident blocks) for the grid sweep.
  m.def(
      "_stencil1d_ex(Tensor x, Tensor weights, int dim, str boundary, str mechanism, int stages, "
      "int free_sms, int blocks=0) -> Tensor");
  m.def(
      "_stencil2d_ex(Tensor x, Tensor weights, str boundary, str mechanism, int stages, "
      "int free_sms, int blocks=0) -> Tensor");
  // Not part of the public API: the stencils' weight gradients (their autograd calls them), in the
  // accumulation dtype (float32; float64 for float64 x), with the weights' shape.
  m.def("_stencil1d_weight_grad(Tensor x, Tensor grad, Tensor weights, int dim, str boundary) -> Tensor");
  m.def("_stencil2d_weight_grad(Tensor x, Tensor grad, Tensor weights, str boundary) -> Tensor");
  m.def(
      "reduce(Tensor x, str op=\"sum\", int[1]? dim=None, bool keepdim=False, *, "
      "ScalarType? dtype=None, float correction=1, float ord=2, str mechanism=\"auto\", int stages=0) -> Tensor");
  // Not part of the public API: reduce with the stage size and the main pass's blocks exposed
  // (0: defaults), for the sweeps.
  m.def(
      "_reduce_ex(Tensor x, str op, int[1]? dim, bool keepdim, str mechanism, int stages, "
      "int tile_bytes, int blocks=0) -> Tensor");
}

namespace {

pybind11::dict cuda_device_info(int device) {
  pybind11::dict d;
#if CUPIPE_WITH_CUDA
  auto info = cupipe::device_info(device);
  d["sm"] = info.sm;
  d["code_sm"] = info.code_sm;
  d["ahead_of_time_code"] = info.ahead_of_time_code;
  d["num_sms"] = info.num_sms;
  d["max_smem_optin"] = info.max_smem_optin;
  d["dram_peak_gbps"] = info.dram_peak_gbps;
#else
  (void)device;
#endif
  return d;
}

using cupipe::ops::CopyConfig;
using cupipe::ops::TableShape;

// What mechanism="auto" / stages=0 / vec_bytes=0 resolve to for `op` where the kernels run as
// `sm` (10*major + minor: cuda_device_info's code_sm), through the table the CUDA ops use
// (tuning.cpp); explicit arguments pass through, validated like the ops validate them.
CopyConfig resolve(const std::string& op, int sm, const std::string& mechanism, int64_t stages, int64_t vec_bytes,
                   int64_t outer, int64_t r, int64_t inner, int ry, int rx, int esz, bool rows16, int64_t step,
                   int rz, int64_t steps, const std::string& reduce_op, int64_t fold) {
  using namespace cupipe::ops;
  const MechanismArg mech = parse_mechanism(op.c_str(), mechanism);
  check_stages(op.c_str(), stages);
  check_vec_bytes(op.c_str(), vec_bytes);
  TableShape shape;
  shape.outer = outer; shape.r = r; shape.inner = inner;
  shape.ry = ry; shape.rx = rx; shape.esz = esz; shape.rows16 = rows16; shape.step = step; shape.rz = rz;
  shape.steps = steps;
  shape.fold = fold;
  if (op == "reduce") shape.reduce_op = parse_reduce_op("reduce", reduce_op);
  return resolve_op(op, sm, mech, stages, vec_bytes, shape);
}

// (mechanism, stages, vec_bytes)
pybind11::tuple resolve_config(const std::string& op, int sm, const std::string& mechanism, int64_t stages,
                               int64_t vec_bytes, int64_t outer, int64_t r, int64_t inner, int ry, int rx,
                               int esz, bool rows16, int64_t step, int rz, int64_t steps,
                               const std::string& reduce_op, int64_t fold) {
  const CopyConfig cfg = resolve(op, sm, mechanism, stages, vec_bytes, outer, r, inner, ry, rx, esz, rows16, step, rz,
                                 steps, reduce_op, fold);
  return pybind11::make_tuple(std::string(cupipe::engine::mechanism_name(cfg.mechanism)), cfg.stages,
                              cfg.vec_bytes);
}

// (mechanism, stages, vec_bytes, why): why the table makes its own choice for this case.
pybind11::tuple explain_config(const std::string& op, int sm, const std::string& mechanism, int64_t stages,
                               int64_t vec_bytes, int64_t outer, int64_t r, int64_t inner, int ry, int rx,
                               int esz, bool rows16, int64_t step, int rz, int64_t steps,
                               const std::string& reduce_op, int64_t fold) {
  const CopyConfig cfg = resolve(op, sm, mechanism, stages, vec_bytes, outer, r, inner, ry, rx, esz, rows16, step, rz,
                                 steps, reduce_op, fold);
  return pybind11::make_tuple(std::string(cupipe::engine::mechanism_name(cfg.mechanism)), cfg.stages,
                              cfg.vec_bytes, std::string(cfg.why));
}

// Whether a call with this mechanism may take the direct kernels (auto or sync): reduce's plan folds
// the state kinds' two runs of reduced dims only then (ops/args.h, reduce_layout).
bool direct_mechanism(const std::string& mechanism) { return mechanism == "auto" || mechanism == "sync"; }

// A Python dim argument: None, one int or a sequence of ints.
std::optional<std::vector<int64_t>> dims_arg(const pybind11::object& dim) {
  if (pybind11::isinstance<pybind11::int_>(dim)) return std::vector<int64_t>{dim.cast<int64_t>()};
  if (dim.is_none()) return std::nullopt;
  return dim.cast<std::vector<int64_t>>();
}

// The shape keywords of resolve_config for `op` called on x with these arguments, derived as the op
// derives them (reduce's canonical view, the stencils' radii along the kernels' axes).
pybind11::dict table_shape(const std::string& op, const at::Tensor& x, const std::optional<at::Tensor>& weights,
                           const pybind11::object& dim, const std::string& boundary,
                           const std::string& reduce_op, std::optional<at::ScalarType> dtype, int64_t steps,
                           const std::string& mechanism) {
  const TableShape s =
      cupipe::ops::table_shape(op, x, weights, dims_arg(dim), boundary, reduce_op, dtype, direct_mechanism(mechanism));
  pybind11::dict d;
  if (op == "reduce") {
    d["outer"] = s.outer;
    d["r"] = s.r;
    d["inner"] = s.inner;
    d["fold"] = s.fold;
    d["esz"] = s.esz;
    d["rows16"] = s.rows16;
    d["reduce_op"] = reduce_op;
  } else if (op != "stream_copy") {
    d["ry"] = s.ry;
    d["rx"] = s.rx;
    d["esz"] = s.esz;
    d["rows16"] = s.rows16;
    d["step"] = s.step;
    if (op == "stencil3d") d["rz"] = s.rz;
    else if (steps > 1) d["steps"] = steps;
  }
  return d;
}

std::string layout_plan(const std::string& op, const at::Tensor& x, const std::optional<at::Tensor>& weights,
                        const pybind11::object& dim, const std::string& boundary, const std::string& reduce_op,
                        std::optional<at::ScalarType> dtype, int64_t /*steps*/, const std::string& mechanism) {
  return cupipe::ops::table_shape(op, x, weights, dims_arg(dim), boundary, reduce_op, dtype,
                                  direct_mechanism(mechanism)).layout;
}

pybind11::tuple names(const std::vector<std::string>& v) {
  pybind11::tuple t(v.size());
  for (size_t i = 0; i < v.size(); ++i) t[i] = pybind11::str(v[i]);
  return t;
}

}  // namespace

namespace cupipe {
namespace ops {
void bind_direct_calls(pybind11::module& m);  // direct_calls.cpp
#if CUPIPE_WITH_CUDA
std::string stencil_family_cuda(const at::Tensor& x, const at::Tensor& weights, std::optional<int64_t> dim,
                                c10::string_view boundary, c10::string_view mechanism, int64_t stages);  // cuda_ops.cpp
#endif
#if CUPIPE_WITH_CUDA
// The registry's compiler hook (kernels/registry.h): cupipe/_kernel_cache.py compiles the instance
// or finds it in the disk cache. Called from launchers, with or without the GIL held.
std::string compile_kernel_in_python(const std::string& header, const std::string& id, int device) {
  namespace py = pybind11;
  py::gil_scoped_acquire gil;
  try {
    py::bytes cubin = py::module_::import("cupipe._kernel_cache").attr("compile_for_device")(header, id, device);
    return std::string(cubin);
  } catch (py::error_already_set& e) {
    throw std::runtime_error(e.what());
  }
}
#endif
}  // namespace ops
}  // namespace cupipe

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "cupipe compiled kernels; the ops are in torch.ops.cupipe";
  m.attr("with_cuda") = static_cast<bool>(CUPIPE_WITH_CUDA);
  m.def("cuda_device_info", &cuda_device_info, "sm version, SM count, opt-in shared memory");
  // The names the ops accept, defined once in C++ (args.cpp, the engine's mechanism table): the
  // Python package's MECHANISMS, BOUNDARIES and REDUCE_OPS, and the ops the table resolves.
  m.attr("MECHANISMS") = names(cupipe::ops::mechanism_names());
  m.attr("BOUNDARIES") = names(cupipe::ops::boundary_names());
  m.attr("REDUCE_OPS") = names(cupipe::ops::reduce_op_names());
  m.attr("TUNED_OPS") = names(cupipe::ops::tuned_op_names());
  namespace py = pybind11;
  static const std::string shape_doc =
      "reduce's table depends on its canonical (outer, r, inner) view, the stencils' on the radii (ry "
      "along the rows, rx along the last dim; stencil1d along the last dim is ry = 0), the element size "
      "in bytes, whether x's rows are whole 16-byte multiples from a 16-byte aligned pointer (rows16) and "
      "the elements between x's taps (step: a batch dim inside the rows, as channels_last's C), reduce's op "
      "(the state ops have choices of their own), and "
      "stencil3d's depth radius (rz; 0 runs as stencil2d), and stencil1d/stencil2d's steps (steps > 1: the "
      "fused kernel's table where one runs); "
      "table_shape derives them from a call's arguments";
  m.def("resolve_config", &resolve_config,
        ("what auto resolves to: (op, sm, mechanism, stages, vec_bytes[, outer, r, inner, ry, rx, esz, "
         "rows16, step, rz, steps, reduce_op, fold]) -> (mechanism, stages, vec_bytes); " + shape_doc).c_str(),
        py::arg("op"), py::arg("sm"), py::arg("mechanism"), py::arg("stages"), py::arg("vec_bytes"),
        py::arg("outer") = 1, py::arg("r") = 1, py::arg("inner") = 1, py::arg("ry") = 0, py::arg("rx") = 0,
        py::arg("esz") = 4, py::arg("rows16") = false, py::arg("step") = 1, py::arg("rz") = 0,
        py::arg("steps") = 1, py::arg("reduce_op") = "sum", py::arg("fold") = 1);
  m.def("explain_config", &explain_config,
        "resolve_config's arguments -> (mechanism, stages, vec_bytes, why): why the table makes its own "
        "choice for this case",
        py::arg("op"), py::arg("sm"), py::arg("mechanism"), py::arg("stages"), py::arg("vec_bytes"),
        py::arg("outer") = 1, py::arg("r") = 1, py::arg("inner") = 1, py::arg("ry") = 0, py::arg("rx") = 0,
        py::arg("esz") = 4, py::arg("rows16") = false, py::arg("step") = 1, py::arg("rz") = 0,
        py::arg("steps") = 1, py::arg("reduce_op") = "sum", py::arg("fold") = 1);
  m.def("table_shape", &table_shape,
        "the shape keywords of resolve_config for op(x, ...) (checked as the op checks them; reads only "
        "metadata): dim is stencil1d's dim or reduce's dims (None: all), boundary the stencils', reduce_op "
        "and dtype reduce's, steps stencil1d/stencil2d's",
        py::arg("op"), py::arg("x"), py::arg("weights") = py::none(), py::arg("dim") = py::none(),
        py::arg("boundary") = "zero", py::arg("reduce_op") = "sum", py::arg("dtype") = py::none(),
        py::arg("steps") = 1, py::arg("mechanism") = "auto");
  m.def("layout_plan", &layout_plan,
        "how op(x, ...) reads x's memory (csrc/ops/layout.h), in words; table_shape's arguments",
        py::arg("op"), py::arg("x"), py::arg("weights") = py::none(), py::arg("dim") = py::none(),
        py::arg("boundary") = "zero", py::arg("reduce_op") = "sum", py::arg("dtype") = py::none(),
        py::arg("steps") = 1, py::arg("mechanism") = "auto");
  m.def(
      "stencil_family",
      [](const at::Tensor& x, const at::Tensor& weights, std::optional<int64_t> dim, const std::string& boundary,
         const std::string& mechanism, int64_t stages) -> std::string {
#if CUPIPE_WITH_CUDA
        return cupipe::ops::stencil_family_cuda(x, weights, dim, boundary, mechanism, stages);
#else
        (void)x, (void)weights, (void)dim, (void)boundary, (void)mechanism, (void)stages;
        throw std::runtime_error("cupipe.stencil_family: this build of cupipe has no CUDA kernels");
#endif
      },
      "the kernel family (csrc/kernels/stencil/family.cuh) stencil1d (dim given) or stencil2d (dim None) "
      "launches for these arguments on x's device",
      py::arg("x"), py::arg("weights"), py::arg("dim") = py::none(), py::arg("boundary") = "zero",
      py::arg("mechanism") = "auto", py::arg("stages") = 0);
#if CUPIPE_WITH_CUDA
  cupipe::set_kernel_compiler(&cupipe::ops::compile_kernel_in_python);
  m.def(
      "_load_kernel",
      [](const std::string& id, const py::bytes& cubin) { cupipe::load_kernel_cubin(id, std::string(cubin)); },
      "load a kernel instance's cubin into this process (cupipe.precompile)", py::arg("id"), py::arg("cubin"));
  m.def("_kernel_origin", &cupipe::kernel_origin,
        "'ahead-of-time', 'first-use' (loaded from a cubin) or '' (not loaded) for a kernel instance's id",
        py::arg("id"));
  m.def("_ahead_of_time_kernels", &cupipe::ahead_of_time_kernels, "the ids of the instances built into the module");
  m.def(
      "_plan_kernels",
      [](const py::function& call) {
        std::vector<cupipe::PlannedKernel> plan;
        {
          cupipe::KernelPlanScope scope(&plan);
          call();
        }
        py::list out;
        for (const auto& k : plan) out.append(py::make_tuple(k.id, k.origin, k.blocks, k.threads, k.smem));
        return out;
      },
      "[(id, origin, blocks, threads, shared memory bytes)] of the kernels call() launches, recorded instead "
      "of launched (kernels/registry.h)",
      py::arg("call"));
#endif
  cupipe::ops::bind_direct_calls(m);
}
