// One optimizer step: forward, loss, backward over the micro-batches of gradient
// accumulation, unscale and the non-finite check, gradient clipping, the optimizer update and
// the loss-scale update. This is the one place that DDP's no-sync, device-side AMP,
// activation recomputation and CUDA-graph capture touch.
//
// The step is device work: it returns device tensors and reads nothing back. Whether an
// update is skipped (fp16 overflow, or train.nonfinite: skip) is decided on the device: the
// fused optimizers take the flag, the loss scaler updates from it. The learning rate is set
// from the host.
//
// train.micro_batch: auto (out-of-memory recovery): a step whose forward or backward runs out of
// device memory is redone on the same samples with each micro-batch cut into twice as many
// pieces, again until it fits; a piece's loss counts by its share of the micro-batch, so a step
// cut in two computes what train.grad_accum x 2 would (bitwise in float64 for a world of one).
// The BatchNorm buffers and the RNG are put back before the redo, so the failed attempt leaves
// no trace. With a process group every rank agrees after each step's backward whether any rank
// ran out (then all cut further: the finest split any rank needed), and the gradients are
// averaged then, after the backward, instead of during it. The split is kept for the rest of
// the run and checkpointed (train/parts.cpp). A step that does not fit with one sample per piece
// is exit 1, naming the splits tried.
//
// train.ema_decay: the weights' moving average is updated at the end of the step, after the
// optimizer (train/ema.h), decided on the host before the step's device work.
//
// train.cuda_graphs: after kGraphWarmupSteps eager steps the whole step (forward, loss,
// backward, unscale, clip, optimizer, scaler and moving-average updates) is captured into one
// CUDA graph and replayed from then on, the batch copied into static input buffers and the
// learning rate and the average's weight read from device tensors (use_device_lr,
// Ema::use_device_weights). A batch of another shape (the last, ragged one of an
// epoch) runs eagerly; a capture that fails falls back to eager with its reason.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <optional>
#include <vector>

#include "config/options.h"
#include "data/loader.h"
#include "models/model.h"
#include "train/amp.h"
#include "train/step_timer.h"

namespace dlrun::dist {
class GradSync;
}

namespace dlrun::train {

class Ema;

/// Why train.cuda_graphs cannot capture the step of a run with `cfg` on `device`, or "" when it
/// can. `distributed`: the run has a process group (its all-reduce runs outside any graph).
std::string cuda_graph_obstacle(const Config& cfg, const torch::Device& device, bool distributed);

/// Eager steps before the capture: cuDNN's autotuning, lazily created optimizer state and the
/// allocator's first blocks happen there, as torch.cuda.graphs asks (on a side stream).
constexpr int kGraphWarmupSteps = 3;

struct StepResult {
  torch::Tensor loss;       ///< float64 scalar on the device: mean of the micro-batch losses
  torch::Tensor nonfinite;  ///< bool scalar on the device: a non-finite loss or gradient (fp16: loss only)
  /// bool scalar on the device: the update was not applied (fp16 overflow, or
  /// train.nonfinite: skip); undefined when no step can be skipped.
  torch::Tensor skipped;
};

class StepRunner {
 public:
  /// `ema`: the weights' moving average, updated by every step, or null.
  StepRunner(const TrainOptions& train, const AmpOptions& amp, models::Model& model, torch::optim::Optimizer& optim,
             const torch::Device& device, Ema* ema = nullptr);
  ~StepRunner();
  /// Capture and replay the step from the (kGraphWarmupSteps+1)-th run() on (train.cuda_graphs;
  /// only where cuda_graph_obstacle() is ""). Moves the learning rate and the moving average's
  /// weight to the device.
  void use_cuda_graphs();
  /// Whether run() replays a captured graph now.
  bool graph_captured() const;
  /// One optimizer step (the `step`-th of the run: fault injection and the moving average's
  /// schedule) over `micro` (train.grad_accum micro-batches) at learning rate `lr`.
  StepResult run(const std::vector<data::Batch>& micro, double lr, int64_t step = 0);
  /// Multi-process: the gradients of each step are averaged across ranks by `sync` during
  /// the backward of its last micro-batch (the earlier ones accumulate locally: DDP's
  /// no_sync), and `before_step` (the BatchNorm buffer broadcast) runs before its first forward.
  void distribute(dist::GradSync* sync, std::function<void()> before_step);
  /// Why a step whose `skipped` is true was skipped (fixed by the configuration).
  std::string skip_reason() const;
  /// Seconds of forward, backward and optimizer over the eager steps since the last call
  /// (steps replayed from a CUDA graph are not split: zeros for them). CUDA: call it after a
  /// result of the last step was read (it waits for that step's events).
  PhaseTimes take_phase_times() { return timer_.take(); }
  GradScaler& scaler() { return scaler_; }
  const GradScaler& scaler() const { return scaler_; }
  /// train.micro_batch: auto: the pieces each micro-batch is cut into (1: whole).
  int64_t split() const { return split_; }
  /// A checkpoint's split (train.micro_batch: auto). A micro-batch is never cut finer than into
  /// single samples: the split is clamped to its size at the next step.
  void set_split(int64_t split);

 private:
  void clip(const std::vector<torch::Tensor>& grads) const;
  StepResult body(const std::vector<data::Batch>& micro);
  /// The start of a try at a step: timing, gradients cleared, before_step; the loss sum to fill.
  torch::Tensor begin_attempt();
  /// The trainable parameters' gradients that are defined.
  std::vector<torch::Tensor> grads() const;
  /// The forward and backward passes of a step into the gradients, each micro-batch in split_
  /// pieces; adds the loss (a mean of the micro-batches') to `loss_sum`. attempt: 0 for the first.
  void accumulate(const std::vector<data::Batch>& micro, torch::Tensor& loss_sum, int attempt);
  /// body() under train.micro_batch: auto: redone with a finer split while a rank runs out of memory.
  StepResult body_splitting(const std::vector<data::Batch>& micro);
  /// After the backward: unscale, the non-finite check, clipping, the optimizer and scaler updates.
  StepResult update(torch::Tensor& loss_sum, size_t micro_batches);
  StepResult run_graphed(const std::vector<data::Batch>& micro);
  struct Graph;
  std::unique_ptr<Graph> graph_;  ///< null: eager

  TrainOptions train_;
  models::Model& model_;
  torch::optim::Optimizer& optim_;
  torch::Device device_;
  bool autocast_ = false;
  torch::ScalarType autocast_dtype_ = torch::kHalf;
  GradScaler scaler_;
  std::vector<torch::Tensor> params_;  ///< trainable parameters
  dist::GradSync* sync_ = nullptr;
  Ema* ema_ = nullptr;
  int64_t step_ = 0;  ///< the step run() is making (fault injection)
  int64_t split_ = 1;  ///< train.micro_batch: auto: pieces per micro-batch
  std::function<void()> before_step_;
  StepTimer timer_;
};

}  // namespace dlrun::train
