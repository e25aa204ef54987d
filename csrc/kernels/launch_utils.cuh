// Host-side helpers shared by the launchers: error checks, compile-time dispatch of run-time
// knobs, and a launch that opts in to large dynamic shared memory with a readable error.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <type_traits>
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

// Opts `kernel` in to `smem` bytes of dynamic shared memory, or throws a message that names the
// configuration when the device cannot give that much.
template <class Kernel>
void prepare_smem(Kernel kernel, size_t smem, const char* what) {
  const DeviceInfo dev = device_info(current_device());
  cudaFuncAttributes attr{};
  CUPIPE_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  const size_t total = smem + attr.sharedSizeBytes;
  if (total > static_cast<size_t>(dev.max_smem_optin)) {
    throw std::runtime_error(std::string(what) + " needs " + std::to_string(total) +
                             " bytes of shared memory per block but this device allows " +
                             std::to_string(dev.max_smem_optin) + "; use fewer stages or smaller tiles");
  }
  // Static + dynamic shared memory above 48 KiB needs the opt-in, even if the dynamic part alone
  // is below it.
  if (total > 48 * 1024) {
    CUPIPE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
  }
}

// Blocks per SM the kernel reaches with this block size and dynamic shared memory (>= 1).
template <class Kernel>
int blocks_per_sm(Kernel kernel, int threads, size_t smem) {
  int n = 0;
  CUPIPE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem));
  return n > 0 ? n : 1;
}

#define CUPIPE_LAUNCH_CHECK() CUPIPE_CUDA_CHECK(cudaGetLastError())

}  // namespace cupipe
