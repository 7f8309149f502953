// The `--checkpoint` of `dlrun eval` and `dlrun predict`: auto (the checkpoint a resume would
// take), best (the one checkpoint.keep_best kept), or a path (checkpoint or run directory, or an
// exported weights file), read as ckpt::read_weights reads it.
#pragma once

#include <string>

#include "checkpoint/weights_file.h"
#include "config/options.h"

namespace dlrun::cli {

/// Read what `--checkpoint` names; `run_dir` (--run-dir) locates auto and best, else the
/// config's run directory.
ckpt::WeightsRead read_checkpoint_arg(const Config& cfg, const std::string& checkpoint, const std::string& run_dir);

/// --checkpoint's help text.
extern const char* const kCheckpointHelp;

}  // namespace dlrun::cli
