// The weights' exponential moving average (see ema.h).
#include "train/averaging/ema.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "base/json_limits.h"
#include "base/log.h"

namespace dlrun::train {

Ema::Ema(const TrainOptions& opts, models::Model& model, std::shared_ptr<models::Model> average)
    : WeightAverage("ema", "moving average", std::move(average)), opts_(opts) {
  const auto mine = models::state_dict(this->model()), theirs = models::state_dict(model);
  DLRUN_CHECK(mine.size() == theirs.size(), ExitCode::kRuntime, "EMA: the average's model differs from the model");
  for (size_t i = 0; i < mine.size(); ++i) {
    DLRUN_CHECK(mine[i].first == theirs[i].first && mine[i].second.sizes() == theirs[i].second.sizes() &&
                    mine[i].second.scalar_type() == theirs[i].second.scalar_type(),
                ExitCode::kRuntime, "EMA: the average's {} differs from the model's {}", mine[i].first,
                theirs[i].first);
    const bool lerp = mine[i].second.is_floating_point();
    (lerp ? avg_float_ : avg_other_).push_back(mine[i].second);
    (lerp ? model_float_ : model_other_).push_back(theirs[i].second);
  }
  restart();
}

std::unique_ptr<WeightAverage> make_ema(const Config& cfg, models::Model& model, std::shared_ptr<models::Model> copy) {
  return std::make_unique<Ema>(cfg.train, model, std::move(copy));
}

double Ema::decay_at(const TrainOptions& o, int64_t step) {
  const int64_t k = std::max<int64_t>(0, step - o.ema_start_step - 1);
  if (k <= 0) return 0.0;
  if (!o.ema_warmup) return o.ema_decay;
  const double warm = 1.0 - std::pow(1.0 + static_cast<double>(k), -2.0 / 3.0);
  return std::max(std::min(warm, o.ema_decay), 0.0);
}

void Ema::before_step(int64_t step) {
  due_ = step % opts_.ema_every_steps == 0;
  if (due_) {
    last_decay_ = decay_at(opts_, step);
    weight_ = 1.0 - last_decay_;
    ++updates_;
    before_last_step_ = last_step_;
    last_step_ = step;
  }
  if (weights_.empty()) return;
  torch::NoGradGuard no_grad;
  for (auto& w : distinct_weights_) w.fill_(due_ ? weight_ : 0.0);
  if (due_factor_.defined()) due_factor_.fill_(due_ ? 1 : 0);
}

void Ema::abandon_step() {
  if (!due_) return;
  due_ = false;
  --updates_;
  last_step_ = before_last_step_;
}

void Ema::after_update() {
  torch::NoGradGuard no_grad;
  if (weights_.empty()) {  // eager: the host knows whether the step is due
    if (!due_) return;
    torch::_foreach_lerp_(avg_float_, model_float_, weight_);
    for (size_t i = 0; i < avg_other_.size(); ++i) avg_other_[i].copy_(model_other_[i]);
    return;
  }
  // The same lerp with a device weight (ATen's per-tensor route: its fused one needs weights
  // shaped like the tensors); integer buffers move by their difference times 0 or 1.
  torch::_foreach_lerp_(avg_float_, model_float_, weights_);
  if (avg_other_.empty()) return;
  auto diff = torch::_foreach_sub(model_other_, avg_other_);
  torch::_foreach_mul_(diff, due_factor_);
  torch::_foreach_add_(avg_other_, diff);
}

void Ema::prepare_capture() {
  if (!weights_.empty() || avg_float_.empty()) return;
  for (const auto& t : avg_float_) {
    auto same = std::find_if(distinct_weights_.begin(), distinct_weights_.end(),
                             [&](const torch::Tensor& w) { return w.scalar_type() == t.scalar_type(); });
    if (same == distinct_weights_.end())
      same = distinct_weights_.insert(distinct_weights_.end(), torch::zeros({}, t.options()));
    weights_.push_back(*same);
  }
  if (!avg_other_.empty()) due_factor_ = torch::zeros({}, avg_other_.front().options().dtype(torch::kLong));
}

void Ema::restart() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < avg_float_.size(); ++i) avg_float_[i].copy_(model_float_[i]);
  for (size_t i = 0; i < avg_other_.size(); ++i) avg_other_[i].copy_(model_other_[i]);
  updates_ = 0;
  last_step_ = -1;
  last_decay_ = 0;
}

nlohmann::json Ema::state() const {
  return {{"decay", opts_.ema_decay},   {"every_steps", opts_.ema_every_steps}, {"start_step", opts_.ema_start_step},
          {"warmup", opts_.ema_warmup}, {"updates", updates_},                  {"last_step", last_step_},
          {"last_decay", last_decay_}};
}

void Ema::load_state(const nlohmann::json& j) {
  try {
    (void)j.at("updates");  // required
    updates_ = json_int_or(j, "updates", 0, "checkpoint state.json \"ema\"");
    last_step_ = json_int_or(j, "last_step", -1, "checkpoint state.json \"ema\"");
    last_decay_ = j.value("last_decay", 0.0);
  } catch (const nlohmann::json::exception& e) {
    fail_input("checkpoint state.json \"ema\" is malformed: {}", e.what());
  }
}

void Ema::not_in_checkpoint(const nlohmann::json&, int64_t step) {
  restart();
  log0::warn("train.ema_decay: the checkpoint has no moving average (ema.pt); it starts from the restored weights at "
             "step {}",
             step);
}

}  // namespace dlrun::train
