// An exponential moving average of the model's weights (train.ema_decay), as timm's ModelEmaV3
// keeps it and PyTorch's AveragedModel with get_ema_multi_avg_fn computes it: after an
// optimizer step t that is due (t a multiple of train.ema_every_steps),
//
//   average <- average + (1 - d_t) * (weights - average)        (torch._foreach_lerp_)
//
// for every floating parameter and buffer (BatchNorm's running statistics follow the model's,
// as timm's do), and integer buffers (num_batches_tracked) copied. The decay d_t is timm's
// get_decay: 0 -- the average is a copy -- through step ema_start_step + 1, then ema_decay,
// or with ema_warmup min(ema_decay, 1 - (1 + k)^(-2/3)) at the k-th step after that. One
// _foreach_lerp_ call per update over all the floating tensors, on the model's device; nothing
// is read back to the host.
//
// The update is part of the step: the step runner (train/step/step.h) calls it as one of its
// hooks, deciding it on the host before the step's device work (before_step) and applying it
// after the optimizer (after_update). Under
// train.cuda_graphs the update is captured into the step's graph with the rest: its weight is
// then read from a device scalar that before_step fills -- 1 - d_t when due, 0 when not, so the
// captured update runs at every step and leaves the average as it is (bitwise, for finite
// weights) between due steps -- and integer buffers are copied by a device-side 0/1 factor.
//
// The average lives in a second model of the same architecture, on the same device, in eval
// mode (weight_average.h): Evaluations evaluates it beside the weights, and its checkpoint part
// (average_part.h: ema.pt and state.json "ema") saves and restores it with its counter, so a
// resumed run's average is bitwise the uninterrupted run's (tests/e2e/test_ema.py).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "config/options.h"
#include "models/model.h"
#include "train/averaging/weight_average.h"

namespace dlrun::train {

class Ema : public WeightAverage {
 public:
  /// `average`: a model built like `model` (models::build with the same options, on the same
  /// device); it takes `model`'s weights now.
  Ema(const TrainOptions& opts, models::Model& model, std::shared_ptr<models::Model> average);

  /// timm's get_decay for optimizer step `step` (1-based).
  static double decay_at(const TrainOptions& opts, int64_t step);

  /// Before optimizer step `step` (host, before any of the step's device work): whether the
  /// update after it is due, with its decay; counts it. With device weights, fills them.
  void before_step(int64_t step) override;
  void abandon_step() override;
  /// After the optimizer (device work only): the update before_step() decided. Eager, it is
  /// skipped when not due; with device weights it always runs, with weight 0 when not due.
  void after_update() override;
  /// train.cuda_graphs: the update's weight read from device scalars (one per floating dtype,
  /// their addresses fixed from now on), so that a captured update follows before_step().
  void prepare_capture() override;
  /// The average becomes a copy of the model's weights (a fresh start, or a checkpoint
  /// without an average), its counter zero.
  void restart() override;

  bool evaluated_with_weights() const override { return true; }
  bool follows_buffers() const override { return true; }  ///< BatchNorm's statistics are averaged too
  /// state.json "ema": the settings, the number of updates, the last update's step and decay.
  nlohmann::json state() const override;
  /// From state.json "ema" (the tensors are loaded into model() by the part).
  void load_state(const nlohmann::json& j) override;
  /// train.ema_decay set when resuming a run that had none: the average restarts from the
  /// restored weights (a warning).
  void not_in_checkpoint(const nlohmann::json& saved, int64_t step) override;
  int64_t updates() const { return updates_; }

 private:
  const TrainOptions& opts_;
  std::vector<torch::Tensor> avg_float_, model_float_;  ///< lerped, in state-dict order
  std::vector<torch::Tensor> avg_other_, model_other_;  ///< copied (integer buffers)
  int64_t updates_ = 0;
  int64_t last_step_ = -1;
  int64_t before_last_step_ = -1;  ///< last_step_ before the step under way (abandon_step)
  double last_decay_ = 0;
  bool due_ = false;     ///< the current step updates the average
  double weight_ = 0;    ///< its lerp weight, 1 - d_t
  /// use_device_weights(): one 0-dim weight per avg_float_ tensor (shared by dtype), the
  /// distinct ones, and the integer buffers' 0/1 factor
  std::vector<torch::Tensor> weights_, distinct_weights_;
  torch::Tensor due_factor_;
};

}  // namespace dlrun::train
