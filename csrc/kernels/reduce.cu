#include "kernels/reduce.cuh"

namespace cupipe {
namespace kernels {
// Instantiated by the per-mechanism files, which compile in parallel; declared here so that
// this file does not instantiate (and compile) every kernel once more.
extern template void launch_reduce_mechanism<engine::Mechanism::Sync>(const ReduceParams&);
extern template void launch_reduce_mechanism<engine::Mechanism::Pipeline>(const ReduceParams&);
extern template void launch_reduce_mechanism<engine::Mechanism::PipelineThread>(const ReduceParams&);
extern template void launch_reduce_mechanism<engine::Mechanism::Primitives>(const ReduceParams&);
extern template void launch_reduce_mechanism<engine::Mechanism::Cg>(const ReduceParams&);
extern template void launch_reduce_mechanism<engine::Mechanism::Barrier>(const ReduceParams&);
extern template void launch_reduce_mechanism<engine::Mechanism::Specialized>(const ReduceParams&);
extern template void launch_reduce_mechanism<engine::Mechanism::Tma>(const ReduceParams&);
}  // namespace kernels

int64_t reduce_workspace_bytes(const ReduceParams& p) {
  if (p.outer * p.inner == 0) return 0;
  const DeviceInfo dev = device_info(current_device());
  return kernels::partial_count(p, dev) * kernels::acc_size(p);
}

void launch_reduce(const ReduceParams& p) {
  using engine::Mechanism;
  if (p.outer * p.inner == 0) return;
  if (kernels::partial_count(p, device_info(current_device())) * kernels::acc_size(p) > p.workspace_bytes)
    throw std::runtime_error("reduce: workspace too small (internal error)");
  switch (p.mechanism) {
    case Mechanism::Sync: kernels::launch_reduce_mechanism<Mechanism::Sync>(p); break;
    case Mechanism::Pipeline: kernels::launch_reduce_mechanism<Mechanism::Pipeline>(p); break;
    case Mechanism::PipelineThread: kernels::launch_reduce_mechanism<Mechanism::PipelineThread>(p); break;
    case Mechanism::Primitives: kernels::launch_reduce_mechanism<Mechanism::Primitives>(p); break;
    case Mechanism::Cg: kernels::launch_reduce_mechanism<Mechanism::Cg>(p); break;
    case Mechanism::Barrier: kernels::launch_reduce_mechanism<Mechanism::Barrier>(p); break;
    case Mechanism::Specialized: kernels::launch_reduce_mechanism<Mechanism::Specialized>(p); break;
    case Mechanism::Tma: kernels::launch_reduce_mechanism<Mechanism::Tma>(p); break;
  }
}

}  // namespace cupipe
