#include "kernels/stencil.cuh"

namespace cupipe {
namespace kernels {
// Instantiated by stencil_<mechanism>.cu, which compile in parallel; declared here so that this
// file does not instantiate (and compile) every kernel once more.
extern template void launch_stencil_mechanism<engine::Mechanism::Sync>(const StencilParams&);
extern template void launch_stencil_mechanism<engine::Mechanism::Pipeline>(const StencilParams&);
extern template void launch_stencil_mechanism<engine::Mechanism::PipelineThread>(const StencilParams&);
extern template void launch_stencil_mechanism<engine::Mechanism::Primitives>(const StencilParams&);
extern template void launch_stencil_mechanism<engine::Mechanism::Cg>(const StencilParams&);
extern template void launch_stencil_mechanism<engine::Mechanism::Barrier>(const StencilParams&);
extern template void launch_stencil_mechanism<engine::Mechanism::Specialized>(const StencilParams&);
extern template void launch_stencil_mechanism<engine::Mechanism::Tma>(const StencilParams&);
}  // namespace kernels

void launch_stencil(const StencilParams& p) {
  using engine::Mechanism;
  if (p.batch * p.ny * p.nx == 0) return;
  switch (p.mechanism) {
    case Mechanism::Sync: kernels::launch_stencil_mechanism<Mechanism::Sync>(p); break;
    case Mechanism::Pipeline: kernels::launch_stencil_mechanism<Mechanism::Pipeline>(p); break;
    case Mechanism::PipelineThread: kernels::launch_stencil_mechanism<Mechanism::PipelineThread>(p); break;
    case Mechanism::Primitives: kernels::launch_stencil_mechanism<Mechanism::Primitives>(p); break;
    case Mechanism::Cg: kernels::launch_stencil_mechanism<Mechanism::Cg>(p); break;
    case Mechanism::Barrier: kernels::launch_stencil_mechanism<Mechanism::Barrier>(p); break;
    case Mechanism::Specialized: kernels::launch_stencil_mechanism<Mechanism::Specialized>(p); break;
    case Mechanism::Tma: kernels::launch_stencil_mechanism<Mechanism::Tma>(p); break;
  }
}

}  // namespace cupipe
