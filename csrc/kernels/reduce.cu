#include "kernels/reduce.cuh"

namespace cupipe {
namespace kernels {
template <engine::Mechanism M>
void launch_reduce_mechanism(const ReduceParams& p);
}  // namespace kernels

int64_t reduce_workspace_bytes(const ReduceParams& p) {
  if (p.outer * p.inner == 0) return 0;
  const DeviceInfo dev = device_info(current_device());
  return kernels::partial_count(p, dev) * kernels::acc_size(p);
}

void launch_reduce(const ReduceParams& p) {
  if (p.outer * p.inner == 0) return;
  if (kernels::partial_count(p, device_info(current_device())) * kernels::acc_size(p) > p.workspace_bytes)
    throw std::runtime_error("reduce: workspace too small (internal error)");
  dispatch_mechanism(p.mechanism, [&](auto m) { kernels::launch_reduce_mechanism<decltype(m)::value>(p); });
}

}  // namespace cupipe
