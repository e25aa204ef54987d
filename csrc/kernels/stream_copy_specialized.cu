// stream_copy kernels for mechanism 'specialized' (one file per mechanism: they compile in parallel).
#include "kernels/stream_copy.cuh"

namespace cupipe {
namespace kernels {
template void launch_stream_copy_mechanism<engine::Mechanism::Specialized>(const StreamCopyParams&, int);
}  // namespace kernels
}  // namespace cupipe
