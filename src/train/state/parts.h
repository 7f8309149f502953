// Today's checkpointed state as checkpoint parts (checkpoint/part.h), in the order a snapshot
// saves them and a resume checks and loads them: the model, the optimizers, the loss scaler,
// the micro-batch split, every rank's RNG, the train state, the data loader's position, the
// evaluations' verdicts, and each weight average (train/averaging/). The one list of them,
// part_kinds(), also says which files and state.json keys an exact resume needs equal, which
// is what `dlrun check-resume` compares (checkpoint_diff.h). The files and keys each part
// writes are listed in docs/checkpoints.md.
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
#include "distributed/replicas.h"
#include "models/model.h"
#include "run/state.h"
#include "train/averaging/weight_average.h"
#include "train/observe/monitor.h"
#include "train/step/amp.h"
#include "train/step/micro_batch.h"
#include "train/step/optimizers.h"

namespace dlrun::train {

/// What the parts save and load: the live objects of one rank.
struct LiveState {
  const Config& cfg;
  models::Model& model;
  Optimizers& optimizers;
  GradScaler& scaler;              ///< the step's loss scaler (state.json "grad_scaler")
  MicroBatchSplit& micro_batches;  ///< the step's micro-batch split (state.json "micro_batch")
  TrainState& state;
  data::Loader& loader;
  dist::Replicas& replicas;
  int64_t total_steps = 0;     ///< the schedule's length (state.json "total_steps")
  torch::Device device = torch::kCPU;
  Monitor* monitor = nullptr;  ///< the best checkpoint and early stopping (state.json "monitor")
  nlohmann::json dataset;      ///< dataset_record(): kept with the weights (state.json "dataset")
  std::vector<WeightAverage*> averages;  ///< each as <name>.pt and state.json "<name>" (average_part.h)
};

/// What an exact resume needs equal of one part: the files and state.json keys `dlrun
/// check-resume` compares between two checkpoints of the same step.
struct PartLayout {
  std::string name;   ///< DLRUN_FAULT=forget_on_resume's name: weights, optimizer, ..., ema, swa
  std::string label;  ///< for a person: "weights", "RNG", "data position", "EMA"
  std::vector<std::string> tensor_files;  ///< stems (model -> model.pt); "rng-rank" is every rank's
  std::vector<std::string> keys;          ///< state.json keys
  bool optional = false;  ///< compared only when either checkpoint has one of them
};

/// Every kind of part, in order (those a run does not keep included): the one list.
std::vector<PartLayout> part_layouts();

class CheckpointParts {
 public:
  explicit CheckpointParts(const LiveState& live);
  ~CheckpointParts();
  /// Every rank: each part's gather() (collectives), in order. Then, on the leader, the host
  /// copy of every part with the config and versions: what training stalls for. The other
  /// ranks get nullopt.
  std::optional<ckpt::Snapshot> snapshot();
  /// The survivors' writer after a lost peer (dist.peer_timeout_s), whichever rank it is: the
  /// snapshot of what this rank holds, without the collectives (the group is gone).
  ckpt::Snapshot snapshot_alone();
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
  /// Each part with its name, which DLRUN_FAULT=forget_on_resume takes (PartLayout::name).
  std::vector<std::pair<std::string, std::unique_ptr<ckpt::Part>>> parts_;
};

}  // namespace dlrun::train
