// The state reductions' entry points (reduce/state_launch.cuh); a file of their own, so that the
// build compiles their launchers beside the scalar ones'.
#include "kernels/reduce/state_launch.cuh"

namespace cupipe {

int64_t reduce_state_workspace_bytes(const ReduceParams& p) {
  if (p.outer * p.inner == 0) return 0;
  return kernels::state_workspace_bytes(p, device_info(current_device()));
}

void launch_reduce_state(const ReduceParams& p) {
  if (p.outer * p.inner == 0) return;
  if (reduce_state_workspace_bytes(p) > p.workspace_bytes)
    throw std::runtime_error("reduce: workspace too small (internal error)");
  kernels::launch_reduce_state_plan(p);
}

}  // namespace cupipe
