// The pieces of a training process's start-up that the loop's file and the start-up's share:
// train::run() (start.cpp) reads the job's layout, takes the run directory's lock, places the
// process and meets its peers, then hands over to train_in() (trainer.cpp), which builds the
// Trainer, resumes and runs it. Between them, the stop checks of start-up.
#pragma once

#include "distributed/group.h"
#include "run/run_dir.h"
#include "train/step/device.h"
#include "train/trainer.h"

namespace dlrun::train {

/// Whether a stop was requested (on any rank: with a group, a collective) during start-up
/// (`phase`: "after loading data"): nothing has been trained or written, so there is nothing to
/// save and requeueing loses nothing; says so.
bool stopped_during_startup(const char* phase, dist::Group* group);

/// Build the Trainer (data files, model, optimizer: the cheap failures first), resume as
/// `args.resume` says, watch for cloud notices, and run the loop; a failure once the run
/// directory is written is recorded there. Returns the exit code (0 or 75).
int train_in(const TrainArgs& args, const RunDir& dir, const Placement& placement, dist::Group* group);

}  // namespace dlrun::train
