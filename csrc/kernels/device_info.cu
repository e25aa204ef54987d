#include <mutex>

#include "kernels/launch_utils.cuh"

namespace cupipe {

namespace {
DeviceInfo query_device_info(int device) {
  DeviceInfo info;
  int major = 0, minor = 0;
  CUPIPE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUPIPE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  CUPIPE_CUDA_CHECK(cudaDeviceGetAttribute(&info.num_sms, cudaDevAttrMultiProcessorCount, device));
  CUPIPE_CUDA_CHECK(
      cudaDeviceGetAttribute(&info.max_smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  info.sm = major * 10 + minor;
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
