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

template <engine::Mechanism M>
const char* stencil_family_of(const StencilParams& p) {
  const char* name = "";
  dispatch_stages(p.stages, [&](auto s) {
    dispatch_dtype(p.dtype, [&](auto tv) {
      const StencilPlan plan = plan_stencil<M, decltype(s)::value, decltype(tv)>(p, device_info(current_device()));
      name = stencil_family_name(plan.family);
    });
  });
  return name;
}
}  // namespace kernels

const char* stencil_family(const StencilParams& p) {
  using engine::Mechanism;
  switch (p.mechanism) {
    case Mechanism::Sync: return kernels::stencil_family_of<Mechanism::Sync>(p);
    case Mechanism::Pipeline: return kernels::stencil_family_of<Mechanism::Pipeline>(p);
    case Mechanism::PipelineThread: return kernels::stencil_family_of<Mechanism::PipelineThread>(p);
    case Mechanism::Primitives: return kernels::stencil_family_of<Mechanism::Primitives>(p);
    case Mechanism::Cg: return kernels::stencil_family_of<Mechanism::Cg>(p);
    case Mechanism::Barrier: return kernels::stencil_family_of<Mechanism::Barrier>(p);
    case Mechanism::Specialized: return kernels::stencil_family_of<Mechanism::Specialized>(p);
    case Mechanism::Tma: return kernels::stencil_family_of<Mechanism::Tma>(p);
  }
  return "";
}

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
