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
  bool set_aside_remote = false;        ///< ... and the remote prefix's checkpoints
  /// --resume PATH: the checkpoints newer than this step (local and remote) belong to a
  /// timeline the run gives up, and are set aside once the run starts (-1: none).
  int64_t abandon_after = -1;
  /// `from` is a local checkpoint newer than the remote LATEST (an upload cut short): upload it.
  bool upload_resumed = false;
};

/// `resume`:
///  - "auto": the checkpoint LATEST names, locally or (with `remote`) remotely, the further of
///    the two when both verify; when neither does, the newest that verifies, local or remote (a
///    remote one is downloaded and checked against its manifest; damaged and partial ones are
///    reported and skipped, never deleted). With `remote` and no local checkpoint, a store that
///    does not answer is retried for checkpoint.remote_wait_s, then exit 75 -- never a fresh
///    start; a prefix holding complete checkpoints none of which verifies is refused (exit 2).
///  - "never": start fresh; refused (exit 2) when the run directory or the remote prefix holds
///    an earlier run, unless `force`, which sets them aside.
///  - a checkpoint, local or s3:// (exit 2 when it does not verify); newer steps are abandoned.
ResumePlan plan_resume(const std::string& resume, bool force, const RunDir& dir, ckpt::RemoteStore* remote = nullptr,
                       const CheckpointOptions& opts = CheckpointOptions{});

/// Write model weights as a torch.load-able dict of tensors.
void save_weights(const torch::nn::Module& model, const std::string& path);

}  // namespace dlrun::train
