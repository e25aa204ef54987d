// Programmatic dependent launch (sm_90+): a kernel that only consumes what the kernel before it
// on the stream wrote (the reductions' partials pass) may be launched while that kernel runs,
// its blocks waiting in griddepcontrol.wait until the previous grid has completed and its writes
// are visible. The launch latency then overlaps the previous kernel instead of following it
// (a few microseconds: docs/design.md). Stream order and CUDA-graph capture are kept:
// the runtime records the dependency. On older GPUs both sides are no-ops and the launch is plain.
#pragma once

#include <cuda_runtime.h>

namespace cupipe {

// In the kernel that runs first: its dependents may be scheduled once every block has issued
// this (or exited). Early in the kernel: the dependents' blocks then wait on an SM beside it.
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// In the dependent kernel, before its first read of the previous kernel's output.
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The launch side: launch_kernel(..., dependent = true, ...) (launch_utils.cuh).

}  // namespace cupipe
