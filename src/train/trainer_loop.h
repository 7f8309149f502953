// The training loop's class, for the files that define its members: trainer.cpp (the loop) and
// trainer_rescue.cpp (a lost peer). Nothing else includes it: train/trainer.h is the interface.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <optional>
#include <utility>
#include "base/build_info.h"
#include "base/clock.h"
#include "base/fault.h"
#include "base/fsutil.h"
#include "base/log.h"
#include "checkpoint/rng.h"
#include "config/loader.h"
#include "data/shard_store.h"
#include "distributed/group.h"
#include "distributed/replicas.h"
#include "distributed/rescue.h"
#include "metrics/sink.h"
#include "models/fingerprint.h"
#include "preempt/preempt.h"
#include "run/run_dir.h"
#include "run/triggers.h"
#include "train/components.h"
#include "train/observe/bad_samples.h"
#include "train/observe/evaluations.h"
#include "train/observe/goodput.h"
#include "train/observe/outputs.h"
#include "train/observe/profiler.h"
#include "train/observe/step_meter.h"
#include "train/observe/summary.h"
#include "train/state/checkpointer.h"
#include "train/state/parts.h"
#include "train/state/resume.h"
#include "train/start.h"
#include "train/step/mixing.h"
#include "train/step/step.h"
#include "train/trainer.h"

namespace dlrun::train {


inline constexpr int kInterrupted = static_cast<int>(ExitCode::kInterrupted);

// In a multi-process run every rank runs a Trainer in lockstep: the same steps, the same
// decisions at each step boundary (the ones that depend on a rank's own clock or signals are
// agreed by a collective), the same collectives in the same order. Rank 0 (the leader) alone
// writes the run directory, the metrics and the checkpoints, and talks to remote storage.
class Trainer {
 public:
  Trainer(const Config& cfg, RunDir dir, const Placement& placement, dist::Group* group)
      : cfg_(cfg),
        dir_(std::move(dir)),
        endpoint_(open_endpoint(cfg_, placement)),  // a port in use is refused before the data is read
        c_(build_components(cfg_, placement, Purpose::kTrain)),
        runner_(cfg_.train, cfg_.amp, *c_.model, *c_.optimizer, c_.placement.device, c_.averages.hooks()),
        profiler_(cfg_.profile, c_.placement.device,
                  cfg_.profile.path.empty() ? dir_.path() + "/profile" : cfg_.profile.path, c_.placement.rank),
        replicas_(group, cfg_, c_.placement.device),
        optimizers_(cfg_.optim, *c_.optimizer, *c_.model),
        meter_(cfg_, c_.placement.device, runner_, st_, report_, replicas_.leader()),
        account_(cfg_.run.price_per_hour, dir_.metrics_jsonl()),
        ckpt_(cfg_, dir_.checkpoints(), report_, replicas_, mono_now),
        evals_(cfg_, *c_.model, c_.eval_loader.get(), c_.val_loader.get(), replicas_, report_, c_.averages.all()),
        parts_({cfg_, *c_.model, optimizers_, runner_.precision().scaler(), runner_.micro_batches(), st_,
                *c_.train_loader, replicas_, c_.total_steps, c_.placement.device, &evals_.monitor(),
                dataset_record(cfg_, c_.data.info), c_.averages.all()}),
        bad_samples_(cfg_.data, st_, report_) {
    st_.last_step = c_.total_steps;
    if (mixing(cfg_.train))
      runner_.use_mixing(static_cast<uint64_t>(cfg_.run.seed), c_.placement.rank, cfg_.model.num_classes);
    if (cfg_.train.cuda_graphs) {
      const std::string why = cuda_graph_obstacle(cfg_, c_.placement.device, replicas_.distributed());
      if (why.empty()) runner_.use_cuda_graphs();
      else log0::warn("train.cuda_graphs: the step runs eagerly: {}", why);
    }
    replicas_.sync_batchnorm(*c_.model);
    log0::info("model {}: {} parameters; data {}: {}; {} steps/epoch, {} steps on {}", cfg_.model.name,
               models::num_parameters(*c_.model), cfg_.data.name, c_.data.describe(), c_.steps_per_epoch,
               c_.total_steps, c_.placement.device.str());
    log0::info("{}", describe_fast_paths(cfg_, c_.placement.device));
  }

