// Host-side helpers shared by the launchers: error checks, the per-kernel facts they cache, and
// the launch of a kernel instance (registry.h) with its shared-memory opt-in and a readable error.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "engine/mechanism.h"
#include "kernels/params.h"
#include "kernels/registry.h"

namespace cupipe {

[[noreturn]] inline void throw_cuda(cudaError_t err, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error '") + cudaGetErrorString(err) + "' from " + what +
                           " (" + file + ":" + std::to_string(line) + ")");
}

#define CUPIPE_CUDA_CHECK(expr)                                            \
  do {                                                                     \
    cudaError_t cupipe_err_ = (expr);                                      \
    if (cupipe_err_ != cudaSuccess) throw_cuda(cupipe_err_, #expr, __FILE__, __LINE__); \
  } while (0)

inline int current_device() {
  int dev = 0;
  CUPIPE_CUDA_CHECK(cudaGetDevice(&dev));
  return dev;
}

// Facts about a kernel on a device that do not change between launches (its static shared
// memory, the shared-memory opt-in made, the occupancy at a block size), kept so that a launch
// does not ask the runtime again: cudaFuncGetAttributes, cudaFuncSetAttribute and the occupancy
// query cost microseconds of host time per launch, which is most of a small op's time when calls
// are queued.
namespace detail {
struct LaunchKey {
  const void* kernel;
  int device, what;  // what: a block size (occupancy), or one of the kFact* below
  size_t smem;
  bool operator==(const LaunchKey& o) const {
    return kernel == o.kernel && device == o.device && what == o.what && smem == o.smem;
  }
};
constexpr int kFactStaticSmem = -2, kFactOptIn = -1, kFactParams = -3;
struct LaunchKeyHash {
  size_t operator()(const LaunchKey& k) const {
    size_t h = std::hash<const void*>()(k.kernel);
    h = h * 1000003u ^ static_cast<size_t>(k.device);
    h = h * 1000003u ^ static_cast<size_t>(k.what);
    return h * 1000003u ^ k.smem;
  }
};
struct LaunchFacts {
  std::mutex mu;
  std::unordered_map<LaunchKey, int, LaunchKeyHash> map;
};
inline LaunchFacts& launch_facts() {
  static LaunchFacts facts;
  return facts;
}
// The cached value for `key`, computed with f() the first time (a throw caches nothing).
template <class F>
int launch_fact(const LaunchKey& key, F&& f) {
  LaunchFacts& c = launch_facts();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.map.find(key);
    if (it != c.map.end()) return it->second;
  }
  const int v = f();
  std::lock_guard<std::mutex> lock(c.mu);
  c.map.emplace(key, v);
  return v;
}
}  // namespace detail

// Opts `kernel` in to `smem` bytes of dynamic shared memory, or throws a message that names the
// configuration when the device cannot give that much. The opt-in only grows (a launch with
// less dynamic shared memory than the opted-in maximum is valid), so the runtime is asked again
// only for a larger size than before on that device.
inline void prepare_smem(const void* kernel, size_t smem, const char* what) {
  if (kernel == nullptr) return;  // planning, the instance not loaded (registry.h)
  const int device = current_device();
  const size_t static_bytes =
      static_cast<size_t>(detail::launch_fact(detail::LaunchKey{kernel, device, detail::kFactStaticSmem, 0}, [&] {
        cudaFuncAttributes attr{};
        CUPIPE_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
        return static_cast<int>(attr.sharedSizeBytes);
      }));
  const DeviceInfo dev = device_info(device);
  const size_t total = smem + static_bytes;
  if (total > static_cast<size_t>(dev.max_smem_optin)) {
    throw std::runtime_error(std::string(what) + " needs " + std::to_string(total) +
                             " bytes of shared memory per block but this device allows " +
                             std::to_string(dev.max_smem_optin) + "; use fewer stages or smaller tiles");
  }
  // Static + dynamic shared memory above 48 KiB needs the opt-in, even if the dynamic part alone
  // is below it.
  if (total <= 48 * 1024) return;
  detail::LaunchFacts& c = detail::launch_facts();
  std::lock_guard<std::mutex> lock(c.mu);  // held across the call: another thread must not shrink it
  int& opted = c.map[detail::LaunchKey{kernel, device, detail::kFactOptIn, 0}];  // 0 when new
  if (smem <= static_cast<size_t>(opted)) return;
  CUPIPE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  opted = static_cast<int>(smem);
}

