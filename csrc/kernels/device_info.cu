#include "kernels/launch_utils.cuh"

namespace cupipe {

DeviceInfo device_info(int device) {
  DeviceInfo info;
  int major = 0, minor = 0;
  CUPIPE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUPIPE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  CUPIPE_CUDA_CHECK(cudaDeviceGetAttribute(&info.num_sms, cudaDevAttrMultiProcessorCount, device));
  CUPIPE_CUDA_CHECK(
      cudaDeviceGetAttribute(&info.max_smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  info.sm = major * 10 + minor;
  return info;
}

}  // namespace cupipe
