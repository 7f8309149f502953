// Autocast scope and dynamic loss scaler (see amp.h).
#include "train/step/amp.h"

#include <ATen/autocast_mode.h>
#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>
#include <ATen/ops/_amp_update_scale.h>
#include <ATen/ops/_foreach_norm.h>

#include "base/json_limits.h"

namespace dlrun::train {

// As torch.autocast's __enter__/__exit__: remember the device type's state, set it, count
// the nesting; on leaving restore it, and clear the cast cache when the outermost scope ends.
AutocastScope::AutocastScope(bool enabled, torch::ScalarType dtype, c10::DeviceType device)
    : enabled_(enabled), device_(device) {
  if (!enabled_) return;
  prev_enabled_ = at::autocast::is_autocast_enabled(device_);
  prev_dtype_ = at::autocast::get_autocast_dtype(device_);
  at::autocast::set_autocast_enabled(device_, true);
  at::autocast::set_autocast_dtype(device_, dtype);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!enabled_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_, prev_enabled_);
  at::autocast::set_autocast_dtype(device_, prev_dtype_);
}

GradScaler::GradScaler(const AmpOptions& o, bool active, const torch::Device& device)
    : active_(active),
      growth_factor_(o.growth_factor),
      backoff_factor_(o.backoff_factor),
      growth_interval_(o.growth_interval),
      scale_(torch::full({1}, active ? o.init_scale : 1.0, torch::TensorOptions().dtype(torch::kFloat32).device(device))),
      growth_tracker_(torch::zeros({1}, torch::TensorOptions().dtype(torch::kInt32).device(device))) {}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) const {
  return active_ ? loss * scale_.to(loss.scalar_type()).squeeze() : loss;
}

torch::Tensor GradScaler::unscale_(const std::vector<torch::Tensor>& grads, std::vector<torch::Tensor>* norms) const {
  if (norms != nullptr) norms->clear();
  auto found_inf = torch::zeros({}, scale_.options());
  if (grads.empty()) return found_inf;
  if (!active_) {
    // No scale to divide by: one read of the gradients and no write (the unscale kernel would
    // multiply each by 1 in place). A tensor's L2 norm is inf or NaN exactly when it holds an
    // inf or a NaN -- or when its squares overflow float32, which counts as non-finite too.
    auto found = at::_foreach_norm(grads, 2);
    auto flag = at::stack(found).isfinite().all().logical_not().to(scale_.scalar_type()).to(scale_.device());
    if (norms != nullptr) *norms = std::move(found);
    return flag;
  }
  // As torch.amp.GradScaler: the reciprocal in float64, then float32.
  const auto inv = scale_.to(torch::kFloat64).reciprocal().to(torch::kFloat32);
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv);
  return found_inf;
}

void GradScaler::update(const torch::Tensor& found_inf) {
  if (!active_) return;
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf.to(scale_.device()).view({1}), growth_factor_,
                         backoff_factor_, growth_interval_);
}

double GradScaler::scale_value() const { return scale_.item<double>(); }

nlohmann::json GradScaler::state() const {
  if (!active_) return nlohmann::json::object();
  return {{"scale", scale_value()},
          {"growth_factor", growth_factor_},
          {"backoff_factor", backoff_factor_},
          {"growth_interval", growth_interval_},
          {"_growth_tracker", growth_tracker_.item<int64_t>()}};
}

void GradScaler::load_state(const nlohmann::json& j) {
  if (!active_ || !j.is_object() || j.empty() || !j.contains("scale")) return;
  scale_.fill_(j.at("scale").get<double>());
  const char* tracker = j.contains("_growth_tracker") ? "_growth_tracker" : "growth_tracker";
  growth_tracker_.fill_(json_int_or(j, tracker, 0, "checkpoint state.json \"grad_scaler\""));
}

}  // namespace dlrun::train
