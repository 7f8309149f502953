// How a step meets the other replicas of the model: the gradients averaged during the backward
// of the micro-batch that ends the step (c10d's Reducer, dist::GradSync; the earlier
// micro-batches' backward stays local: DDP's no_sync), rank 0's BatchNorm buffers before the
// step's first forward (without dist.sync_bn), and the flags every rank must agree on within a
// step. For a world of one every call answers locally, so the step has no "with a group or
// without" branches. The fault-tolerance work (a step abandoned mid-collective) is this one's.
#pragma once

#include <torch/torch.h>

#include <utility>
#include <vector>

#include "distributed/group.h"
#include "distributed/replicas.h"

namespace dlrun::train {

class StepSync {
 public:
  /// From now on the step is one replica of a group (dist::Replicas::replicate).
  void connect(dist::StepReplication r) { r_ = std::move(r); }
  bool distributed() const { return r_.grads != nullptr; }
  /// Before the step's first forward.
  void before_step() const {
    if (r_.before_step) r_.before_step();
  }
  /// Before the backward that ends the step: its gradients are averaged during it.
  void before_last_backward(const torch::Tensor& loss) const {
    if (r_.grads) r_.grads->prepare(loss);
  }
  /// A boolean device flag (0-dim), true on every rank when it is on any.
  torch::Tensor any_rank(const torch::Tensor& flag) const { return r_.grads ? r_.grads->any_rank(flag) : flag; }
  /// A host flag, true on every rank when it is on any (one read of a device flag on `device`).
  bool any_rank(bool flag, const torch::Device& device) const {
    if (!r_.grads) return flag;
    return r_.grads->any_rank(torch::full({}, flag ? 1 : 0, torch::TensorOptions().device(device))).item<bool>();
  }
  /// Before the update: a lost peer ends the step here, the update not applied (GradSync::settle).
  void before_update(const torch::Device& device) const {
    if (r_.grads) r_.grads->settle(device);
  }
  /// The mean over ranks of `grads`, now, in place (a backward that ran without
  /// before_last_backward()).
  void average(const std::vector<torch::Tensor>& grads) const {
    if (r_.grads) r_.grads->average(grads);
  }

 private:
  dist::StepReplication r_;
};

}  // namespace dlrun::train
