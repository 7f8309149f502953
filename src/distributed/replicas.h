// The copies of the model that train together: a process group of several ranks, or a world of
// one. Every question the loop asks about the other ranks (did any rank ask to stop? rank 0's
// checkpoint, parameters and buffers; every rank's RNG) goes through here, and a world of one
// answers it locally, so the loop has no "with a group / without one" branches. Each call that
// talks to the group is a collective: every rank makes it at the same point.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "config/options.h"
#include "models/model.h"

namespace dlrun::dist {

class Group;
class GradSync;

/// What a step needs to be one replica of the group (Replicas::replicate): the gradients'
/// averaging, and what runs before each step's first forward (rank 0's BatchNorm buffers).
/// Empty for a world of one.
struct StepReplication {
  GradSync* grads = nullptr;
  std::function<void()> before_step;
};

class Replicas {
 public:
  /// `group`: the run's process group, or null for a world of one. `device`: this rank's.
  Replicas(Group* group, const Config& cfg, const torch::Device& device);
  ~Replicas();

  bool distributed() const { return group_ != nullptr; }
  int rank() const;
  int size() const;
  /// Rank 0: the one process that writes the run directory, the metrics and the checkpoints.
  bool leader() const { return rank() == 0; }
  Group* group() const { return group_; }

  /// Whether `flag` is true on any rank (a signal or a notice seen by one rank stops all).
  bool any(bool flag);
  /// The element-wise sum over ranks, in place.
  void all_reduce(torch::Tensor& t);
  /// Every rank's `t`, in rank order.
  std::vector<torch::Tensor> all_gather(const torch::Tensor& t);
  /// Every rank's `text`, in rank order (its length, then the bytes, through all_gather).
  std::vector<std::string> gather_text(const std::string& text);
  /// Run `commit` (the stop's save: its collectives on every rank, the commit on the leader),
  /// then agree_committed() on its outcome; when it throws, the leader tells the others why and
  /// waits for them to read it (outcome_read) before the exception goes on.
  void commit_together(int64_t step, const std::function<void()>& commit);
  /// The checkpoint of `step` that ends a stop or the run, agreed on every rank: the leader tells
  /// the others through the store whether it committed it (`failure` empty) or not (why); each
  /// other rank returns when it did and throws dlrun::Error (exit 1) naming rank 0's failure
  /// when it did not. So every rank exits with one code -- 75 only when the checkpoint is
  /// committed -- and a scheduler that reads any of them (srun: the highest) reads the truth.
  /// A rank other than 0 passing its own `failure` returns at once (its exception goes on).
  void agree_committed(int64_t step, const std::string& failure);
  /// Leader, before it exits: wait (up to min(30 s, dist.timeout_s)) until every other rank has
  /// read agree_committed's outcome -- rank 0 hosts the store, which goes with it.
  void outcome_read(int64_t step);
  /// Rank 0's checkpoint to resume from (or none) on every rank: the metadata through the
  /// rendezvous store, the tensors broadcast. Only rank 0 reads the run directory and remote
  /// storage, so the other hosts need no shared filesystem.
  void share_checkpoint(std::optional<ckpt::Loaded>& from);
  /// Rank 0's BatchNorm running statistics on every rank, unless dist.sync_bn keeps them equal
  /// already (DDP's broadcast_buffers): before evaluations and saves.
  void sync_buffers(torch::nn::Module& model);
  /// dist.sync_bn: `model`'s BatchNorm layers normalise with the statistics of every rank's
  /// batch (nothing for a world of one; a warning when the model has no BatchNorm).
  void sync_batchnorm(models::Model& model);
  /// Make `model` one replica of the group: rank 0's parameters and buffers on every rank
  /// (DDP's initial broadcast); returns what its step needs: the gradients averaged across
  /// ranks by c10d's Reducer, and without synchronised BatchNorm rank 0's buffers before every
  /// step. Nothing for a world of one.
  StepReplication replicate(models::Model& model);

  /// After a lost peer (dist.peer_timeout_s), before the survivors' rescue: whether this rank's
  /// BatchNorm buffers are what rank 0 held at the last step boundary -- what a checkpoint of
  /// that step holds. `mid_step`: the loss ended a step under way, whose forward may have moved
  /// them; they are put back as the step found them (after rank 0's broadcast, copied then).
  /// True without buffers, on rank 0, and with dist.sync_bn (every rank holds the same).
  bool buffers_at_boundary(bool mid_step);

 private:
  Group* group_;
  const Config& cfg_;
  torch::Device device_;
  std::unique_ptr<GradSync> grad_sync_;
  models::Model* model_ = nullptr;  ///< replicate()'s
  /// The buffers as the step under way found them (with dist.peer_timeout_s): a copy taken
  /// after rank 0's broadcast, `copied` when the broadcast of the step under way completed.
  std::vector<torch::Tensor> step_start_;
  bool copied_ = false;
};

}  // namespace dlrun::dist
