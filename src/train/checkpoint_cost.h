// What a checkpoint costs the training loop, measured on a model's full training state
// (weights, SGD momentum, RNG, loader position): the stall (copying the state to host memory at
// the step boundary) and the background write (serialize, hash, fsync, commit). `dlrun bench
// ckpt` reports it; it lives with the training code because it drives the same checkpoint parts
// and writer a run saves through, so the figures are those of a real save.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dlrun::train {

/// The checkpoints to time (`dlrun bench ckpt`'s flags).
struct CheckpointCostOptions {
  std::string model = "resnet50";  ///< model.name (3 input channels, 1000 classes, SGD)
  int repeat = 3;                  ///< saves to time
  std::string dir;                 ///< where to write; "": a fresh private temporary directory, removed after
  std::string device = "auto";     ///< as run.device; on CUDA the stall includes the copy to pinned host memory
};

/// The times of the saves, and what was saved.
struct CheckpointCost {
  /// One save, in seconds: the host copy (CheckpointParts::snapshot), the stall (the host copy
  /// and handing it to the writer) and the write (from after the copy until it is committed).
  struct Save {
    double copy_s = 0;
    double stall_s = 0;
    double write_s = 0;
  };
  std::vector<Save> saves;             ///< in order, one per repeat
  uint64_t checkpoint_bytes = 0;       ///< the files of the last checkpoint, on disk
  int64_t parameters = 0;              ///< the model's trainable parameters
  torch::Device device = torch::kCPU;  ///< where the model lived
};

/// Build the model and its optimizer (one step taken, so the momentum buffers exist) on a
/// one-batch synthetic loader, then save `o.repeat` checkpoints (steps 1, 2, ...) through an
/// asynchronous ckpt::Writer keeping the last one, waiting for each write to commit.
CheckpointCost measure_checkpoint_cost(const CheckpointCostOptions& o);

}  // namespace dlrun::train
