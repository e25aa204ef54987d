// The op schemas (the public contract of DESIGN.md) and the Python module cupipe._C.
// CPU kernels register in cpu_*.cpp, CUDA kernels in cuda_ops.cpp.
#include <torch/extension.h>
#include <torch/library.h>

#include "kernels/params.h"
#include "ops/tuning.h"

TORCH_LIBRARY(cupipe, m) {
  m.def("stream_copy(Tensor x, *, str mechanism=\"auto\", int stages=0, int vec_bytes=0) -> Tensor");
  m.def(
      "stencil1d(Tensor x, Tensor weights, *, int dim=-1, str boundary=\"zero\", "
      "str mechanism=\"auto\", int stages=0) -> Tensor");
  m.def(
      "stencil2d(Tensor x, Tensor weights, *, str boundary=\"zero\", str mechanism=\"auto\", "
      "int stages=0) -> Tensor");
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
      "ScalarType? dtype=None, str mechanism=\"auto\", int stages=0) -> Tensor");
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
  d["num_sms"] = info.num_sms;
  d["max_smem_optin"] = info.max_smem_optin;
  d["dram_peak_gbps"] = info.dram_peak_gbps;
#else
  (void)device;
#endif
  return d;
}

// What mechanism="auto" / stages=0 / vec_bytes=0 resolve to for `op` where the kernels run as
// `sm` (10*major + minor: cuda_device_info's code_sm, the device's compute capability for a build
// with code for it): the same table the CUDA kernels use (csrc/ops/tuning.cpp). Explicit
// arguments pass through. Returns (mechanism, stages, vec_bytes).
pybind11::tuple resolve_config(const std::string& op, int sm, const std::string& mechanism, int64_t stages,
                               int64_t vec_bytes, int64_t outer, int64_t r, int64_t inner, int ry, int rx,
                               int esz, bool rows16) {
  using namespace cupipe::ops;
  const MechanismArg mech = parse_mechanism(op.c_str(), mechanism);
  check_stages(op.c_str(), stages);
  check_vec_bytes(op.c_str(), vec_bytes);
  cupipe::DeviceInfo dev;
  dev.sm = sm;
  dev.code_sm = sm;  // a build with code for the device's architecture
  CopyConfig cfg;
  if (op == "stream_copy") {
    cfg = resolve_stream_copy(dev, mech, stages, vec_bytes, 0);
  } else if (op == "stencil1d" || op == "stencil2d") {
    StencilGeometry g;
    g.ry = ry;
    g.rx = rx;
    g.esz = esz;
    g.rows16 = rows16;
    cfg = resolve_stencil(dev, mech, stages, g);
  } else if (op == "reduce") {
    cfg = resolve_reduce(dev, mech, stages, outer, r, inner, esz);
  } else {
    TORCH_CHECK_VALUE(false, "cupipe.resolve_config: unknown op '", op,
                      "'; expected stream_copy, stencil1d, stencil2d or reduce");
  }
  return pybind11::make_tuple(std::string(cupipe::engine::mechanism_name(cfg.mechanism)), cfg.stages,
                              cfg.vec_bytes);
}

}  // namespace

namespace cupipe {
namespace ops {
void bind_direct_calls(pybind11::module& m);  // direct_calls.cpp
}  // namespace ops
}  // namespace cupipe

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "cupipe compiled kernels; the ops are in torch.ops.cupipe";
  m.attr("with_cuda") = static_cast<bool>(CUPIPE_WITH_CUDA);
  m.def("cuda_device_info", &cuda_device_info, "sm version, SM count, opt-in shared memory");
  m.def("resolve_config", &resolve_config,
        "what auto resolves to: (op, sm, mechanism, stages, vec_bytes[, outer, r, inner, ry, rx, esz, "
        "rows16]); reduce's table depends on its canonical (outer, r, inner) view, the stencils' on the "
        "radii (ry along the rows, rx along the last dim; stencil1d along the last dim is ry = 0), "
        "the element size in bytes and whether x's rows are whole 16-byte multiples from a 16-byte "
        "aligned pointer (rows16)",
        pybind11::arg("op"), pybind11::arg("sm"), pybind11::arg("mechanism"), pybind11::arg("stages"),
        pybind11::arg("vec_bytes"), pybind11::arg("outer") = 1, pybind11::arg("r") = 1,
        pybind11::arg("inner") = 1, pybind11::arg("ry") = 0, pybind11::arg("rx") = 0,
        pybind11::arg("esz") = 4, pybind11::arg("rows16") = false);
  cupipe::ops::bind_direct_calls(m);
}
