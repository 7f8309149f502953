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

/// Host copy of everything a resume needs: model, optimizer, loss scaler, RNG, position,
/// config. Taken at a step boundary; the copy is what training stalls for.
ckpt::Snapshot make_snapshot(const Config& cfg, models::Model& model, torch::optim::Optimizer& optim,
                             const GradScaler& scaler, const TrainState& st, int64_t total_steps,
                             const torch::Device& device);

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

/// Restore `snap` into the live objects. Refuses (exit 2, naming the difference) a different
/// architecture or optimizer type; warns when the schedule length, global batch size or world
/// size changed, and lists every changed config key (a changed run.seed means the resumed run
/// is no longer an exact continuation: said so).
void restore(const ckpt::Snapshot& snap, const Config& cfg, models::Model& model, torch::optim::Optimizer& optim,
             GradScaler& scaler, TrainState& st, int64_t total_steps, const torch::Device& device);

/// Write model weights as a torch.load-able dict of tensors.
void save_weights(const torch::nn::Module& model, const std::string& path);

}  // namespace dlrun::train
