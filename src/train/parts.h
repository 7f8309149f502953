// Today's checkpointed state as checkpoint parts (checkpoint/part.h), in the order a snapshot
// saves them and a resume checks and loads them: the model, the optimizers, the loss scaler,
// every rank's RNG, the train state, the data loader's position, the evaluations' verdicts, the
// weights' moving average and their stochastic weight average. The files and state.json keys each part writes are listed in
// docs/checkpoints.md.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/part.h"
#include "config/options.h"
#include "data/loader.h"
#include "models/model.h"
#include "run/state.h"
#include "train/amp.h"
#include "train/ema.h"
#include "train/monitor.h"
#include "train/optimizers.h"
#include "train/replicas.h"
#include "train/step.h"
#include "train/swa.h"

namespace dlrun::train {

/// What the parts save and load: the live objects of one rank.
struct LiveState {
  const Config& cfg;
  models::Model& model;
  Optimizers& optimizers;
  StepRunner& runner;  ///< its loss scaler (state.json "grad_scaler") and micro-batch split ("micro_batch")
  TrainState& state;
  data::Loader& loader;
  Replicas& replicas;
  int64_t total_steps = 0;
  torch::Device device = torch::kCPU;
  Monitor* monitor = nullptr;  ///< the best checkpoint and early stopping (state.json "monitor")
  nlohmann::json dataset;      ///< dataset_record(): kept with the weights (state.json "dataset")
  Ema* ema = nullptr;          ///< train.ema_decay's moving average (ema.pt, state.json "ema"), or null
  Swa* swa = nullptr;          ///< optim.swa_start_epoch's average (swa.pt, state.json "swa"), or null
};

class CheckpointParts {
 public:
  explicit CheckpointParts(const LiveState& live);
  ~CheckpointParts();
  /// Every rank: each part's gather() (collectives), in order. Then, on the leader, the host
  /// copy of every part with the config and versions: what training stalls for. The other
  /// ranks get nullopt.
  std::optional<ckpt::Snapshot> snapshot();
  /// Check every part against the config (an incompatible model or optimizer: exit 2, naming
  /// the difference; a changed schedule, batch, world size or config key: a warning), then load
  /// every part, with this rank's RNG. A checkpoint whose files hash correctly but hold values
  /// of the wrong kind (written by hand, or by another program) is exit 2, never a crash.
  void restore(const ckpt::Snapshot& snap);
  /// A fresh start (no checkpoint to restore): the model takes model.init's weights when it is
  /// set (load_init_weights, components.h). Call on the rank whose weights the others receive.
  void start_fresh();
  /// summary.json's "init": what start_fresh() loaded, or null.
  const nlohmann::json& init_report() const { return init_; }

 private:
  LiveState live_;  ///< references to the live objects, which outlive this
  nlohmann::json init_;
  /// Each part with its name, which DLRUN_FAULT=forget_on_resume takes: weights, optimizer,
  /// scaler, micro_batch, rng, train_state, data_position, verdicts, ema, swa.
  std::vector<std::pair<std::string, std::unique_ptr<ckpt::Part>>> parts_;
};

}  // namespace dlrun::train
