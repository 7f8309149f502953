// The state the parts of the training loop share (Marian's TrainingState): where training
// stands and what it has cost so far. Plain data, no LibTorch: the trainer advances it, the
// step meter counts skipped steps into it, and a checkpoint part carries it across
// interruptions (train/state/parts.h). Where the data stands is the loader's (data::Position).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>

namespace dlrun::train {

struct TrainState {
  int64_t step = 0;                ///< optimizer steps done
  /// The step the run ends at: the schedule's length, or where train.early_stop ended it (the
  /// schedule itself keeps its length: the learning rate does not change with it).
  int64_t last_step = 0;
  int64_t skipped_steps = 0;       ///< steps whose update was skipped (non-finite, fp16 overflow)
  int64_t steps_lost_total = 0;    ///< steps computed but lost to interruptions (at least)
  int64_t steps_lost_last = 0;     ///< lost by the interruption this process resumed from
  int64_t resumed_from_step = -1;  ///< -1: fresh start
  bool eval_pending = false;       ///< an evaluation was due when the run was interrupted
  nlohmann::json preemption;       ///< the preempt event of this process, if any
  /// Training samples that did not decode (data.on_bad_sample: skip; train/observe/bad_samples.h):
  /// {"reads": reads replaced, "samples": {"<dataset index>": {"error", "reads", "first_step"}}}.
  nlohmann::json bad_samples = nlohmann::json::object();
};

}  // namespace dlrun::train
