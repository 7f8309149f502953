// Device resolution (see device.h).
#include "train/device.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "base/error.h"
#include "base/log.h"

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

Placement place(const RunOptions& run, const dist::World& world) {
  Placement p;
  p.device = resolve_device(run);
  p.rank = world.rank;
  p.world_size = world.size;
  if (p.device.is_cuda() && world.distributed()) {
    if (run.device == "cuda" || run.device == "auto") {
      const auto count = static_cast<int>(torch::cuda::device_count());
      DLRUN_CHECK_INPUT(world.local_rank < count,
                        "local rank {} needs cuda:{}, but only {} CUDA device(s) are visible (run one process per GPU: "
                        "--nproc-per-node {})",
                        world.local_rank, world.local_rank, count, count);
      p.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(world.local_rank));
    } else if (world.local_size > 1) {
      log0::warn("run.device={} puts all {} local ranks on one GPU; use run.device: cuda for cuda:LOCAL_RANK",
                 run.device, world.local_size);
    }
    c10::impl::getDeviceGuardImpl(c10::kCUDA)->setDevice(p.device);
  }
  if (run.threads > 0) at::set_num_threads(static_cast<int>(run.threads));
  if (run.deterministic) at::globalContext().setDeterministicAlgorithms(true, false);
  torch::manual_seed(run.seed);
  return p;
}

}  // namespace dlrun::train
