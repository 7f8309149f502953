// Stochastic weight averaging (see swa.h).
#include "train/swa.h"

#include <optional>
#include <utility>

#include "base/error.h"
#include "base/json_limits.h"
#include "base/log.h"
#include "train/evaluate.h"
#include "train/fingerprint.h"

namespace dlrun::train {

Swa::Swa(const OptimOptions& opts, models::Model& model, std::shared_ptr<models::Model> average)
    : opts_(opts), average_(std::move(average)) {
  const auto mine = average_->named_parameters(), theirs = model.named_parameters();
  DLRUN_CHECK(mine.size() == theirs.size(), ExitCode::kRuntime, "SWA: the average's model differs from the model");
  for (size_t i = 0; i < mine.size(); ++i) {
    DLRUN_CHECK(mine[i].key() == theirs[i].key() && mine[i].value().sizes() == theirs[i].value().sizes(),
                ExitCode::kRuntime, "SWA: the average's {} differs from the model's {}", mine[i].key(),
                theirs[i].key());
    avg_params_.push_back(mine[i].value());
    model_params_.push_back(theirs[i].value());
  }
  average_->eval();
}

void Swa::at_epoch_end(int64_t epoch, int64_t step) {
  if (opts_.swa_start_epoch <= 0 || epoch < opts_.swa_start_epoch || step == last_step_) return;
  torch::NoGradGuard no_grad;
  if (updates_ == 0) {
    for (size_t i = 0; i < avg_params_.size(); ++i) avg_params_[i].copy_(model_params_[i]);
  } else {  // AveragedModel's default average, as its multi-tensor form computes it
    torch::_foreach_lerp_(avg_params_, model_params_, 1.0 / static_cast<double>(updates_ + 1));
  }
  ++updates_;
  last_step_ = step;
}

std::optional<bool> Swa::update_bn(const std::function<std::unique_ptr<data::Loader>()>& make_loader,
                                   const std::function<bool()>& stop) {
  if (updates_ == 0 || bn_current()) return false;
  const std::unique_ptr<data::Loader> owned = make_loader();
  data::Loader& loader = *owned;
  torch::NoGradGuard no_grad;
  std::vector<std::pair<torch::nn::BatchNorm2dImpl*, std::optional<double>>> momenta;
  for (const auto& m : average_->modules(/*include_self=*/false))
    if (auto* bn = dynamic_cast<torch::nn::BatchNorm2dImpl*>(m.get())) {
      bn->reset_running_stats();
      momenta.emplace_back(bn, bn->options.momentum());
      bn->options.momentum(std::nullopt);  // the cumulative average over the pass's batches
    }
  if (!momenta.empty()) {
    const bool fused = average_->fused_conv_bn_relu();
    average_->use_fused_conv_bn_relu(false);  // the modules' own training-mode BatchNorm
    average_->train();
    loader.start_epoch(0, 0);
    int64_t batches = 0;
    const bool complete = each_batch(loader, stop, [&](const data::Batch& b) {
      average_->forward(b.x);
      ++batches;
    });
    average_->eval();
    average_->use_fused_conv_bn_relu(fused);
    for (auto& [bn, momentum] : momenta) bn->options.momentum(momentum);
    if (!complete) return std::nullopt;
    log0::info("SWA: BatchNorm statistics of the average of {} epoch(s) recomputed over {} training batch(es)",
               updates_, batches);
  }
  bn_updates_ = updates_;
  return true;
}

nlohmann::json Swa::state() const {
  return {{"start_epoch", opts_.swa_start_epoch}, {"lr", opts_.swa_lr},       {"anneal_epochs", opts_.swa_anneal_epochs},
          {"updates", updates_},                  {"last_step", last_step_}, {"bn_updates", bn_updates_}};
}

nlohmann::json Swa::summary() const {
  nlohmann::json j = state();
  j["params_sha256"] = params_sha256(*average_);
  return j;
}

void Swa::load_state(const nlohmann::json& j) {
  const std::string what = "checkpoint state.json \"swa\"";
  DLRUN_CHECK_INPUT(j.is_object() && j.contains("updates"), "{} is malformed: no updates", what);
  updates_ = json_int_or(j, "updates", 0, what);
  last_step_ = json_int_or(j, "last_step", -1, what);
  bn_updates_ = json_int_or(j, "bn_updates", 0, what);
  DLRUN_CHECK_INPUT(updates_ >= 0 && bn_updates_ >= 0 && bn_updates_ <= updates_,
                    "checkpoint state.json \"swa\": counts out of range (updates {}, bn_updates {})", updates_,
                    bn_updates_);
}

}  // namespace dlrun::train
