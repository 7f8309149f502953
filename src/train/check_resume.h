// `dlrun check-resume`: does a config resume exactly? The first N steps are trained once without
// interruption and once with K interruptions at random steps -- SIGTERM, SIGUSR1 and SIGKILL
// mixed, each resumed with --resume auto; through scripts/dlrun-launch when there are several
// ranks (a kill takes the whole process group, as losing the machine does) -- then every step's
// logged loss and the final params_sha256 (the weights' and each average's) are compared. On a
// difference the report names the first step that differs and which parts of the state differ
// in the last checkpoint both runs wrote before it (state/checkpoint_diff.h, from the one list
// of parts). Both runs save every step (checkpoint.every_steps=1, all kept) in a work directory
// of their own. docs/checkpoints.md, "Checking that a config resumes exactly".
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace dlrun::train {

struct CheckResumeOptions {
  std::string config;                  ///< the config file (already validated by the caller)
  std::vector<std::string> overrides;  ///< its key=value overrides
  int64_t steps = 0;                   ///< optimizer steps of each run (>= 2)
  int interruptions = 3;               ///< in [1, steps - 1]
  int nproc = 1;                       ///< ranks; more than 1 runs through the launcher
  int64_t seed = -1;                   ///< of the interruption steps and signals; -1: drawn
  std::string work_dir;                ///< "" : a new temporary directory
  std::string launcher;                ///< "" : $DLRUN_LAUNCH, else scripts/dlrun-launch beside the build
  bool keep = false;                   ///< keep the work directory when the runs are identical too
};

struct CheckResumeReport {
  bool identical = false;
  std::string verdict;   ///< one line for a person
  nlohmann::json json;   ///< everything: segments, the first differing step, the parts that differ
  std::string work_dir;  ///< where the runs are (removed when identical, unless kept)
};

/// Runs both trainings and compares them. Bad options are dlrun::Error (exit 2); a run that
/// fails, or a segment that ends other than its signal says, exit 1. A difference is not an
/// error here: the report says so (`identical` false).
CheckResumeReport check_resume(const CheckResumeOptions& o);

}  // namespace dlrun::train
