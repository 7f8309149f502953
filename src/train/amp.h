// CUDA automatic mixed precision: an autocast scope and the state of a dynamic loss scaler
// with the semantics of torch.cuda.amp.GradScaler (scale the loss, unscale before clipping,
// skip steps with inf/NaN gradients, halve on overflow, double after growth_interval good
// steps). The step runner (step.h) does the unscaling and the skip; the scale itself is still
// a host value, read by the runner once per fp16 step (the mixed-precision work moves it to
// the device).
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "config/options.h"

namespace dlrun::train {

/// Enables autocast for `device` (CUDA: fp16 or bf16; CPU: bf16) for its lifetime, nesting
/// and restoring like torch.autocast; a no-op when `enabled` is false.
class AutocastScope {
 public:
  AutocastScope(bool enabled, torch::ScalarType dtype, c10::DeviceType device = c10::DeviceType::CUDA);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool enabled_;
  c10::DeviceType device_;
  bool prev_enabled_ = false;
  torch::ScalarType prev_dtype_ = torch::kHalf;
};

class GradScaler {
 public:
  /// Active only for fp16 (bf16 needs no scaling); inactive scalers pass everything through.
  GradScaler(const AmpOptions& opts, bool active);
  bool active() const { return active_; }
  torch::Tensor scale(const torch::Tensor& loss) const;
  /// After a step attempt: adjust the scale given whether the gradients were finite.
  void update(bool finite);
  double scale_value() const { return scale_; }
  /// What gradients are multiplied by to unscale them: 1 / scale, or 1 when inactive.
  double inv_scale() const { return active_ ? 1.0 / scale_ : 1.0; }
  nlohmann::json state() const;
  void load_state(const nlohmann::json& j);

 private:
  bool active_;
  double scale_;
  double growth_factor_ = 2.0, backoff_factor_ = 0.5;
  int64_t growth_interval_;
  int64_t growth_tracker_ = 0;
};

}  // namespace dlrun::train
