// The training loop: `dlrun train`. Builds data, model and optimizer from a validated
// Config, resumes from a checkpoint when asked, trains with periodic evaluation, metrics,
// checkpoints and preemption handling, and writes the run directory of DESIGN.md §3.
#pragma once

#include <functional>
#include <string>

#include "config/options.h"

namespace dlrun::train {

struct TrainArgs {
  Config cfg;                  ///< loaded and validated
  std::string run_dir;         ///< --run-dir, else run.dir, else runs/<run.name>
  std::string resume = "auto"; ///< auto | never | PATH of a checkpoint directory
  bool force = false;          ///< with resume=never: set existing checkpoints aside and start fresh
  std::string save_init;       ///< write the initial weights here (torch.load-able dict) before step 1
  /// Multi-process hook (DESIGN.md §5): given this rank's stop flag at a step boundary,
  /// return whether ANY rank asked to stop (an all-reduce MAX). Unset: the flag itself.
  std::function<bool(bool)> agree_stop;
};

/// Run training. Returns the process exit code: 0 finished, 75 interrupted with a
/// committed checkpoint. Throws dlrun::Error for bad input (2) and runtime failures (1).
int run(const TrainArgs& args);

/// The run directory to use for a config and an optional --run-dir.
std::string resolve_run_dir(const Config& cfg, const std::string& cli_run_dir);

}  // namespace dlrun::train
