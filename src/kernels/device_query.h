// CUDA runtime queries for `dlrun info`, compiled by nvcc when DLRUN_WITH_CUDA is on.
// Without CUDA sources compiled in, cuda_devices() returns an empty list and cuda_compiled()
// is false; this header itself needs no CUDA headers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dlrun::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int major = 0, minor = 0;       ///< compute capability
  uint64_t total_memory = 0;      ///< bytes
  int multiprocessors = 0;
};

/// True when dlrun was built with its CUDA sources (DLRUN_WITH_CUDA).
bool cuda_compiled();
/// Driver and runtime versions as "13.0" (empty when unavailable).
std::string driver_version();
std::string runtime_version();
/// Visible devices; empty without a driver or GPU (never throws).
std::vector<DeviceInfo> devices();
/// The PCI bus id of CUDA device `index` as NVML takes it ("0000:3B:00.0"); "" when unknown.
std::string pci_bus_id(int index);

}  // namespace dlrun::cuda
