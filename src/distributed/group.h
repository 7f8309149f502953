// The process group of a multi-process run: rendezvous through c10d's TCPStore, collectives
// through c10d's ProcessGroupGloo (CPU tensors) or ProcessGroupNCCL (CUDA tensors), and
// gradient averaging through c10d::Reducer — PyTorch DDP's own engine, reused rather than
// rewritten (docs/distributed.md, "Engine"). The c10d types stay inside group.cpp: this
// header is what the trainer, the step runner and synchronised BatchNorm see.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/options.h"
#include "distributed/heartbeat.h"
#include "world/world.h"

namespace dlrun::dist {

enum class Reduce { kSum, kMax, kMin };

/// Thrown by Group::connect when a stop request (SIGTERM, SIGUSR1, a notice) arrives while this
/// rank waits for the rendezvous store or for the other ranks: nothing has been trained, and a
/// peer stopped by the same request would never arrive. `dlrun train` exits 75.
class StoppedDuringRendezvous : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Thrown where this rank waited for a collective that a lost peer ended (dist.peer_timeout_s:
/// a silent heartbeat, a store that does not answer, a peer's connection closed): the survivors
/// save what they hold instead of failing (rescue.h, and the trainer's rescue).
class PeerLost : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Group {
 public:
  /// Meet the other ranks at world.master_addr:master_port (rank 0 hosts the store unless
  /// torchrun's agent does) and open the backend: NCCL when `device` is CUDA (dist.backend
  /// auto|nccl), gloo otherwise. Ranks that do not arrive within dist.timeout_s are named
  /// in the error (exit 1); dist.timeout_s also bounds every collective.
  static std::unique_ptr<Group> connect(const World& world, const DistOptions& opts, const torch::Device& device);
  /// Closes the process group: a shutdown after a clean run; an abort when destroyed while an
  /// exception unwinds or after a failure (a failed collective, report_failure), so that the
  /// exit never waits on a collective a dead peer left pending. The log says which.
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  int rank() const;
  int size() const;
  const World& world() const;
  /// "gloo" or "nccl".
  const std::string& backend() const;
  /// One line for the start-up log: backend (and NCCL version), world layout, this rank's device.
  std::string describe() const;

  /// Collectives; tensors on another device than the backend's are copied there and back.
  /// Each throws dlrun::Error (exit 1) on a timeout or a lost peer, naming a rank that
  /// reported its own failure (report_failure) when one did.
  void all_reduce(torch::Tensor& t, Reduce op = Reduce::kSum);
  /// Rank 0's values into `tensors` on every rank (coalesced into large messages).
  void broadcast(std::vector<torch::Tensor>& tensors);
  /// Every rank's `t` (same shape and dtype everywhere), in rank order.
  std::vector<torch::Tensor> all_gather(const torch::Tensor& t);
  /// Whether `flag` is true on any rank (an all-reduce MAX).
  bool any(bool flag);
  /// Rank 0's `text` on every rank (through the store; for small texts: configs, manifests).
  std::string share(const std::string& key, const std::string& text);

  /// share(), for something rank 0 does alone that may take long (a stop's local commit): the
  /// other ranks wait as long as rank 0's heartbeat goes on (up to an hour, at least
  /// dist.timeout_s), not a flat dist.timeout_s; a rank 0 silent for 3 s fails the wait (exit 1).
  std::string share_when_ready(const std::string& key, const std::string& text);
  /// Ranks other than 0: say in the store that this rank has read `key` (share()). Never throws.
  void acknowledge(const std::string& key) noexcept;
  /// Rank 0: wait up to `seconds` until every other rank has acknowledged `key`; the ranks that
  /// did not, in order (rank 0 hosts the store: it must not exit before they have read). Never
  /// throws.
  std::vector<int> await_acknowledged(const std::string& key, double seconds) noexcept;

  /// After a failure: the other ranks that went silent -- whose heartbeat (every rank adds to a
  /// counter in the store each second, on a connection of its own) did not move in 3 s -- named
  /// with their host and pid, or that the store itself does not answer; "" when every rank is
  /// alive. Takes 3 s. Never throws.
  std::string silent_ranks() noexcept;

  /// Record this rank's failure in the store, so the others name it in their error instead of
  /// a bare "connection closed" (and close this group by abort). Never throws.
  void report_failure(const std::string& what) noexcept;

  /// The first peer loss this rank learned of (its heartbeat's watch, another rank's record of
  /// one, a collective that failed under it), or nullopt. Once there is one, every collective
  /// waiting or started ends with PeerLost.
  std::optional<Loss> lost() const;

  struct Impl;

 private:
  explicit Group(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class GradSync;
  friend class Rescue;
};

/// Gradient averaging for one model, PyTorch DDP-style: buckets of dist.bucket_mb (the
/// first 1 MB) all-reduced by c10d::Reducer as backward produces them, overlapping the
/// communication with the rest of backward; after backward every rank holds the same mean
/// gradients. Every parameter in `params` must receive a gradient in every step.
class GradSync {
 public:
  GradSync(Group& group, std::vector<torch::Tensor> params, double bucket_mb);
  ~GradSync();
  /// Before the backward of the micro-batch that ends a step: its gradients (accumulated
  /// with the earlier micro-batches', DDP's no_sync) are averaged during that backward. Not
  /// called for the other micro-batches, whose backward stays local.
  void prepare(const torch::Tensor& loss);
  size_t buckets() const;
  /// Before the optimizer's update (dist.peer_timeout_s): throws PeerLost when a peer is lost. With
  /// NCCL it first waits, on the host, for what the device has queued (the gradients' all-reduce),
  /// so that an update never runs on gradients a loss cut short: the state stays the boundary's.
  void settle(const torch::Device& device);
  /// A boolean flag (0-dim, on the model's device) true on every rank when it is on any: an
  /// all-reduce MAX (with NCCL queued on the device like the gradients'; with gloo and a CUDA
  /// model a copy to the host and back, as gloo's gradients are).
  torch::Tensor any_rank(const torch::Tensor& flag);
  /// The mean over ranks of `grads`, now, in place: one all-reduce per tensor. For a
  /// step whose backward ran without prepare() (train.micro_batch: auto), after every rank has
  /// agreed that its backward succeeded.
  void average(const std::vector<torch::Tensor>& grads);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace dlrun::dist
