// CUDA runtime device queries (see device_query.h). Every call is checked; failures mean
// "no usable CUDA here", which `dlrun info` reports rather than treats as an error.
#include <cuda_runtime_api.h>

#include "kernels/device_query.h"

namespace dlrun::cuda {
namespace {
std::string ver(int v) { return v <= 0 ? std::string() : std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }
}  // namespace

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
