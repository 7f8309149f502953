// train.micro_batch: auto -- a step that runs out of device memory is redone on the same samples
// with each micro-batch cut into twice as many pieces, again until it fits. A piece's loss
// counts by its share of its micro-batch, so a step cut in two computes what train.grad_accum x 2
// would (bitwise in float64 for a world of one). The BatchNorm buffers and the RNG are put back
// before the redo, so the failed attempt leaves no trace. With a process group every rank agrees
// after each step's backward whether any rank ran out (then all cut further: the finest split
// any rank needed). The split is kept for the rest of the run and checkpointed (MicroBatchPart,
// train/state/parts.cpp). A step that does not fit with one sample per piece is exit 1, naming
// the splits tried.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "config/options.h"
#include "data/loader.h"
#include "models/model.h"

namespace dlrun::train {

class MicroBatchSplit {
 public:
  explicit MicroBatchSplit(MicroBatch mode) : auto_(mode == MicroBatch::kAuto) {}
  /// train.micro_batch: auto.
  bool automatic() const { return auto_; }
  /// The pieces each micro-batch is cut into (1: whole).
  int64_t split() const { return split_; }
  /// A checkpoint's split. A micro-batch is never cut finer than into single samples: the split
  /// is clamped to its size at the next step.
  void set_split(int64_t split) { split_ = std::max<int64_t>(1, split); }
  /// The pieces a micro-batch of `samples` is cut into now.
  int64_t pieces(int64_t samples) const { return std::min(split_, std::max<int64_t>(samples, 1)); }

  /// One try at the forward and backward passes of a step: returns its loss sum (device).
  using Attempt = std::function<torch::Tensor(int attempt)>;
  /// Runs `attempt` (0 first) until no rank runs out of memory, and returns the loss sum of the
  /// one that fitted. `any_rank` answers whether the flag is true on any rank (a collective: every
  /// rank calls it once per try). Between tries: `model`'s buffers and the RNG of `device` put
  /// back, `optim`'s gradients dropped and the allocator's cache freed, the split doubled.
  /// `step` and `micro` name the step in the messages.
  torch::Tensor fit(const std::vector<data::Batch>& micro, int64_t step, models::Model& model,
                    torch::optim::Optimizer& optim, const torch::Device& device, const Attempt& attempt,
                    const std::function<bool(bool)>& any_rank);

 private:
  bool auto_;
  int64_t split_ = 1;
};

}  // namespace dlrun::train
