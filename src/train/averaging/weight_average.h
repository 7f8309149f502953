// An average of the model's weights kept beside them: the one interface the run's averages
// implement (today the exponential moving average, ema.h, and the stochastic weight average,
// swa.h), so that the loop, the step, the evaluations, the checkpoint and the exports treat
// every average alike. An average says
//   - when it is updated: inside the step (StepHook: before_step, after_update, and
//     prepare_capture for a CUDA graph), at epoch ends, and what it still needs when training
//     ends (SWA's BatchNorm pass);
//   - how it is evaluated: with every evaluation of the weights, or once at the end, and
//     whether it is ready to be evaluated or exported;
//   - its checkpoint part: its state.json entry and its tensors, under its name.
// Its name is everything's key: the checkpoint's <name>.pt and state.json "<name>", summary.json
// "<name>", the evaluation results' "<name>", `dlrun eval`'s report and `dlrun export --weights
// <name>`. A new average is one file (a WeightAverage and its factory) and one line of the
// registry (averages.cpp), plus its config keys. docs/design.md, "How a feature is added".
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "data/loader.h"
#include "models/model.h"
#include "train/step/step_hook.h"

namespace dlrun::train {

/// Makes a loader of the training split read as an evaluation reads it (no augmentation, in
/// order, all of it on every rank); made when asked (with data.device_resident it holds a copy).
using LoaderMaker = std::function<std::unique_ptr<data::Loader>()>;

class WeightAverage : public StepHook {
 public:
  /// `name`: the average's key everywhere (above); `what`: what a person calls it ("moving
  /// average"); `average`: a model built like the run's (same options, device and flags),
  /// which holds the average.
  WeightAverage(std::string name, std::string what, std::shared_ptr<models::Model> average);
  ~WeightAverage() override;

  const std::string& name() const { return name_; }
  const std::string& what() const { return what_; }
  models::Model& model() { return *average_; }
  const models::Model& model() const { return *average_; }

  // ---- when it is updated (besides the step's points, StepHook) ----
  /// At the end of epoch `epoch` (0-based), after step `step`, before the epoch end's checkpoint.
  virtual void at_epoch_end(int64_t epoch, int64_t step) { (void)epoch, (void)step; }
  /// A fresh start, once every rank holds the same weights: begin from them.
  virtual void restart() {}
  /// When training ends, before the final evaluation: what the average still needs (over
  /// `train_as_eval`'s batches). Returns whether it changed the average; nullopt when `stop`
  /// (asked before each batch: every rank reads as many batches, so it may be a collective)
  /// ended it, to be done again by the resumed run.
  virtual std::optional<bool> finish(const LoaderMaker& train_as_eval, const std::function<bool()>& stop) {
    (void)train_as_eval, (void)stop;
    return false;
  }

  // ---- how it is evaluated ----
  /// true: evaluated with every evaluation of the weights, on the same split; false: once, at
  /// the end of the run (train.eval_at_end), when ready.
  virtual bool evaluated_with_weights() const = 0;
  /// The average as an evaluation or an export may take it now, or null when it is not ready.
  virtual models::Model* ready() { return average_.get(); }
  /// Why ready() is null, for a person (what to do instead).
  virtual std::string not_ready_reason() const { return "it is not ready"; }

  // ---- its checkpoint part (average_part.h) ----
  /// Its buffers are made rank 0's before a save, as the model's are (true for an average
  /// that follows per-rank buffers such as BatchNorm's running statistics).
  virtual bool follows_buffers() const = 0;
  /// A checkpoint written now holds its tensors (false while there is nothing averaged yet).
  virtual bool has_tensors() const { return true; }
  /// state.json "<name>" (its settings and counters), and its inverse (the tensors are loaded
  /// into model() by the part).
  virtual nlohmann::json state() const = 0;
  virtual void load_state(const nlohmann::json& j) = 0;
  /// A checkpoint without this average's tensors at step `step`, whose state.json "<name>" is
  /// `saved` (null when the run that wrote it kept no such average).
  virtual void not_in_checkpoint(const nlohmann::json& saved, int64_t step) = 0;

  /// summary.json "<name>": state() and the average's params_sha256.
  nlohmann::json summary() const;
  /// What the checkpoint part writes as state.json "<name>": state() with "what", "ready" and,
  /// when not ready, "pending" (not_ready_reason()),
  /// so that what reads a checkpoint (eval, export) needs no list of the averages
  /// (checkpoint/averages.h).
  nlohmann::json described_state();

 private:
  std::string name_, what_;
  std::shared_ptr<models::Model> average_;
};

}  // namespace dlrun::train
