// What the ranks of a multi-process run exchange outside the gradient all-reduce: rank 0's
// checkpoint at a resume, every rank's RNG state at a save, rank 0's parameters and buffers.
// Each function is a collective: every rank calls it at the same point.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "dist/group.h"

namespace dlrun::train {

/// Rank 0's checkpoint to resume from (or none) on every rank: the metadata through the
/// rendezvous store, the tensors broadcast. Only rank 0 reads the run directory and remote
/// storage, so the other hosts need no shared filesystem.
void share_checkpoint(dist::Group& group, std::optional<ckpt::Loaded>& from);

/// Every rank's RNG states (rng_states of its device), in rank order.
std::vector<ckpt::TensorDict> gather_rng_states(dist::Group& group, const torch::Device& device);

/// Rank 0's parameters and buffers (`buffers_only`: its buffers) on every rank, as DDP does
/// at start and, for BatchNorm running statistics, before each step.
void broadcast_module(dist::Group& group, torch::nn::Module& module, bool buffers_only = false);

}  // namespace dlrun::train