  /// Load what --resume asks for into the parts (refusals: exit 2). Multi-process: `plan` is
  /// rank 0's (the others pass an empty one and receive its checkpoint), then every rank
  /// starts from rank 0's parameters and buffers, and the gradient all-reduce is set up.
  void resume(ResumePlan plan) {
    replicas_.share_checkpoint(plan.from);
    if (plan.from) {
      parts_.restore(plan.from->snapshot);
      ckpt_.resumed(plan.from->path, st_.step);
      plan.from.reset();  // the snapshot's host tensors are released here
      const data::Position at = c_.train_loader->position();
      log0::info("resumed from {} at step {} (epoch {}, sample {})", ckpt_.resumed_from(), st_.step, at.epoch,
                 at.cursor);
      if (evals_.monitor().stopped()) {  // ended by train.early_stop: only the end is left
        st_.last_step = st_.step;
        nlohmann::json stop = evals_.monitor().early_stop_summary();
        if (!stop.is_object()) stop = nlohmann::json::object();  // (train.early_stop since turned off)
        log0::info("train.early_stop ended this run at step {}: {} had not improved on {} (step {}). It stays "
                   "ended, whatever train.early_stop_patience says now; to train on, start a new run from its "
                   "weights (model.init={}/checkpoints/BEST or a step-N checkpoint, in another --run-dir)",
                   evals_.monitor().stopped_at(), stop.value("metric", std::string("the metric")),
                   stop.value("best", nlohmann::json()).dump(), stop.value("best_step", nlohmann::json()).dump(),
                   dir_.path());
      }
    } else if (replicas_.leader()) {
      parts_.start_fresh();  // model.init: a fresh run only (the others get rank 0's weights)
    } else if (replicas_.distributed()) {
      torch::manual_seed(cfg_.run.seed + static_cast<uint64_t>(replicas_.rank()));  // own dropout draws per rank
    }
    runner_.distribute(replicas_.replicate(*c_.model));
    if (ckpt_.resumed_from().empty()) c_.averages.restart();  // a fresh start: the weights every rank has
    plan_ = std::move(plan);
  }

  /// --save-init: the initial weights of a fresh run, written before the run directory is
  /// touched (a bad path is a failed start, not a half-written run).
  void save_init(const std::string& path) const {
    if (path.empty() || !ckpt_.resumed_from().empty()) return;
    DLRUN_CHECK_INPUT(fsutil::is_directory(fsutil::parent_of(path)), "--save-init {}: the directory {} does not exist",
                      path, fsutil::parent_of(path));
    save_weights(*c_.model, path);
  }

  int run();
  ckpt::RemoteStore* remote_store() { return ckpt_.remote(); }
  bool leader() const { return replicas_.leader(); }
  /// After an exception: record it in metrics.jsonl and summary.json when the run directory
  /// is already ours (never throws; before that, the directory stays untouched).
  void record_failure(const std::string& what, const char* status = "failed") noexcept;

 private:
  void begin();
  std::optional<data::Batch> next_batch();
  void step(const std::vector<data::Batch>& micro);
  std::optional<int> at_boundary(bool epoch_end);
  /// Whether any rank was asked to stop; the training samples that did not decode merged with
  /// it when any rank has some. A collective.
  bool any_rank_asked_to_stop();
  bool run_eval();
  bool act_on_verdict();
  void save(SaveReason why, bool sync);
  int stop_and_save();
  std::optional<int> rescue();
  void record_interruption(metrics::Event e, const std::string& status, double since,
                           const Checkpointer::StopUpload& upload, bool read_loss,
                           const nlohmann::json& record_extra = nlohmann::json::object());
  int finish();
  int64_t epoch() const { return c_.train_loader->position().epoch; }
  nlohmann::json summary(const std::string& status);

  const Config& cfg_;
  RunDir dir_;
  std::unique_ptr<metrics::Endpoint> endpoint_;  ///< log.metrics_port's, until begin() hands it to the reporter
  Components c_;
  StepRunner runner_;
  StepProfiler profiler_;
  dist::Replicas replicas_;
  Optimizers optimizers_;
  TrainState st_;
  metrics::Reporter report_;  ///< sinks on the leader only
  StepMeter meter_;
  RunAccount account_;        ///< what the run's wall clock went to (goodput.h)
  Checkpointer ckpt_;
  Evaluations evals_;         ///< periodic and test evaluations, the best checkpoint, early stopping
  CheckpointParts parts_;
  BadSampleTally bad_samples_;  ///< data.on_bad_sample: skip
  ResumePlan plan_;           ///< what begin() still does for the resume: set aside, keep a download, upload
  double start_mono_ = -1;    ///< when begin() ran (-1: the run directory is not ours yet)
  data::Position boundary_;   ///< the loader's position at the last step boundary (a rescue's)
  bool in_step_ = false;      ///< inside StepRunner::run: a loss there leaves the boundary's state
};

}  // namespace dlrun::train
