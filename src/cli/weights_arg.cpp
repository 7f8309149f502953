// --checkpoint PATH|auto|best (see weights_arg.h).
#include "cli/weights_arg.h"

#include "base/error.h"
#include "base/fsutil.h"
#include "base/log.h"
#include "run/run_dir.h"

namespace dlrun::cli {

const char* const kCheckpointHelp =
    "checkpoint directory, run directory, weights file from dlrun export (safetensors or torch, folded or not), "
    "auto (the run dir's LATEST when it verifies, else the newest that does: the one a resume takes), or best "
    "(the one checkpoint.keep_best kept)";

ckpt::WeightsRead read_checkpoint_arg(const Config& cfg, const std::string& checkpoint, const std::string& run_dir) {
  const auto on_skip = [](const std::string& p, const std::string& why) {
    log::warn("skipping checkpoint {}: {}", p, why);
  };
  if (checkpoint != "auto" && checkpoint != "best") return ckpt::read_weights(checkpoint, on_skip);
  const train::RunDir dir(train::resolve_run_dir(cfg, run_dir), cfg.checkpoint.dir);
  DLRUN_CHECK_INPUT(fsutil::is_directory(dir.checkpoints()),
                    "no checkpoints directory {} (use --checkpoint PATH or --run-dir)", dir.checkpoints());
  return ckpt::read_weights(checkpoint == "best" ? ckpt::best_checkpoint(dir.checkpoints()) : dir.checkpoints(),
                            on_skip);
}

}  // namespace dlrun::cli
