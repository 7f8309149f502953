// A step's mixed precision: the autocast of its forward passes and the loss scaler of its
// backward (the two mechanisms are in amp.h), and what follows from them for the update: which
// non-finite values are the model's problem (with fp16 loss scaling, overflowing gradients are
// routine: the scale is being searched for) and the skip flag the fused optimizer takes (fp16
// overflow, or train.nonfinite: skip). The step runner (step.h) asks it at each of those points
// and decides nothing about precision itself.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "config/options.h"
#include "train/step/amp.h"

namespace dlrun::train {

class Precision {
 public:
  /// fp16 autocast needs a CUDA device (exit 2 otherwise); the scaler is active for fp16 only.
  Precision(const AmpOptions& amp, NonfinitePolicy nonfinite, const torch::Device& device);

  /// Autocast for a forward pass: CUDA fp16/bf16 or CPU bf16 under amp.enabled, else nothing.
  AutocastScope autocast() const { return AutocastScope(enabled_, dtype_, device_type_); }
  /// The loss to backpropagate: scaled when fp16 scaling is on.
  torch::Tensor scale(const torch::Tensor& loss) const { return scaler_.scale(loss); }
  /// After the backward: the gradients unscaled in place (by 1 without fp16 scaling), and a
  /// float32 0-dim flag on the device, 1 when any of them is inf or NaN.
  /// `norms`: each gradient's L2 norm where the check computed them anyway (no fp16 scaling;
  /// GradScaler::unscale_), else left empty.
  torch::Tensor unscale(const std::vector<torch::Tensor>& grads, std::vector<torch::Tensor>* norms = nullptr) const {
    return scaler_.unscale_(grads, norms);
  }
  /// The step's non-finite flag (bool 0-dim): `loss_bad`, or with it an inf/NaN gradient
  /// (`found_inf`) unless fp16 scaling makes that routine.
  torch::Tensor nonfinite(const torch::Tensor& loss_bad, const torch::Tensor& found_inf) const;
  /// The fused optimizer's skip flag (float32 0-dim; 1: leave the weights and state alone): fp16
  /// overflow, and with train.nonfinite: skip a non-finite step. Undefined when no step can be
  /// skipped.
  torch::Tensor skip(const torch::Tensor& found_inf, const torch::Tensor& nonfinite) const;
  /// After the optimizer: the loss scale's update on the device (nothing without scaling).
  void update(const torch::Tensor& found_inf) { scaler_.update(found_inf); }
  /// Why a step whose skip flag was 1 was skipped (fixed by the configuration).
  std::string skip_reason() const;

  GradScaler& scaler() { return scaler_; }
  const GradScaler& scaler() const { return scaler_; }

 private:
  bool enabled_;
  torch::ScalarType dtype_;
  c10::DeviceType device_type_;
  NonfinitePolicy nonfinite_;
  GradScaler scaler_;
};

}  // namespace dlrun::train
