// Stochastic weight averaging (optim.swa_start_epoch), as PyTorch's torch.optim.swa_utils does
// it in its documented loop with swa_start = S - 1:
//
//   - the learning rate: from the first step of epoch S (0-based), SWALR's cosine annealing
//     from the schedule's rate at that step to optim.swa_lr over optim.swa_anneal_epochs
//     epochs, then swa_lr (schedule.h: lr_at);
//   - the average: at the end of every epoch from S on, AveragedModel.update_parameters with its
//     default average -- the mean of the weights at those epoch ends, parameters only
//     (average += (weights - average) / (n + 1), one _foreach_lerp_ call with weight 1/(n + 1);
//     the first update copies);
//   - BatchNorm: at the end of the run, update_bn -- every BatchNorm layer's running statistics
//     reset and recomputed as the cumulative average over one pass of the training set, in
//     training mode with momentum None. The pass reads the training split as an evaluation
//     reads data (no augmentation, in order), all of it on every rank, so every rank computes
//     the same statistics.
//
// The average lives in a second model of the same architecture on the same device
// (weight_average.h). Its checkpoint part (average_part.h: swa.pt, state.json "swa") saves and
// restores it with its count, so a resumed run's average is bitwise the uninterrupted run's; it
// is evaluated once, after update_bn, at the end of the run (Evaluations::at_end), and exported
// with --weights swa.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "config/options.h"
#include "data/loader.h"
#include "models/model.h"
#include "train/averaging/weight_average.h"

namespace dlrun::train {

class Swa : public WeightAverage {
 public:
  /// `average`: a model built like `model` (same options, device and flags).
  Swa(const OptimOptions& opts, models::Model& model, std::shared_ptr<models::Model> average);

  /// At the end of epoch `epoch` (0-based), after step `step`: the weights join the average
  /// when epoch >= optim.swa_start_epoch.
  void at_epoch_end(int64_t epoch, int64_t step) override;
  /// update_bn over a loader `train_as_eval` makes (an evaluation loader over the training
  /// split). A no-op before the first update, and when the statistics are already those of
  /// the current average. Returns whether it recomputed them; nullopt: `stop` (asked before
  /// each batch; every rank reads as many batches, so it may be a collective) ended the pass,
  /// and the statistics are recomputed next time.
  std::optional<bool> finish(const LoaderMaker& train_as_eval, const std::function<bool()>& stop) override;
  /// Whether the BatchNorm statistics were recomputed for the current average (what an
  /// evaluation or export of it needs).
  bool bn_current() const { return updates_ > 0 && bn_updates_ == updates_; }
  /// The average when it is finished (bn_current()), else null: what an evaluation takes.
  models::Model* ready() override { return bn_current() ? &model() : nullptr; }
  std::string not_ready_reason() const override;

  bool evaluated_with_weights() const override { return false; }  ///< once, at the end
  bool follows_buffers() const override { return false; }  ///< its BatchNorm statistics are its own (update_bn)
  bool has_tensors() const override { return updates_ > 0; }  ///< before the start epoch only the count
  int64_t updates() const { return updates_; }
  /// state.json "swa": the settings, the number of epochs averaged, the last one's step, and
  /// the count the BatchNorm statistics were recomputed for.
  nlohmann::json state() const override;
  /// From state.json "swa" (the tensors are loaded into model() by the part).
  void load_state(const nlohmann::json& j) override;
  /// Saved before averaging began: the average stays as built; optim.swa_start_epoch set when
  /// resuming a run that had none: it starts at the next epoch end (a warning).
  void not_in_checkpoint(const nlohmann::json& saved, int64_t step) override;

 private:
  const OptimOptions& opts_;
  std::vector<torch::Tensor> avg_params_, model_params_;  ///< parameters, in order
  int64_t updates_ = 0;
  int64_t last_step_ = -1;
  int64_t bn_updates_ = 0;  ///< updates_ when update_bn last ran (0: never)
};

}  // namespace dlrun::train
