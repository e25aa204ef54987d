// Reduction kernels for mechanism 'pipeline_thread' (one file per mechanism: they compile in parallel).
#include "kernels/reduce.cuh"

namespace cupipe {
namespace kernels {
template void launch_reduce_mechanism<engine::Mechanism::PipelineThread>(const ReduceParams&);
}  // namespace kernels
}  // namespace cupipe
