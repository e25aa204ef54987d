// stream_copy kernels for mechanism 'barrier' (one file per mechanism: they compile in parallel).
#include "kernels/stream_copy.cuh"

namespace cupipe {
namespace kernels {
template void launch_stream_copy_mechanism<engine::Mechanism::Barrier>(const StreamCopyParams&, int);
}  // namespace kernels
}  // namespace cupipe
