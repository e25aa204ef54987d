// launch_stencil and stencil_family: the launch plan (stencil/launch_plan.cuh); the kernels
// themselves are instances in the registry.
#include "kernels/stencil.cuh"

namespace cupipe {

const char* stencil_family(const StencilParams& p) {
  const char* name = "";
  kernels::dispatch_dtype(p.dtype, [&](auto tv) {
    using T = decltype(tv);
    name = kernels::stencil_family_name(kernels::plan_stencil<T>(p, device_info(current_device())).family);
  });
  return name;
}

void launch_stencil(const StencilParams& p) {
  if (p.batch * p.ny * p.nx == 0) return;
  kernels::launch_stencil_plan(p);
}

}  // namespace cupipe
