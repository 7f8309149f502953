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

/// The GPU code compiled into dlrun's kernels, as "sm_75 sm_80 ... compute_120" (machine code
/// sm_XY, PTX compute_XY; TORCH_CUDA_ARCH_LIST at build time); "" without CUDA sources.
std::string compiled_archs();

/// Whether the CUDA runtime finds an image of dlrun's kernels for device `index` (a probe
/// kernel compiled with the same architectures as the fused ones): the machine code it would run
/// and the virtual architecture that came from ("sm_90 (from compute_90)"), or the runtime's
/// error. Leaves the current device as it was.
struct KernelImage {
  bool ok = false;
  std::string arch;
  std::string error;
};
KernelImage kernel_image(int index);

}  // namespace dlrun::cuda
