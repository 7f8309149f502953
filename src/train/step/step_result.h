// What one optimizer step returns: device tensors only, so that nothing waits for the device
// (the loop decides when a value crosses to the host: the step meter, step_meter.h).
#pragma once

#include <torch/torch.h>

namespace dlrun::train {

struct StepResult {
  torch::Tensor loss;       ///< float64 scalar on the device: mean of the micro-batch losses
  torch::Tensor nonfinite;  ///< bool scalar on the device: a non-finite loss or gradient (fp16: loss only)
  /// bool scalar on the device: the update was not applied (fp16 overflow, or
  /// train.nonfinite: skip); undefined when no step can be skipped.
  torch::Tensor skipped;
};

}  // namespace dlrun::train
