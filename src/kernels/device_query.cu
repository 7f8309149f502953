// CUDA runtime device queries (see device_query.h). Every call is checked; failures mean
// "no usable CUDA here", which `dlrun info` reports rather than treats as an error.
#include <cuda_runtime_api.h>

#include "kernels/device_query.h"

#ifndef DLRUN_CUDA_ARCHS
#define DLRUN_CUDA_ARCHS ""
#endif

namespace dlrun::cuda {
namespace {
std::string ver(int v) { return v <= 0 ? std::string() : std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

// Compiled, as every .cu file of dlrun, for TORCH_CUDA_ARCH_LIST: whether the runtime finds an
// image of it for a device is whether it finds one of the fused kernels.
__global__ void probe_kernel(int* out) {
  if (out != nullptr) *out = 1;
}
}  // namespace

std::string compiled_archs() { return DLRUN_CUDA_ARCHS; }

KernelImage kernel_image(int index) {
  KernelImage r;
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  cudaError_t e = cudaSetDevice(index);
  cudaFuncAttributes attr{};
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, probe_kernel);
  if (e == cudaSuccess) {
    r.ok = true;
    // The machine code's architecture (86 for sm_86) and the virtual architecture it came from.
    r.arch = "sm_" + std::to_string(attr.binaryVersion) + " (from compute_" + std::to_string(attr.ptxVersion) + ")";
  } else {
    r.error = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  }
  (void)cudaGetLastError();
  if (previous >= 0) (void)cudaSetDevice(previous);
  return r;
}

bool cuda_compiled() { return true; }

std::string driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) return {};
  return ver(v);
}

std::string runtime_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) return {};
  return ver(v);
}

std::vector<DeviceInfo> devices() {
  std::vector<DeviceInfo> out;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out.push_back({i, p.name, p.major, p.minor, static_cast<uint64_t>(p.totalGlobalMem), p.multiProcessorCount});
  }
  return out;
}

std::string pci_bus_id(int index) {
  char id[32] = {};
  if (cudaDeviceGetPCIBusId(id, sizeof(id), index) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return id;
}

}  // namespace dlrun::cuda
