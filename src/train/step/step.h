// One optimizer step: forward, loss, backward over the micro-batches of gradient accumulation,
// unscale and the non-finite check, gradient clipping, the optimizer update, the loss-scale
// update and the riders' updates. The runner only orders the step; each concern is a
// collaborator with its own state:
//   Precision (precision.h)      autocast, the loss scaler, the non-finite and skip flags
//   MicroBatchSplit (micro_batch.h)  train.micro_batch: auto, the out-of-memory redo
//   CapturedStep (graph.h)       train.cuda_graphs: warm-up, capture, replay
//   StepSync (sync.h)            the other replicas: gradient averaging, agreed flags
//   StepTimer (step_timer.h)     forward, backward and optimizer times
//   StepHook (step_hook.h)       what rides along the step (the weights' moving average)
//   mixing.h                     MixUp and CutMix of each micro-batch, and its soft targets
// The learning rate is set from the host (optim.h); everything else is device work: the step
// returns device tensors and reads nothing back. Whether an update is skipped (fp16 overflow, or
// train.nonfinite: skip) is decided on the device: the fused optimizers take the flag, the loss
// scaler updates from it.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "config/options.h"
#include "data/loader.h"
#include "models/model.h"
#include "train/step/graph.h"
#include "train/step/micro_batch.h"
#include "train/step/precision.h"
#include "train/step/step_hook.h"
#include "train/step/step_result.h"
#include "train/step/step_timer.h"
#include "train/step/sync.h"

namespace dlrun::train {

class StepRunner {
 public:
  /// `hooks`: what rides along every step (they outlive this), in order.
  StepRunner(const TrainOptions& train, const AmpOptions& amp, models::Model& model, torch::optim::Optimizer& optim,
             const torch::Device& device, std::vector<StepHook*> hooks = {});
  ~StepRunner();
  /// Capture and replay the step from the (kGraphWarmupSteps+1)-th run() on (train.cuda_graphs;
  /// only where cuda_graph_obstacle() is ""). Moves the learning rate and the hooks' values to
  /// the device. Exit 2 off CUDA.
  void use_cuda_graphs();
  /// Whether run() replays a captured graph now.
  bool graph_captured() const { return graph_ && graph_->captured(); }
  /// One optimizer step (the `step`-th of the run: fault injection and the hooks' schedules)
  /// over `micro` (train.grad_accum micro-batches) at learning rate `lr`.
  StepResult run(const std::vector<data::Batch>& micro, double lr, int64_t step = 0);
  /// run() ended by a lost peer, before its optimizer update (a step's collectives all come
  /// before it): the hooks forget the step (StepHook::abandon_step).
  void abandon_step();
  /// Multi-process: the step becomes one replica of the group (StepSync).
  void distribute(dist::StepReplication r) { sync_.connect(std::move(r)); }
  /// Mix each micro-batch (train.mixup_alpha, train.cutmix_alpha: mixing.h) with draws keyed by
  /// (seed, step, micro-batch, rank), into targets over `classes`.
  void use_mixing(uint64_t seed, int64_t rank, int64_t classes) {
    mix_ = Mixing{true, seed, rank, classes};
  }
  /// Why a step whose `skipped` is true was skipped (fixed by the configuration).
  std::string skip_reason() const { return precision_.skip_reason(); }
  /// Seconds of forward, backward and optimizer over the eager steps since the last call
  /// (steps replayed from a CUDA graph are not split: zeros for them). CUDA: call it after a
  /// result of the last step was read (it waits for that step's events).
  PhaseTimes take_phase_times() { return timer_.take(); }
  Precision& precision() { return precision_; }
  const Precision& precision() const { return precision_; }
  MicroBatchSplit& micro_batches() { return split_; }
  const MicroBatchSplit& micro_batches() const { return split_; }

 private:
  /// The step's device work (what a CUDA graph captures).
  StepResult body(const std::vector<data::Batch>& micro);
  /// The start of a try at a step: timing, gradients cleared, the replicas' before_step; the
  /// loss sum to fill.
  torch::Tensor begin_attempt();
  /// The trainable parameters' gradients that are defined.
  std::vector<torch::Tensor> grads() const;
  /// The forward and backward passes of a step into the gradients, each micro-batch in the
  /// split's pieces; adds the loss (a mean of the micro-batches') to `loss_sum`. attempt: 0 for
  /// the first.
  void accumulate(const std::vector<data::Batch>& micro, torch::Tensor& loss_sum, int attempt);
  /// After the backward: unscale, the non-finite check, clipping, the optimizer and scaler
  /// updates, the hooks.
  StepResult update(torch::Tensor& loss_sum, size_t micro_batches);
  void clip(const std::vector<torch::Tensor>& grads, const std::vector<torch::Tensor>& known_norms) const;

  TrainOptions train_;
  models::Model& model_;
  torch::optim::Optimizer& optim_;
  torch::Device device_;
  Precision precision_;
  MicroBatchSplit split_;
  StepSync sync_;
  std::unique_ptr<CapturedStep> graph_;  ///< null: eager
  std::vector<StepHook*> hooks_;
  StepTimer timer_;
  std::vector<torch::Tensor> params_;  ///< trainable parameters
  int64_t step_ = 0;                   ///< the step run() is making (fault injection)
  struct Mixing {
    bool on = false;
    uint64_t seed = 0;
    int64_t rank = 0, classes = 0;
  } mix_;
};

}  // namespace dlrun::train
