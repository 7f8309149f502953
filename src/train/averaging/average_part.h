// The checkpoint part of one weight average (checkpoint/part.h): its tensors as <name>.pt and
// its state.json "<name>", the same for every average. A checkpoint without them (the average's
// setting added when resuming, or written before anything was averaged) is the average's to
// handle (WeightAverage::not_in_checkpoint). Registered after the model's part: an average
// that restarts from the weights takes the restored ones.
#pragma once

#include <torch/torch.h>

#include "checkpoint/part.h"
#include "distributed/replicas.h"
#include "train/averaging/weight_average.h"

namespace dlrun::train {

class AveragePart : public ckpt::Part {
 public:
  /// `average`, `replicas` outlive this; `device`: where the average lives (a CUDA copy is pinned).
  AveragePart(WeightAverage& average, dist::Replicas& replicas, const torch::Device& device);
  void gather() override;
  void save(ckpt::Snapshot& snap) override;
  void load(const ckpt::Snapshot& snap) override;

 private:
  WeightAverage& average_;
  dist::Replicas& replicas_;
  torch::Device device_;
};

}  // namespace dlrun::train
