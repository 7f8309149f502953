// Device resolution (see device.h).
#include "train/device.h"

#include "base/error.h"

namespace dlrun::train {

torch::Device resolve_device(const RunOptions& run) {
  const std::string& d = run.device;
  if (d == "cpu") return torch::kCPU;
  const bool cuda = torch::cuda::is_available();
  if (d == "auto") return cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  DLRUN_CHECK_INPUT(cuda, "run.device={} but CUDA is not available here (see `dlrun info`)", d);
  const torch::Device dev(d);
  const auto count = static_cast<int64_t>(torch::cuda::device_count());
  DLRUN_CHECK_INPUT(!dev.has_index() || dev.index() < count, "run.device={} but only {} CUDA device(s) are visible", d,
                    count);
  return dev.has_index() ? dev : torch::Device(torch::kCUDA, 0);
}

Placement place(const RunOptions& run) {
  Placement p;
  p.device = resolve_device(run);
  if (run.threads > 0) at::set_num_threads(static_cast<int>(run.threads));
  if (run.deterministic) at::globalContext().setDeterministicAlgorithms(true, false);
  torch::manual_seed(run.seed);
  return p;
}

}  // namespace dlrun::train
