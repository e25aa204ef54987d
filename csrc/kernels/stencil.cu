#include "kernels/stencil.cuh"

namespace cupipe {
namespace kernels {
template <engine::Mechanism M>
void launch_stencil_mechanism(const StencilParams& p);
}  // namespace kernels

void launch_stencil(const StencilParams& p) {
  if (p.batch * p.ny * p.nx == 0) return;
  dispatch_mechanism(p.mechanism, [&](auto m) { kernels::launch_stencil_mechanism<decltype(m)::value>(p); });
}

}  // namespace cupipe
