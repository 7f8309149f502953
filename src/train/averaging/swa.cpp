// Stochastic weight averaging (see swa.h).
#include "train/averaging/swa.h"

#include <optional>
#include <utility>

#include "base/error.h"
#include "base/json_limits.h"
#include "base/log.h"

namespace dlrun::train {

Swa::Swa(const OptimOptions& opts, models::Model& model, std::shared_ptr<models::Model> average)
    : WeightAverage("swa", "stochastic weight average", std::move(average)), opts_(opts) {
  const auto mine = this->model().named_parameters(), theirs = model.named_parameters();
  DLRUN_CHECK(mine.size() == theirs.size(), ExitCode::kRuntime, "SWA: the average's model differs from the model");
  for (size_t i = 0; i < mine.size(); ++i) {
    DLRUN_CHECK(mine[i].key() == theirs[i].key() && mine[i].value().sizes() == theirs[i].value().sizes(),
                ExitCode::kRuntime, "SWA: the average's {} differs from the model's {}", mine[i].key(),
                theirs[i].key());
    avg_params_.push_back(mine[i].value());
    model_params_.push_back(theirs[i].value());
  }
}

std::unique_ptr<WeightAverage> make_swa(const Config& cfg, models::Model& model, std::shared_ptr<models::Model> copy) {
  return std::make_unique<Swa>(cfg.optim, model, std::move(copy));
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

std::optional<bool> Swa::finish(const LoaderMaker& train_as_eval, const std::function<bool()>& stop) {
  if (updates_ == 0 || bn_current()) return false;
  models::Model& average = model();
  const std::unique_ptr<data::Loader> owned = train_as_eval();
  data::Loader& loader = *owned;
  torch::NoGradGuard no_grad;
  std::vector<std::pair<torch::nn::BatchNorm2dImpl*, std::optional<double>>> momenta;
  for (const auto& m : average.modules(/*include_self=*/false))
    if (auto* bn = dynamic_cast<torch::nn::BatchNorm2dImpl*>(m.get())) {
      bn->reset_running_stats();
      momenta.emplace_back(bn, bn->options.momentum());
      bn->options.momentum(std::nullopt);  // the cumulative average over the pass's batches
    }
  if (!momenta.empty()) {
    const bool fused = average.fused_conv_bn_relu();
    average.use_fused_conv_bn_relu(false);  // the modules' own training-mode BatchNorm
    average.train();
    loader.start_epoch(0, 0);
    int64_t batches = 0;
    const bool complete = data::each_batch(loader, stop, [&](const data::Batch& b) {
      average.forward(b.x);
      ++batches;
    });
    average.eval();
    average.use_fused_conv_bn_relu(fused);
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

std::string Swa::not_ready_reason() const {
  return "its BatchNorm statistics are not those of the average yet (they are recomputed when the run ends); export "
         "the run's final checkpoint";
}

void Swa::not_in_checkpoint(const nlohmann::json& saved, int64_t step) {
  if (saved.is_object() && json_int_or(saved, "updates", -1, "state.json swa") == 0) return;  // nothing averaged yet
  log0::warn("optim.swa_start_epoch: the checkpoint has no weight average (swa.pt); it starts at the next epoch end "
             "from step {}",
             step);
}

}  // namespace dlrun::train
