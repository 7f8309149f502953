// The state the parts of the training loop share (Marian's TrainingState): where training
// stands and what it has cost so far. Plain data, no LibTorch: the triggers read it, the
// trainer advances it, and a checkpoint carries it across interruptions (resume.h).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>

namespace dlrun::train {

struct TrainState {
  int64_t step = 0;                ///< optimizer steps done
  int64_t epoch = 0;               ///< epoch in progress (0-based)
  int64_t cursor = 0;              ///< samples of this epoch already consumed by all ranks
  int64_t skipped_steps = 0;       ///< steps whose update was skipped (non-finite, fp16 overflow)
  int64_t steps_lost_total = 0;    ///< steps computed but lost to interruptions (at least)
  int64_t steps_lost_last = 0;     ///< lost by the interruption this process resumed from
  int64_t resumed_from_step = -1;  ///< -1: fresh start
  bool eval_pending = false;       ///< an evaluation was due when the run was interrupted
  nlohmann::json preemption;       ///< the preempt event of this process, if any
};

}  // namespace dlrun::train
