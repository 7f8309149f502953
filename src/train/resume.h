// The way back from an interruption: choosing the checkpoint to resume from, before anything in
// the run directory is touched (docs/checkpoints.md, "Resume"). What a checkpoint holds and how
// it is restored into a live run: the checkpoint parts (parts.h).
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>

#include "checkpoint/checkpoint.h"
#include "checkpoint/remote_store.h"
#include "run/run_dir.h"

namespace dlrun::train {

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

/// Write model weights as a torch.load-able dict of tensors.
void save_weights(const torch::nn::Module& model, const std::string& path);

}  // namespace dlrun::train
