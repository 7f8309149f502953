// The data loader: distributed sampling by a global sample cursor, per-sample augmentation
// seeded by (seed, epoch, sample index), worker threads with prefetch, pinned memory and
// non-blocking copies on CUDA, and a device-resident mode.
//
// Sampling contract (checkpoints rely on it): epoch e visits perm(seed, e) — a permutation
// of [0, N) (identity when data.shuffle is false) — in global batches of data.batch_size
// samples; the last partial batch is dropped. Global step s of the epoch covers positions
// [s*B, (s+1)*B) of the permutation. Within it, micro-batch m (of grad_accum A) of rank r
// (of world W) takes the positions [s*B + (m*W + r)*b, ... + b), b = B / (W*A). The
// "cursor" is the number of samples of the epoch already consumed by all ranks (s*B), so
// a run resumed with another world size continues at the same data.
//
// Repeated augmentation (data.repeated_aug = R > 1, timm's RepeatAugSampler): the epoch's order
// is perm(seed, e) with each sample repeated R times in a row, cut to N; copy k of sample i is
// augmented as sample id i + k*N (loader.cpp), and within a step the micro-batches take the
// positions interleaved (sampler.h SamplerGeometry::interleave): micro-batch m of rank r takes
// s*B + (m*W + r) + j*W*A for j < b, so copies land on different ranks as timm's sampler puts them.
//
// Eval (spec.train = false): no shuffle, no augmentation, batches of data.eval_batch_size
// over [0, N) in order with the last partial batch kept; global eval batch k goes to rank
// k % W (every W-th batch), so steps_per_epoch() counts global batches and each rank's
// next() yields its own. Augmentation randomness is a function of (seed, epoch, dataset
// index) only; batch contents never depend on data.workers or timing.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/options.h"
#include "data/dataset.h"

namespace dlrun::data {

struct LoaderSpec {
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
  int64_t grad_accum = 1;
  torch::Device device = torch::kCPU;  ///< batches are delivered here
  bool train = true;                   ///< false: no shuffle, no augmentation, keep the last partial batch
};

/// Where the loader stands in the data: a checkpoint carries it (the loader's checkpoint part,
/// train/state/parts.h) and a resume seeks back to it.
struct Position {
  int64_t epoch = 0;   ///< the epoch in progress
  int64_t cursor = 0;  ///< samples of it consumed by all ranks: a multiple of the global batch
};

/// A sample that did not decode or read (an error of exit 2: a truncated JPEG, a damaged shard
/// member) under data.on_bad_sample: skip (docs/data.md, "A damaged image").
struct BadSample {
  int64_t index = 0;  ///< the dataset index
  std::string error;  ///< the error, naming the file
};

struct Batch {
  torch::Tensor x;  ///< (b, C, H, W) float32, normalized, on the target device
  torch::Tensor y;  ///< (b) int64; -1 for a bad sample of an evaluation (not counted)
  /// The bad samples of this micro-batch: in training each was replaced by the next sample of
  /// the epoch's order that decodes (its own augmentation), so the batch keeps its size and the
  /// run stays a function of the data; in an evaluation its row is zeros with label -1.
  std::vector<BadSample> bad;
  int64_t step_in_epoch = 0;  ///< global step this micro-batch belongs to
  int micro = 0;              ///< micro-batch index within the step (0..grad_accum-1)
};

class Loader {
 public:
  Loader(std::shared_ptr<Dataset> dataset, const DataOptions& opts, const LoaderSpec& spec);
  ~Loader();
  /// Global optimizer steps per epoch (train) or eval batches (eval).
  int64_t steps_per_epoch() const;
  /// Begin epoch `epoch` at global sample `cursor` (a multiple of the global batch).
  void start_epoch(int64_t epoch, int64_t cursor = 0);
  /// Go to `p` (exit 2 when its cursor is not a multiple of the global batch within the epoch);
  /// the workers start at the next next().
  void seek(Position p);
  /// The samples consumed so far: after the last micro-batch of global step s of an epoch was
  /// handed out, {epoch, (s+1) x global batch}; seek() and start_epoch() set it.
  Position position() const;
  /// Every step of the epoch in progress has been handed out.
  bool epoch_consumed() const;
  /// Next micro-batch of this rank, or nullopt at the end of the epoch. Without a prior
  /// start_epoch() or seek() the loader starts at position() ({0, 0} when new).
  std::optional<Batch> next();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// One pass of `loader` (epoch 0) with `fn` on each batch; `stop`, when given, is asked before
/// each batch and true ends the pass early. Returns whether the pass was complete.
bool each_batch(Loader& loader, const std::function<bool()>& stop,
                const std::function<void(const Batch&)>& fn);

}  // namespace dlrun::data
