// train.cuda_graphs: after kGraphWarmupSteps eager steps the whole step (forward, loss,
// backward, unscale, clip, optimizer, scaler and the hooks' updates) is captured into one CUDA
// graph and replayed from then on, the batch copied into static input buffers. What a replay
// must read anew each step lives in device memory at fixed addresses: the learning rate
// (use_device_lr, optim.h) and the hooks' values (StepHook::prepare_capture). A batch of another
// shape (the last, ragged one of an epoch) runs eagerly; a capture that fails falls back to eager
// with its reason. cuda_graph_obstacle() is the one list of what keeps a run eager.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/options.h"
#include "data/loader.h"
#include "train/step/step_result.h"
#include "train/step/step_timer.h"

namespace dlrun::train {

/// Why train.cuda_graphs cannot capture the step of a run with `cfg` on `device`, or "" when it
/// can. `distributed`: the run has a process group (its all-reduce runs outside any graph).
std::string cuda_graph_obstacle(const Config& cfg, const torch::Device& device, bool distributed);

/// Eager steps before the capture: cuDNN's autotuning, lazily created optimizer state and the
/// allocator's first blocks happen there, as torch.cuda.graphs asks (on a side stream).
constexpr int kGraphWarmupSteps = 3;

class CapturedStep {
 public:
  /// A step on `device` (CUDA).
  explicit CapturedStep(const torch::Device& device);
  ~CapturedStep();
  /// The step's device work for a list of micro-batches.
  using Body = std::function<StepResult(const std::vector<data::Batch>&)>;
  /// One step: eagerly on the side stream while warming up, then the capture of `body` and its
  /// first replay, then replays; `timer` is off while capturing. After a failed capture, and for
  /// a batch of another shape, `body` eagerly.
  StepResult run(const std::vector<data::Batch>& micro, const Body& body, StepTimer& timer);
  /// Whether run() replays a captured graph now.
  bool captured() const;

 private:
  struct Graph;
  std::unique_ptr<Graph> graph_;  ///< null after a failed capture: eager from then on
  torch::Device device_;
};

}  // namespace dlrun::train
