// What a fresh start begins from instead of a checkpoint: model.init's weights (a dlrun export,
// a checkpoint or run directory, a safetensors file, a torch.save state dict). The resumed run
// has its checkpoint's weights instead (CheckpointParts::start_fresh, parts.h).
#pragma once

#include <nlohmann/json.hpp>

#include "config/options.h"
#include "models/model.h"

namespace dlrun::train {

/// model.init: load the weights it names into `model` (a fresh run's; a resumed run has its
/// checkpoint's), as model.init_strict says, the head left as initialised when num_classes
/// differs, and log what was loaded, missing and unexpected. Returns summary.json's "init"
/// (null without model.init). A file that cannot be read or does not fit: exit 2 at model.init.
nlohmann::json load_init_weights(const Config& cfg, models::Model& model);

}  // namespace dlrun::train
