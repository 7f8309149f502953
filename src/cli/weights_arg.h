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

/// The config when none is given on the command line (eval, predict): the config.yaml of the
/// checkpoint or run directory --checkpoint names (--run-dir's for auto and best); exit 2 saying
/// so when there is none (an exported weights file holds the weights, not the model's config).
std::string config_of_checkpoint(const std::string& checkpoint, const std::string& run_dir, const char* command);

/// A `dotted.key=value` override rather than a path (the first positional of eval and predict
/// may be either when the config is left out).
bool is_override(const std::string& arg);
bool is_yaml_name(const std::string& path);

}  // namespace dlrun::cli
