// GPU telemetry through NVML, loaded at run time: dlrun does not link the NVIDIA management
// library, it dlopen()s "libnvidia-ml.so.1" (installed with the driver) when a run trains on
// a CUDA device. Without the library, or when NVML fails to initialise, telemetry is off and
// says nothing more than one info line: a missing NVML never fails a run. No LibTorch.
//
// Which GPU: the device is looked up by its PCI bus id (from the CUDA runtime), so
// CUDA_VISIBLE_DEVICES renumbering does not mix GPUs up; by NVML index when no bus id is given.
// A bus id NVML does not know falls back to NVML's only GPU when it sees exactly one (a
// container's PCI view can number the bus differently from the CUDA runtime).
#pragma once

#include <memory>
#include <optional>
#include <string>

namespace dlrun::metrics {

/// One reading of a GPU. A quantity the GPU does not report (power on some boards) is NaN.
struct GpuSample {
  double util_pct = 0;      ///< SM busy over NVML's last sample period, percent
  double mem_util_pct = 0;  ///< memory controller busy, percent
  double mem_used_mb = 0;   ///< device memory in use, all processes, MiB
  double mem_total_mb = 0;
  double power_w = 0;       ///< board power draw, watts
  double temp_c = 0;        ///< GPU core temperature, Celsius
};

class Nvml {
 public:
  /// Load `library` and open the GPU with PCI bus id `pci_bus_id` (as the CUDA runtime prints
  /// it, "0000:3B:00.0"), or NVML's device `index` when the id is "". nullptr, and `why` set,
  /// when the library is absent or NVML cannot reach the device.
  static std::unique_ptr<Nvml> open(const std::string& pci_bus_id, unsigned index, std::string* why,
                                    const std::string& library = "libnvidia-ml.so.1");
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  /// A reading now; std::nullopt when NVML fails this time (the GPU fell off the bus).
  std::optional<GpuSample> sample() const;
  /// The device's name as NVML reports it ("NVIDIA H100 80GB HBM3").
  const std::string& name() const { return name_; }

 private:
  struct Api;
  Nvml(std::unique_ptr<Api> api, void* device, std::string name);
  std::unique_ptr<Api> api_;
  void* device_;
  std::string name_;
};

}  // namespace dlrun::metrics
