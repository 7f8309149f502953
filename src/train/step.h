// One optimizer step: forward, loss, backward over the micro-batches of gradient
// accumulation, unscale and the non-finite check, gradient clipping, the optimizer update and
// the loss-scale update. This is the one place that DDP's no-sync, device-side AMP,
// activation recomputation and CUDA-graph capture touch.
//
// The step is device work: it returns device tensors and reads nothing back. Whether an
// update is skipped (fp16 overflow, or train.nonfinite: skip) is decided on the device: the
// fused optimizers take the flag, the loss scaler updates from it. The learning rate is set
// from the host.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <optional>
#include <vector>

#include "config/options.h"
#include "data/loader.h"
#include "models/model.h"
#include "train/amp.h"

namespace dlrun::dist {
class GradSync;
}

namespace dlrun::train {

struct StepResult {
  torch::Tensor loss;       ///< float64 scalar on the device: mean of the micro-batch losses
  torch::Tensor nonfinite;  ///< bool scalar on the device: a non-finite loss or gradient (fp16: loss only)
  /// bool scalar on the device: the update was not applied (fp16 overflow, or
  /// train.nonfinite: skip); undefined when no step can be skipped.
  torch::Tensor skipped;
};

class StepRunner {
 public:
  StepRunner(const TrainOptions& train, const AmpOptions& amp, models::Model& model, torch::optim::Optimizer& optim,
             const torch::Device& device);
  /// One optimizer step over `micro` (train.grad_accum micro-batches) at learning rate `lr`.
  StepResult run(const std::vector<data::Batch>& micro, double lr);
  /// Multi-process: the gradients of each step are averaged across ranks by `sync` during
  /// the backward of its last micro-batch (the earlier ones accumulate locally: DDP's
  /// no_sync), and `before_step` (the BatchNorm buffer broadcast) runs before its first forward.
  void distribute(dist::GradSync* sync, std::function<void()> before_step);
  /// Why a step whose `skipped` is true was skipped (fixed by the configuration).
  std::string skip_reason() const;
  GradScaler& scaler() { return scaler_; }
  const GradScaler& scaler() const { return scaler_; }

 private:
  void clip(const std::vector<torch::Tensor>& grads) const;

  TrainOptions train_;
  models::Model& model_;
  torch::optim::Optimizer& optim_;
  torch::Device device_;
  bool autocast_ = false;
  torch::ScalarType autocast_dtype_ = torch::kHalf;
  GradScaler scaler_;
  std::vector<torch::Tensor> params_;  ///< trainable parameters
  dist::GradSync* sync_ = nullptr;
  std::function<void()> before_step_;
};

}  // namespace dlrun::train
