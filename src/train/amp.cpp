// Autocast scope and dynamic loss scaler (see amp.h).
#include "train/amp.h"

#include <ATen/autocast_mode.h>

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

GradScaler::GradScaler(const AmpOptions& o, bool active)
    : active_(active), scale_(o.init_scale), growth_interval_(o.growth_interval) {}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) const { return active_ ? loss * scale_ : loss; }

void GradScaler::update(bool finite) {
  if (!active_) return;
  if (!finite) {
    scale_ *= backoff_factor_;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ >= growth_interval_) {
    scale_ *= growth_factor_;
    growth_tracker_ = 0;
  }
}

nlohmann::json GradScaler::state() const {
  return {{"active", active_}, {"scale", scale_}, {"growth_tracker", growth_tracker_}};
}

void GradScaler::load_state(const nlohmann::json& j) {
  if (j.is_null()) return;
  scale_ = j.value("scale", scale_);
  growth_tracker_ = j.value("growth_tracker", growth_tracker_);
}

}  // namespace dlrun::train
