// Reduction kernels for mechanism 'primitives' (one file per mechanism: they compile in parallel).
#include "kernels/reduce.cuh"

namespace cupipe {
namespace kernels {
template void launch_reduce_mechanism<engine::Mechanism::Primitives>(const ReduceParams&);
}  // namespace kernels
}  // namespace cupipe
