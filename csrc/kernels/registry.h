// Where a kernel instance comes from. Each instance (a kernel template with its arguments, named by
// its template-id text, kernel_id.h) is either compiled ahead of time into the module, which
// registers it at load (instance.h), or compiled the first time a launch asks for it: the binding
// layer's compiler hook (cupipe/_kernel_cache.py behind it) returns a cubin built from the same
// headers with the same flags, loaded here as a cudaKernel_t. The runtime API takes either as a
// `const void*` function, so the launchers treat both alike (launch_utils.cuh). docs/design.md,
// "Kernel instances", says which instances are built ahead of time and why.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/instance.h"
#include "kernels/params.h"

namespace cupipe {

// Registers an ahead-of-time instance (a static object per instance, made by instance.h).

// Compiles (or finds in the disk cache) the cubin of instance `id` declared by `header` for
// `device`, returning its bytes, or throws std::runtime_error with a message for the user.
using KernelCompiler = std::string (*)(const std::string& header, const std::string& id, int device);
void set_kernel_compiler(KernelCompiler compiler);

// The instance `id` (declared by `header`) for the current device: the ahead-of-time one, else
// the one loaded from a cubin (compiled on first use). A compile while `stream` is being captured
// into a CUDA graph throws instead (the message says to precompile). Thread-safe.
const void* kernel_function(const char* header, const std::string& id, Stream stream);

// The instance loaded into this process from a cubin (first use or cupipe.precompile).
void load_kernel_cubin(const std::string& id, const std::string& cubin);

// "ahead-of-time", "first-use" (loaded from a cubin in this process) or "" (not loaded yet).
std::string kernel_origin(const std::string& id);

// The ids of the ahead-of-time instances, sorted.
std::vector<std::string> ahead_of_time_kernels();

// An id without blanks: the form ids are compared in.
std::string normalize_kernel_id(const std::string& id);

// The kernels a call launches, recorded instead of launched: while a KernelPlanScope is alive on a
// thread, the launchers (launch_utils.cuh) look their instances up as usual but launch nothing,
// compile nothing and record each one with its origin. An instance that is not loaded yet (it
// would compile on first use) is recorded as such; the launcher then sizes that kernel's grid
// as for one block per SM, so what follows it in the plan is what one block per SM gives.
// Each records its launch too: blocks in the grid, threads a block, dynamic shared memory a block.
struct PlannedKernel {
  std::string id;
  std::string origin;  // "ahead-of-time", "first-use" (loaded) or "" (not loaded: compiled when first called)
  int64_t blocks = 0;
  int threads = 0;
  int64_t smem = 0;
};
class KernelPlanScope {
 public:
  explicit KernelPlanScope(std::vector<PlannedKernel>* out);
  ~KernelPlanScope();
  KernelPlanScope(const KernelPlanScope&) = delete;
  KernelPlanScope& operator=(const KernelPlanScope&) = delete;

 private:
  std::vector<PlannedKernel>* prev_;
};
bool planning_kernels();
// The launch of the kernel planned last (launch_kernel calls it in place of launching).
void record_planned_launch(int64_t blocks, int threads, int64_t smem);

}  // namespace cupipe
