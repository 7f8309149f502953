// What a training step needs in memory, found by running one: the peak of bytes held by tensors
// while a step (forward, loss, backward, SGD update) of synthetic images runs, and its time; on
// CUDA also the largest batch whose step fits, searched by running steps until one runs out of
// memory. `dlrun bench memory` reports these. The largest-batch search and train.micro_batch:
// auto (the step runner's out-of-memory recovery) share what tells and undoes an out-of-memory
// error (is_out_of_memory, release_after_out_of_memory), which is why they live with the
// training code rather than in the command.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "config/options.h"
#include "data/loader.h"
#include "models/model.h"
#include "train/step/step.h"

namespace dlrun::train {

/// The step to measure (`dlrun bench memory`'s flags).
struct StepMemoryOptions {
  std::string model = "resnet50";  ///< model.name (3 input channels, 1000 classes)
  int64_t batch = 32;              ///< images per step
  int64_t image_size = 224;        ///< side of the square images
  ActivationCheckpointing checkpointing = ActivationCheckpointing::kNone;
  std::optional<AmpDtype> amp;     ///< the autocast dtype; nullopt: amp off
  bool channels_last = false;
  std::string device = "auto";     ///< as run.device
  int repeat = 5;                  ///< timed steps after the measured one
  bool max_batch = false;          ///< CUDA: also search the largest batch that fits
};

/// What the measured step cost.
struct StepMemory {
  torch::Device device = torch::kCPU;
  /// Whether peak_bytes comes from the CUDA caching allocator (else from the counting CPU
  /// allocator, which does not see oneDNN's own scratch buffers: they are not tensors).
  bool cuda = false;
  std::string peak_measure;   ///< what peak_bytes counts, in words
  /// The peak of bytes held by tensors during one step, over what they held before it; the
  /// step measured is the second, after a first one made the optimizer state.
  double peak_bytes = 0;
  double first_step_s = 0;    ///< the first step's seconds (optimizer state, cuDNN's tuning)
  /// The median seconds of the `repeat` timed steps; the measured step's when repeat is 0.
  double step_s = 0;
  /// models::recomputations() after the timed steps: recomputed segments in this process.
  uint64_t segments_recomputed = 0;
  std::optional<int64_t> largest_batch;  ///< with max_batch, on CUDA only
};

/// A model with the options' settings on their device, its SGD optimizer (lr 0.01, momentum
/// 0.9) and a StepRunner: what the measurements step.
class StepProbe {
 public:
  /// Resolves the device (train::place) and builds the model for `o.image_size` images.
  explicit StepProbe(const StepMemoryOptions& o);
  StepProbe(const StepProbe&) = delete;
  StepProbe& operator=(const StepProbe&) = delete;

  const torch::Device& device() const { return device_; }
  /// `n` synthetic images (3 x side x side, normal noise) and labels in [0, 1000), drawn from a
  /// CPU generator seeded 1, on the device.
  data::Batch batch(int64_t n, int64_t side) const;
  /// One step on `b` at learning rate 0.01; its seconds, device work included (the loss is read).
  double step(const data::Batch& b);
#ifdef DLRUN_TORCH_HAS_CUDA
  /// Whether a step of `n` images of side `side` fits on the GPU: runs one. When it runs out of
  /// memory (is_out_of_memory), the gradients and the caching allocator's free blocks are
  /// released and the answer is false; any other error is rethrown.
  bool fits(int64_t n, int64_t side);
#endif

 private:
  Config cfg_;
  torch::Device device_ = torch::kCPU;
  std::shared_ptr<models::Model> model_;
  std::unique_ptr<torch::optim::Optimizer> optim_;
  std::unique_ptr<StepRunner> runner_;
};

/// Whether `e` says the device ran out of memory. The caching allocator throws
/// c10::OutOfMemoryError (as does DLRUN_FAULT=oom_at_step), but near the limit cuDNN and cuBLAS
/// fail on their own workspace allocations with plain errors ("unable to find an engine",
/// CUBLAS_STATUS_ALLOC_FAILED, "CUDA error: out of memory"); the CPU allocator says "not enough
/// memory". train.micro_batch: auto and the largest-batch search below both ask it.
bool is_out_of_memory(const c10::Error& e);

/// After an out-of-memory error in a step: the gradients dropped and (CUDA) the caching
/// allocator's free blocks given back, so that the next try starts from what the weights and the
/// optimizer state hold.
void release_after_out_of_memory(torch::optim::Optimizer& optim, const torch::Device& device);

#ifdef DLRUN_TORCH_HAS_CUDA
/// The largest batch of `side` x `side` images whose step fits on the GPU: doubling from
/// `start` (up to 2^20) while steps fit, then bisection between the last batch that fitted (0
/// when none did) and the first that did not, down to a granularity of 8 (or 1 below 64).
/// cuDNN's autotuning is off while it searches: each new batch size would tune every
/// convolution again, and the algorithms it picks depend on the memory that happens to be free.
int64_t largest_batch(StepProbe& probe, int64_t start, int64_t side);
#endif

/// Measure one step as `o` says: a first step (optimizer state, cuDNN's tuning), the measured
/// step with its peak memory, `o.repeat` timed steps, then (o.max_batch, CUDA only) the
/// largest-batch search. Off CUDA, installs the counting CPU allocator for good (the first
/// call; later calls reuse it).
StepMemory measure_step_memory(const StepMemoryOptions& o);

}  // namespace dlrun::train
