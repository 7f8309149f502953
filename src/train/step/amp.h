// Automatic mixed precision: an autocast scope, and a dynamic loss scaler with the semantics
// of torch.amp.GradScaler (scale the loss, unscale before clipping, skip steps with inf/NaN
// gradients, back off on overflow, grow after growth_interval good steps) kept on the device:
// the scale and the growth tracker are device tensors updated by ATen's own AMP kernels, and
// the skip is decided by the fused optimizers from the same device flag, so an fp16 step needs
// no host read. The step runner (step.h) drives it.
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
  /// Active only for fp16 (bf16 needs no scaling); an inactive scaler scales by 1 and never
  /// backs off, but unscale_() still finds non-finite gradients. Its tensors live on `device`.
  GradScaler(const AmpOptions& opts, bool active, const torch::Device& device = torch::kCPU);
  bool active() const { return active_; }
  /// loss * scale (the loss itself when inactive).
  torch::Tensor scale(const torch::Tensor& loss) const;
  /// Divide `grads` by the scale in place (ATen's _amp_foreach_non_finite_check_and_unscale_)
  /// and return a float32 0-dim device flag: 1 when any of them is inf or NaN, else 0.
  /// Inactive: the flag alone, from one read of the gradients (their norms); nothing written.
  /// `norms` (when given): the inactive scaler leaves each gradient's L2 norm there (float32
  /// 0-dim device tensors, as at::_foreach_norm gives them), for clipping to reuse instead of
  /// reading the gradients again; the active one leaves it empty (its norms would be of the
  /// scaled gradients).
  torch::Tensor unscale_(const std::vector<torch::Tensor>& grads, std::vector<torch::Tensor>* norms = nullptr) const;
  /// After the step: ATen's _amp_update_scale_ on the device (back off where found_inf is 1,
  /// grow after growth_interval steps without). Nothing when inactive.
  void update(const torch::Tensor& found_inf);
  /// The current scale, read from the device (for messages and checkpoints, not per step).
  double scale_value() const;
  /// torch.amp.GradScaler.state_dict()'s keys and meanings: scale, growth_factor,
  /// backoff_factor, growth_interval, _growth_tracker; {} when inactive, as PyTorch's.
  nlohmann::json state() const;
  /// Inverse of state(); also reads the keys of dlrun checkpoints older than the device
  /// scaler ({"active", "scale", "growth_tracker"}). null or {}: keeps the initial state.
  void load_state(const nlohmann::json& j);

 private:
  bool active_;
  double growth_factor_, backoff_factor_;
  int64_t growth_interval_;
  torch::Tensor scale_;           ///< float32 (1) on the device
  torch::Tensor growth_tracker_;  ///< int32 (1) on the device
};

}  // namespace dlrun::train
