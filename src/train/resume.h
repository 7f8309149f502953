// Carrying a run across an interruption: the checkpoint Snapshot of a live run at a step
// boundary, and the way back — choosing the checkpoint to resume from, checking that it fits
// the config, and restoring it (docs/checkpoints.md, "Resume").
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>

#include "checkpoint/checkpoint.h"
#include "checkpoint/remote.h"
#include "config/options.h"
#include "models/model.h"
#include "train/amp.h"
#include "train/run_dir.h"
#include "train/state.h"

namespace dlrun::train {

/// This process's RNG states: "cpu", and "cuda" of `device` when it is a CUDA device.
ckpt::TensorDict rng_states(const torch::Device& device);

/// Host copy of everything a resume needs: model, optimizer, loss scaler, RNG, position,
/// config. Taken at a step boundary; the copy is what training stalls for. `rank_rngs`: the
/// RNG states of every rank of a multi-process run, in rank order (each becomes
/// rng-rankNNNNN.pt); null: this process's own, as rank 0 of 1.
ckpt::Snapshot make_snapshot(const Config& cfg, models::Model& model, torch::optim::Optimizer& optim,
                             const GradScaler& scaler, const TrainState& st, int64_t total_steps,
                             const torch::Device& device, const std::vector<ckpt::TensorDict>* rank_rngs = nullptr);

/// What --resume asks for, decided before anything in the run directory is touched.
struct ResumePlan {
  std::optional<ckpt::Loaded> from;     ///< the checkpoint to continue, loaded and verified
  std::optional<ckpt::FileSet> fetched; ///< `from` came from remote storage: its bytes, kept locally once the run starts
  bool set_aside = false;               ///< --resume never --force: set the previous run aside
};

/// `resume`: "auto" (the newest checkpoint that loads, local or — with `remote` — remote,
/// a remote one downloaded and checked against its manifest; corrupt and partial ones are
/// reported and skipped, never deleted), "never" (start fresh: refused, exit 2, when the run
/// directory holds an earlier run, unless `force`; and when the remote prefix holds
/// checkpoints, even with `force`: a bucket has no setting aside), or the path of a
/// checkpoint, local or s3:// (exit 2 when it does not verify).
ResumePlan plan_resume(const std::string& resume, bool force, const RunDir& dir, ckpt::RemoteStore* remote = nullptr);

/// Restore `snap` into the live objects, with rank `rank`'s RNG state. Refuses (exit 2,
/// naming the difference) a different architecture or optimizer type; warns when the
/// schedule length, global batch size or world size changed, and lists every changed config
/// key (a changed run.seed means the resumed run is no longer an exact continuation: said so).
void restore(const ckpt::Snapshot& snap, const Config& cfg, models::Model& model, torch::optim::Optimizer& optim,
             GradScaler& scaler, TrainState& st, int64_t total_steps, const torch::Device& device, int rank = 0,
             int world_size = 1);

/// The file stem of rank `rank`'s RNG state in a checkpoint: "rng-rank00003".
std::string rng_file(int rank);

/// Write model weights as a torch.load-able dict of tensors.
void save_weights(const torch::nn::Module& model, const std::string& path);

}  // namespace dlrun::train
