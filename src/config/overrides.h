// Hydra-style overrides from the command line: `optim.lr=0.1`, `data.augment=[flip,crop]`,
// `run.dir=null`, `train.ema.decay=0.9`. The value is parsed as a YAML flow node and merged
// over the loaded files, every node of it located at the command line for errors.
#pragma once

#include <memory>
#include <string>

#include "config/tree.h"

namespace dlrun::config {

/// Merges the override `arg` ("dotted.key=value") over `root`. A malformed one, a value that
/// is not YAML, or `base=` is an error (exit 2) naming the argument.
void apply_override(std::shared_ptr<Tree>& root, const std::string& arg);

}  // namespace dlrun::config
