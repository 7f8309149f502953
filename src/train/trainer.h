// `dlrun train`: start-up (checks first, run directory last), then the training loop.
//
// The loop (trainer.cpp) only wires parts that each live in their own file: the components
// (components.h), one optimizer step (step.h), when to log/evaluate/save (triggers.h), what
// a checkpoint holds and how a run resumes (resume.h), where things are written (run_dir.h)
// and how events are reported (metrics/sink.h). docs/design.md describes how data flows
// between them.
#pragma once

#include <functional>
#include <string>

#include "config/options.h"

namespace dlrun::train {

struct TrainArgs {
  Config cfg;                  ///< loaded and validated
  std::string run_dir;         ///< --run-dir, else run.dir, else runs/<run.name> (resolve_run_dir)
  std::string resume = "auto"; ///< auto | never | PATH of a checkpoint directory
  bool force = false;          ///< with resume=never: set an earlier run aside and start fresh
  std::string save_init;       ///< write the initial weights here (torch.load-able dict) before step 1
};

/// Run training, as one rank of the job the environment describes (world/world.h; one process
/// when nothing is set). Returns the process exit code: 0 finished, 75 interrupted (a checkpoint is
/// committed, or nothing had been trained yet). Throws dlrun::Error for bad input (2) and
/// runtime failures (1). Every refusal happens before the run directory is written to, so a
/// refused start leaves it exactly as it was; a failure after that records summary.json
/// with status "failed".
int run(const TrainArgs& args);

}  // namespace dlrun::train
