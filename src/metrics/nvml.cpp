// NVML through dlopen (see nvml.h). The few entry points dlrun calls are declared here by
// their documented C signatures; nvmlReturn_t is an int (0: NVML_SUCCESS), nvmlDevice_t an
// opaque pointer, and the two structures below have NVML's layout.
#include "metrics/nvml.h"

#include <dlfcn.h>

#include <cmath>
#include <limits>

namespace dlrun::metrics {
// NVML's C types, named outside the anonymous namespace: Nvml::Api (a member of a class with
// linkage) holds pointers to functions taking them.
namespace nvml_c {

using Device = void*;
struct Utilization {  // nvmlUtilization_t
  unsigned int gpu;
  unsigned int memory;
};
struct Memory {  // nvmlMemory_t (version 1)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

}  // namespace nvml_c

namespace {

using nvml_c::Device;
using nvml_c::Memory;
using nvml_c::Utilization;
constexpr int kSuccess = 0;
constexpr int kTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU
constexpr double kMiB = 1024.0 * 1024.0;

template <typename F>
bool bind(void* lib, const char* name, F*& out) {
  out = reinterpret_cast<F*>(::dlsym(lib, name));
  return out != nullptr;
}

}  // namespace

struct Nvml::Api {
  using Device = nvml_c::Device;
  using Utilization = nvml_c::Utilization;
  using Memory = nvml_c::Memory;
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  const char* (*error_string)(int) = nullptr;
  int (*by_bus_id)(const char*, Device*) = nullptr;
  int (*by_index)(unsigned int, Device*) = nullptr;
  int (*count)(unsigned int*) = nullptr;  // optional
  int (*name)(Device, char*, unsigned int) = nullptr;
  int (*utilization)(Device, Utilization*) = nullptr;
  int (*memory)(Device, Memory*) = nullptr;
  int (*power)(Device, unsigned int*) = nullptr;
  int (*temperature)(Device, int, unsigned int*) = nullptr;
  bool initialised = false;

  ~Api() {
    if (initialised) shutdown();
    if (lib) ::dlclose(lib);
  }
  std::string error(int rc) const { return error_string ? error_string(rc) : "NVML error " + std::to_string(rc); }
};

std::unique_ptr<Nvml> Nvml::open(const std::string& pci_bus_id, unsigned index, std::string* why,
                                 const std::string& library) {
  auto api = std::make_unique<Api>();
  api->lib = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!api->lib) {
    const char* e = ::dlerror();
    *why = library + " could not be loaded (" + (e ? e : "?") + ")";
    return nullptr;
  }
  const bool ok = bind(api->lib, "nvmlInit_v2", api->init) && bind(api->lib, "nvmlShutdown", api->shutdown) &&
                  bind(api->lib, "nvmlDeviceGetHandleByPciBusId_v2", api->by_bus_id) &&
                  bind(api->lib, "nvmlDeviceGetHandleByIndex_v2", api->by_index) &&
                  bind(api->lib, "nvmlDeviceGetName", api->name) &&
                  bind(api->lib, "nvmlDeviceGetUtilizationRates", api->utilization) &&
                  bind(api->lib, "nvmlDeviceGetMemoryInfo", api->memory) &&
                  bind(api->lib, "nvmlDeviceGetPowerUsage", api->power) &&
                  bind(api->lib, "nvmlDeviceGetTemperature", api->temperature);
  bind(api->lib, "nvmlErrorString", api->error_string);  // optional: only for messages
  bind(api->lib, "nvmlDeviceGetCount_v2", api->count);    // optional: the one-GPU fallback below
  if (!ok) {
    *why = library + " lacks an NVML entry point dlrun uses (a very old driver?)";
    return nullptr;
  }
  if (const int rc = api->init(); rc != kSuccess) {
    *why = "nvmlInit failed: " + api->error(rc);
    return nullptr;
  }
  api->initialised = true;
  Device device = nullptr;
  int rc = pci_bus_id.empty() ? api->by_index(index, &device) : api->by_bus_id(pci_bus_id.c_str(), &device);
  // A bus id NVML does not know, on a machine where NVML sees one GPU: a virtualised PCI view
  // (containers, sandboxes) numbers the bus differently from the CUDA runtime. The only GPU
  // is the one CUDA uses, so it is taken; with several, a guess could read the wrong one.
  unsigned int gpus = 0;
  if (rc != kSuccess && !pci_bus_id.empty() && api->count && api->count(&gpus) == kSuccess && gpus == 1)
    rc = api->by_index(0, &device);
  if (rc != kSuccess) {
    *why = "NVML does not know the GPU " + (pci_bus_id.empty() ? "with index " + std::to_string(index)
                                                               : "at PCI bus id " + pci_bus_id) +
           ": " + api->error(rc);
    return nullptr;
  }
  char name[96] = {};
  if (api->name(device, name, sizeof(name) - 1) != kSuccess) name[0] = '\0';
  return std::unique_ptr<Nvml>(new Nvml(std::move(api), device, name));
}

Nvml::Nvml(std::unique_ptr<Api> api, void* device, std::string name)
    : api_(std::move(api)), device_(device), name_(std::move(name)) {}

Nvml::~Nvml() = default;

std::optional<GpuSample> Nvml::sample() const {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  Utilization u{};
  Memory m{};
  if (api_->utilization(device_, &u) != kSuccess || api_->memory(device_, &m) != kSuccess) return std::nullopt;
  GpuSample s;
  s.util_pct = u.gpu;
  s.mem_util_pct = u.memory;
  s.mem_used_mb = static_cast<double>(m.used) / kMiB;
  s.mem_total_mb = static_cast<double>(m.total) / kMiB;
  unsigned int mw = 0, celsius = 0;
  s.power_w = api_->power(device_, &mw) == kSuccess ? mw / 1000.0 : nan;
  s.temp_c = api_->temperature(device_, kTemperatureGpu, &celsius) == kSuccess ? celsius : nan;
  return s;
}

}  // namespace dlrun::metrics
