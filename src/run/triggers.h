// When to log, evaluate, save and stop: pure questions about where training stands, with no
// LibTorch and no side effects (Marian's Scheduler::saving()/validating() are the model), so
// each rule is unit-tested on its own (tests/run/triggers_test.cpp) and the loop only asks.
#pragma once

#include <cstdint>

#include "config/options.h"

namespace dlrun::train {

/// A step boundary: after optimizer step `step`, or at the end of an epoch.
struct Boundary {
  int64_t step = 0;         ///< optimizer steps done
  int64_t epoch = 0;        ///< at an epoch end: epochs completed; otherwise the epoch in progress
  int64_t total_steps = 0;  ///< steps of the whole run
  bool epoch_end = false;
};

/// Why a checkpoint is written (recorded in metrics.jsonl).
/// kBest: an evaluation improved checkpoint.keep_best's metric (a periodic save otherwise).
enum class SaveReason { kNone, kEverySteps, kEveryMinutes, kEpochEnd, kEnd, kPreemption, kBest };
const char* name_of(SaveReason reason);

/// The run is done: every step trained.
bool finished(const Boundary& b);

/// A metrics line (and so a read of the loss from the device) is due: every
/// log.every_steps steps and at the last step. Never at an epoch end (no new step).
bool log_due(const LogOptions& log, const Boundary& b);

/// Evaluation is due: every train.eval_every_steps steps, or at the end of every
/// train.eval_every_epochs-th epoch; never twice at the same step (`last_eval_step`).
bool eval_due(const TrainOptions& train, const Boundary& b, int64_t last_eval_step);

/// The evaluation after training is due: train.eval_at_end, unless one ran at this step.
bool final_eval_due(const TrainOptions& train, int64_t step, int64_t last_eval_step);

/// A periodic checkpoint is due, and why: every checkpoint.every_steps steps, after
/// `every_minutes` of wall clock since the last save (`minutes_since_save`; the value of
/// checkpoint.every_minutes, `auto` resolved by the trainer; 0: off), or at an epoch end with
/// checkpoint.at_epoch_end. Never at the last step (the final save is final_save_due's) and
/// never twice at one step (`last_saved_step`, which after a resume is the checkpoint's step).
SaveReason save_due(const CheckpointOptions& ckpt, const Boundary& b, double minutes_since_save,
                    int64_t last_saved_step, double every_minutes);

/// The save after training is due: checkpoint.at_end, unless this step is already saved.
bool final_save_due(const CheckpointOptions& ckpt, int64_t step, int64_t last_saved_step);

}  // namespace dlrun::train
