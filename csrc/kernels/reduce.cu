// launch_reduce: the workspace check, then the launch plan (reduce/launch_plan.cuh; the state
// reductions go to reduce_state.cu); the kernels themselves are instances in the registry.
#include "kernels/reduce.cuh"

namespace cupipe {

int64_t reduce_workspace_bytes(const ReduceParams& p) {
  if (p.outer * p.inner == 0) return 0;
  if (is_state_op(p.op)) return reduce_state_workspace_bytes(p);
  return kernels::partial_count(p, device_info(current_device())) * kernels::acc_size(p);
}

bool reduce_folds(const ReduceParams& p) {
  return !is_arg_op(p.op) && kernels::cols_direct_fold(p, dtype_size(p.in_dtype));  // (argmax: never two runs)
}

void launch_reduce(const ReduceParams& p) {
  if (p.fold > 1 && !reduce_folds(p)) throw std::runtime_error("reduce: this step cannot fold (internal error)");
  if (p.outer * p.inner == 0) return;
  if (is_state_op(p.op)) return launch_reduce_state(p);
  if (kernels::partial_count(p, device_info(current_device())) * kernels::acc_size(p) > p.workspace_bytes)
    throw std::runtime_error("reduce: workspace too small (internal error)");
  kernels::launch_reduce_plan(p);
}

}  // namespace cupipe
