// Where a run computes: the one place run.device is turned into a device, for train, eval
// and bench alike, plus the process-wide LibTorch settings that go with it.
#pragma once

#include <torch/torch.h>

#include "config/options.h"
#include "dist/world.h"

namespace dlrun::train {

/// The device run.device names. cpu; cuda and cuda:N need CUDA and an existing index (else
/// exit 2, naming the key and what is visible); auto is cuda:0 when CUDA is available, else
/// the CPU.
torch::Device resolve_device(const RunOptions& run);

/// Where this process trains: its device and its rank in a multi-process job.
struct Placement {
  torch::Device device = torch::kCPU;
  int rank = 0;
  int world_size = 1;
};

/// resolve_device(), then LibTorch's process-wide settings from the run section: intra-op
/// threads (run.threads), deterministic algorithms (run.deterministic) and the global seed.
/// In a multi-process job, run.device cuda or auto means cuda:LOCAL_RANK (an explicit
/// cuda:N is kept, with a warning when several local ranks would share it), made the
/// current CUDA device.
Placement place(const RunOptions& run, const dist::World& world = {});

}  // namespace dlrun::train
