// What rides along an optimizer step: work the step runner (step.h) does for another
// collaborator at fixed points of every step, so that it is part of the step -- timed with it,
// and captured with it into a CUDA graph (train.cuda_graphs). The weights' averages
// (train/averaging/) are today's riders: an exponential moving average updated after the
// optimizer, and averages that only watch the step boundaries and need nothing here.
#pragma once

#include <cstdint>

namespace dlrun::train {

class StepHook {
 public:
  virtual ~StepHook() = default;
  /// On the host, before any of optimizer step `step`'s (1-based) device work: decide what
  /// after_update() does for this step.
  virtual void before_step(int64_t step) { (void)step; }
  /// Device work only, at the end of the step: after the optimizer and the loss scaler.
  virtual void after_update() {}
  /// The step is about to be captured into a CUDA graph and replayed: from now on
  /// after_update() must read what before_step() decides from device memory at fixed
  /// addresses (a captured kernel replays the arguments it was captured with).
  virtual void prepare_capture() {}
  /// The step before_step() announced ended before after_update() (a lost peer ended one of its
  /// collectives): forget what before_step() counted, so the state is the step boundary's.
  virtual void abandon_step() {}
};

}  // namespace dlrun::train
