// Cross-field checks that run after loading and before anything is allocated.
#pragma once

#include <string>
#include <vector>

#include "config/options.h"

namespace dlrun::config {

/// What validation needs to know about the launch.
struct LaunchContext {
  int world_size = 1;  ///< processes in the job (WORLD_SIZE)
};

/// Throws dlrun::Error (exit 2, with file/key/line) on the first violated rule. Returns
/// warnings for settings that are legal but probably not what the user meant. Needs neither
/// the data nor a device: `dlrun config show` and `dlrun info CONFIG` run this alone, so a GPU
/// config is shown on a laptop. The device-dependent rules run here for run.device: cpu.
std::vector<std::string> validate(const Config& cfg, const LaunchContext& ctx = {});

/// The rules that depend on the device a run gets (fp16 autocast, CUDA graphs and nccl need
/// CUDA), for the device run.device resolved to on this machine (`device`, e.g. "cpu" for
/// run.device: auto without a GPU). Every command that resolves a device runs it (train, eval,
/// bench, config validate), so they refuse the same configs with the same message.
void check_device_fit(const Config& cfg, bool cuda, const std::string& device);

/// The data directory exists (datasets read from a directory; shards are checked as they are
/// opened). Exit 2 naming data.root (or data.name for a default root) and, for Fashion-MNIST,
/// the package that installs it.
void check_data_present(const Config& cfg);

/// Whether a training run reads the evaluation (test) split: an evaluation at the end, periodic
/// evaluations without a validation split (they use it), or the SWA average's final evaluation.
/// A webdataset run that reads none needs no data.eval_shards.
bool reads_eval_split(const Config& cfg);

}  // namespace dlrun::config
