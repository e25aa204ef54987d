// Host-side helpers shared by the launchers: error checks, compile-time dispatch of run-time
// knobs, and a launch that opts in to large dynamic shared memory with a readable error.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "engine/mechanism.h"
#include "kernels/params.h"

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

template <int N>
using int_c = std::integral_constant<int, N>;

// Calls f(int_c<S>{}) for the run-time stage count S in 1..8.
template <class F>
void dispatch_stages(int stages, F&& f) {
  switch (stages) {
    case 1: f(int_c<1>{}); break;
    case 2: f(int_c<2>{}); break;
    case 3: f(int_c<3>{}); break;
    case 4: f(int_c<4>{}); break;
    case 5: f(int_c<5>{}); break;
    case 6: f(int_c<6>{}); break;
    case 7: f(int_c<7>{}); break;
    case 8: f(int_c<8>{}); break;
    default: throw std::runtime_error("stages must be 1..8, got " + std::to_string(stages));
  }
}

// Calls f(int_c<V>{}) for an async copy width V in {4, 8, 16}.
template <class F>
void dispatch_async_width(int v, F&& f) {
  switch (v) {
    case 4: f(int_c<4>{}); break;
    case 8: f(int_c<8>{}); break;
    case 16: f(int_c<16>{}); break;
    default: throw std::runtime_error("async copy width must be 4, 8 or 16, got " + std::to_string(v));
  }
}

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
constexpr int kFactStaticSmem = -2, kFactOptIn = -1;
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
template <class Kernel>
void prepare_smem(Kernel kernel, size_t smem, const char* what) {
  const int device = current_device();
  const void* k = reinterpret_cast<const void*>(kernel);
  const size_t static_bytes =
      static_cast<size_t>(detail::launch_fact(detail::LaunchKey{k, device, detail::kFactStaticSmem, 0}, [&] {
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
  int& opted = c.map[detail::LaunchKey{k, device, detail::kFactOptIn, 0}];  // 0 when new
  if (smem <= static_cast<size_t>(opted)) return;
  CUPIPE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  opted = static_cast<int>(smem);
}

// Blocks per SM the kernel reaches with this block size and dynamic shared memory (>= 1).
template <class Kernel>
int blocks_per_sm(Kernel kernel, int threads, size_t smem) {
  const detail::LaunchKey key{reinterpret_cast<const void*>(kernel), current_device(), threads, smem};
  return detail::launch_fact(key, [&] {
    int n = 0;
    CUPIPE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem));
    return n > 0 ? n : 1;
  });
}

#define CUPIPE_LAUNCH_CHECK() CUPIPE_CUDA_CHECK(cudaGetLastError())

}  // namespace cupipe
