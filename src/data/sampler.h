// The sampling contract of loader.h as plain functions: which dataset indices each
// micro-batch of each rank reads, in train and eval mode. Torch-free and deterministic.
#pragma once

#include <cstdint>
#include <vector>

namespace dlrun::data {

/// perm(seed, epoch): a Fisher-Yates shuffle of [0, n) driven by a counter-based stream
/// keyed by (seed, epoch); the identity when shuffle is false.
std::vector<int64_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t n, bool shuffle);

/// Batch geometry of one rank. Train: global batch `batch` split into world x accum
/// micro-batches of `micro` samples, last partial global batch dropped. Eval: batches of
/// `batch` over [0, n) in order, last partial one kept; global batch k goes to rank k % world.
struct SamplerGeometry {
  int64_t n = 0;
  int64_t batch = 1;
  int world = 1, rank = 0;
  int64_t accum = 1;
  bool train = true;
  /// Repeated augmentation (data.repeated_aug > 1): a step's micro-batch g = m * world + r takes
  /// its positions g, g + world x accum, g + 2 x world x accum, ... as timm's RepeatAugSampler
  /// hands rank r every world-th sample, so that a sample's copies, adjacent in the order, land on
  /// different ranks and micro-batches; the step's samples are the same at every world size.
  bool interleave = false;

  /// b = batch / (world * accum) (train).
  int64_t micro() const { return batch / (world * accum); }
  /// Train: global steps per epoch; eval: global batches.
  int64_t steps() const { return train ? n / batch : (n + batch - 1) / batch; }
  /// Micro-batches this rank reads in an epoch started at global step `first_step`.
  int64_t tasks(int64_t first_step) const;
  /// The distance between consecutive positions of one task: world x accum when interleaved, else 1.
  int64_t pitch() const { return train && interleave ? world * accum : 1; }
  /// Positions begin, begin + pitch(), ... below end of the epoch order read by this rank's task t
  /// (0-based from first_step), and the global step / micro index it belongs to.
  void task(int64_t first_step, int64_t t, int64_t* begin, int64_t* end, int64_t* step, int* micro_index) const;
};

}  // namespace dlrun::data
