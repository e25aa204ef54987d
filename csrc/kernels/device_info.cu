#include <mutex>

#include "kernels/launch_utils.cuh"

namespace cupipe {

namespace {
// Compiled for the build's architectures like every kernel: the PTX version of the code the driver
// picks for it on a device is the architecture all of this build's kernels run as there.
__global__ void code_arch_probe_kernel() {}

// DeviceInfo::code_sm of `device`, or 0 when the build has no code it runs (cudaFuncGetAttributes asks about the current device).
int query_code_sm(int device) {
  int current = 0;
  CUPIPE_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) CUPIPE_CUDA_CHECK(cudaSetDevice(device));
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, code_arch_probe_kernel);
  if (current != device) cudaSetDevice(current);
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction) {
    cudaGetLastError();  // not sticky: keep it from being reported by the next launch check
    return 0;  // the build has neither code nor PTX for this device: kernels compile on first use
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw_cuda(err, "cudaFuncGetAttributes (the kernels' architecture on this device)", __FILE__, __LINE__);
  }
  return attr.ptxVersion;
}

DeviceInfo query_device_info(int device) {
  DeviceInfo info;
  int major = 0, minor = 0;
  CUPIPE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUPIPE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  CUPIPE_CUDA_CHECK(cudaDeviceGetAttribute(&info.num_sms, cudaDevAttrMultiProcessorCount, device));
  CUPIPE_CUDA_CHECK(
      cudaDeviceGetAttribute(&info.max_smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  info.sm = major * 10 + minor;
  info.code_sm = query_code_sm(device);
  if (info.code_sm == 0) {
    info.code_sm = info.sm;
    info.ahead_of_time_code = false;
  }
  int khz = 0, bits = 0;
  CUPIPE_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, device));
  CUPIPE_CUDA_CHECK(cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, device));
  info.dram_peak_gbps = 2.0 * khz * 1e3 * bits / 8 / 1e9;
  return info;
}
}  // namespace

// Launchers ask for these facts several times per call; they never change for a device, so
// each device is queried once (a query that throws is retried by the next call).
DeviceInfo device_info(int device) {
  constexpr int kMaxDevices = 64;
  if (device < 0 || device >= kMaxDevices) return query_device_info(device);
  static DeviceInfo cache[kMaxDevices];
  static std::once_flag once[kMaxDevices];
  std::call_once(once[device], [device] { cache[device] = query_device_info(device); });
  return cache[device];
}

}  // namespace cupipe
