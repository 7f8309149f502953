// Synchronised BatchNorm (dist.sync_bn): in training mode, the batch statistics of every
// BatchNorm are those of the global batch — all ranks' samples — instead of each rank's
// slice, with the matching backward, as torch.nn.SyncBatchNorm does. For the small per-GPU
// batches where per-rank statistics are too noisy; eval mode uses the running statistics as
// usual.
#pragma once

#include <memory>

#include "distributed/group.h"
#include "models/batchnorm.h"

namespace dlrun::dist {

/// The models::BatchNormSync of a process group. Each training-mode forward all-gathers the
/// per-rank (mean, biased variance, count) per channel — combined with Chan's parallel
/// formula, stable for large N·H·W — and each backward all-reduces the two per-channel sums
/// of the input gradient; the weight and bias gradients stay local (DDP averages them).
std::shared_ptr<models::BatchNormSync> sync_batchnorm(Group& group);

}  // namespace dlrun::dist
