// Stencil kernels for mechanism 'pipeline_thread' (one file per mechanism: they compile in parallel).
#include "kernels/stencil.cuh"

namespace cupipe {
namespace kernels {
template void launch_stencil_mechanism<engine::Mechanism::PipelineThread>(const StencilParams&);
}  // namespace kernels
}  // namespace cupipe
