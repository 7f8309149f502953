// Fallback for builds without CUDA sources (DLRUN_CUDA=OFF or no toolkit): no devices.
#ifndef DLRUN_WITH_CUDA
#include "kernels/device_query.h"

namespace dlrun::cuda {
bool cuda_compiled() { return false; }
std::string driver_version() { return {}; }
std::string runtime_version() { return {}; }
std::vector<DeviceInfo> devices() { return {}; }
std::string pci_bus_id(int) { return {}; }
std::string compiled_archs() { return {}; }
KernelImage kernel_image(int) { return {false, "", "this dlrun was built without CUDA sources"}; }
}  // namespace dlrun::cuda
#endif