// Blocks per SM the kernel reaches with this block size and dynamic shared memory (>= 1).
inline int blocks_per_sm(const void* kernel, int threads, size_t smem) {
  if (kernel == nullptr) return 1;  // planning, the instance not loaded (registry.h)
  const detail::LaunchKey key{kernel, current_device(), threads, smem};
  return detail::launch_fact(key, [&] {
    int n = 0;
    CUPIPE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem));
    return n > 0 ? n : 1;
  });
}

// The chunk length of a streaming kernel (stencil3d, the fused steps) whose blocks each stream a
// chunk of n planes or rows plus `fill` more, `columns` blocks a chunk: the chunk count with the
// shortest estimated time (waves of `resident` blocks times the planes a block streams), chunks of
// at least min_len, at most 8 waves.
inline int64_t streaming_chunk(int64_t n, int64_t columns, int64_t resident, int64_t fill, int64_t min_len) {
  const int64_t max_chunks =
      std::max<int64_t>(1, std::min(n / std::max<int64_t>(1, min_len), 8 * resident / std::max<int64_t>(1, columns)));
  int64_t best = 1, best_cost = -1;
  for (int64_t c = 1; c <= max_chunks; ++c) {
    const int64_t cost = (columns * c + resident - 1) / resident * ((n + c - 1) / c + fill);
    if (best_cost < 0 || cost < best_cost) best = c, best_cost = cost;
  }
  return (n + best - 1) / best;
}

// A kernel instance (registry.h) with the parameter types P... of its template: a launch converts
// its arguments to them and passes their addresses, as the runtime's typed launch would. Made by
// kernel_ref, which checks once that the instance's parameters have these sizes: an id that named
// a kernel of another signature fails there, not as a corrupted launch.
template <class... P>
struct KernelRef {
  const void* fn;
  operator const void*() const { return fn; }
};

template <class... P>
KernelRef<P...> kernel_ref(const char* header, const std::string& id, cudaStream_t stream) {
  const void* fn = kernel_function(header, id, reinterpret_cast<Stream>(stream));
  if (fn == nullptr) return KernelRef<P...>{fn};  // planning, the instance not loaded
  detail::launch_fact(detail::LaunchKey{fn, -1, detail::kFactParams, 0}, [&] {
    // The declared parameters only: probing one past the last fails by design, and
    // compute-sanitizer would count that failed call as an error in every run.
    constexpr size_t sizes[] = {sizeof(P)..., 0};
    for (size_t i = 0; i < sizeof...(P); ++i) {
      size_t offset = 0, size = 0;
      const cudaError_t err = cudaFuncGetParamInfo(fn, i, &offset, &size);
      if (err != cudaSuccess || size != sizes[i]) {
        if (err != cudaSuccess) cudaGetLastError();
        throw std::runtime_error("cupipe: parameter " + std::to_string(i) + " of kernel " + id +
                                 " does not match its launcher (" + std::to_string(size) + " bytes, expected " +
                                 std::to_string(sizes[i]) + ")");
      }
    }
    return 1;
  });
  return KernelRef<P...>{fn};
}

// Launches `k` on `stream`; `dependent`: as a programmatic dependent of the stream's previous
// kernel (dependent_launch.cuh; callers pass dev.code_sm >= 90).
template <class... P, class... A>
void launch_kernel(KernelRef<P...> k, dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool dependent,
                   A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "a launch passes every parameter");
  if (planning_kernels()) {  // the instance was recorded by kernel_ref (registry.h); this adds its launch
    record_planned_launch(int64_t(grid.x) * grid.y * grid.z, static_cast<int>(block.x * block.y * block.z),
                          static_cast<int64_t>(smem));
    return;
  }
  std::tuple<std::remove_const_t<P>...> values(static_cast<std::remove_const_t<P>>(std::forward<A>(args))...);
  void* ptrs[sizeof...(P) > 0 ? sizeof...(P) : 1];
  std::apply([&](auto&... v) {
    int i = 0;
    ((ptrs[i++] = static_cast<void*>(&v)), ...);
  }, values);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = dependent ? 1 : 0;
  CUPIPE_CUDA_CHECK(cudaLaunchKernelExC(&cfg, k.fn, ptrs));
}

#define CUPIPE_LAUNCH_CHECK() CUPIPE_CUDA_CHECK(cudaGetLastError())

}  // namespace cupipe
