// cupipe._C.call_*: the public ops called from Python without torch.ops' generic entry.
//
// torch.ops.cupipe.X(...) matches every argument against the schema at run time and then passes
// the Autograd key, whose kernel is registered from Python: for a 64 MiB reduction that takes
// longer on the host than the kernel takes on the GPU (figures in docs/design.md). These functions
// take typed arguments (pybind11) and call the op through the dispatcher's typed handle below the
// autograd key, so every other key still applies (Python modes, fake tensors, the CPU or CUDA
// kernel). The Python wrappers use them only when no input needs a gradient and nothing traces or
// transforms the call (cupipe/ops.py `_direct`); everything else goes through torch.ops.
// Not <torch/extension.h>: it brings the whole C++ frontend, and a build took twice as long.
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/Exceptions.h>

#include <optional>
#include <vector>

namespace {

template <typename Signature>
c10::TypedOperatorHandle<Signature> typed_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

// Runs `f` below the autograd key without the GIL, and raises its errors as torch.ops would (the
// same Python exception types and messages, no C++ backtrace).
template <typename F>
at::Tensor below_autograd(F&& f) {
  HANDLE_TH_ERRORS
  pybind11::gil_scoped_release no_gil;
  at::AutoDispatchBelowAutograd guard;
  return f();
  END_HANDLE_TH_ERRORS_PYBIND
}

at::Tensor call_stream_copy(const at::Tensor& x, const std::string& mechanism, int64_t stages, int64_t vec_bytes) {
  static const auto op = typed_op<at::Tensor(const at::Tensor&, c10::string_view, int64_t, int64_t)>("cupipe::stream_copy");
  return below_autograd([&] { return op.call(x, mechanism, stages, vec_bytes); });
}

at::Tensor call_stencil1d(const at::Tensor& x, const at::Tensor& weights, int64_t dim, const std::string& boundary,
                          const std::string& mechanism, int64_t stages, int64_t steps) {
  static const auto op = typed_op<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, c10::string_view,
                                             c10::string_view, int64_t, int64_t)>("cupipe::stencil1d");
  return below_autograd([&] { return op.call(x, weights, dim, boundary, mechanism, stages, steps); });
}

at::Tensor call_stencil2d(const at::Tensor& x, const at::Tensor& weights, const std::string& boundary,
                          const std::string& mechanism, int64_t stages, int64_t steps) {
  static const auto op = typed_op<at::Tensor(const at::Tensor&, const at::Tensor&, c10::string_view, c10::string_view,
                                             int64_t, int64_t)>("cupipe::stencil2d");
  return below_autograd([&] { return op.call(x, weights, boundary, mechanism, stages, steps); });
}

at::Tensor call_stencil3d(const at::Tensor& x, const at::Tensor& weights, const std::string& boundary,
                          const std::string& mechanism, int64_t stages, int64_t steps) {
  static const auto op = typed_op<at::Tensor(const at::Tensor&, const at::Tensor&, c10::string_view, c10::string_view,
                                             int64_t, int64_t)>("cupipe::stencil3d");
  return below_autograd([&] { return op.call(x, weights, boundary, mechanism, stages, steps); });
}

at::Tensor call_reduce(const at::Tensor& x, const std::string& op_name, std::optional<std::vector<int64_t>> dim,
                       bool keepdim, std::optional<at::ScalarType> dtype, double correction, double ord,
                       const std::string& mechanism, int64_t stages) {
  static const auto op = typed_op<at::Tensor(const at::Tensor&, c10::string_view, at::OptionalIntArrayRef, bool,
                                             std::optional<at::ScalarType>, double, double, c10::string_view,
                                             int64_t)>("cupipe::reduce");
  return below_autograd([&] {
    return op.call(x, op_name, dim ? at::OptionalIntArrayRef(*dim) : at::OptionalIntArrayRef(), keepdim, dtype,
                   correction, ord, mechanism, stages);
  });
}

}  // namespace

namespace cupipe {
namespace ops {

void bind_direct_calls(pybind11::module& m) {
  namespace py = pybind11;
  m.def("call_stream_copy", &call_stream_copy, "torch.ops.cupipe.stream_copy below the autograd key",
        py::arg("x"), py::arg("mechanism"), py::arg("stages"), py::arg("vec_bytes"));
  m.def("call_stencil1d", &call_stencil1d, "torch.ops.cupipe.stencil1d below the autograd key", py::arg("x"),
        py::arg("weights"), py::arg("dim"), py::arg("boundary"), py::arg("mechanism"), py::arg("stages"),
        py::arg("steps") = 1);
  m.def("call_stencil2d", &call_stencil2d, "torch.ops.cupipe.stencil2d below the autograd key", py::arg("x"),
        py::arg("weights"), py::arg("boundary"), py::arg("mechanism"), py::arg("stages"),
        py::arg("steps") = 1);
  m.def("call_stencil3d", &call_stencil3d, "torch.ops.cupipe.stencil3d below the autograd key", py::arg("x"),
        py::arg("weights"), py::arg("boundary"), py::arg("mechanism"), py::arg("stages"),
        py::arg("steps") = 1);
  m.def("call_reduce", &call_reduce, "torch.ops.cupipe.reduce below the autograd key", py::arg("x"),
        py::arg("op"), py::arg("dim"), py::arg("keepdim"), py::arg("dtype"), py::arg("correction") = 1.0,
        py::arg("ord") = 2.0, py::arg("mechanism"), py::arg("stages"));
}

}  // namespace ops
}  // namespace cupipe
