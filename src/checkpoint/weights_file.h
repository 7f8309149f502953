// Model weights from whatever a user names on the command line or in model.init: a checkpoint
// directory, a run or checkpoints directory (the checkpoint a resume would take), or one file
// written by `dlrun export` or by Python (safetensors, or torch.save of a dict of tensors). The
// kind is read from the bytes, not the name; a file of another kind is refused naming what it
// is (a config, a JSON file, a tar shard, an image, a checkpoint's optimizer state, ...).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>

#include <map>
#include <string>

#include "checkpoint/checkpoint.h"

namespace dlrun::ckpt {

struct WeightsRead {
  std::string path;   ///< what was read: the checkpoint directory, or the file
  std::string kind;   ///< "checkpoint", "safetensors file" or "torch file"
  int64_t step = -1;  ///< a checkpoint's step (-1 for a file)
  TensorDict tensors;
  /// A checkpoint's averages of the weights that are ready (averages.h), each with its name
  /// (<name>.pt) and what it is ("moving average").
  struct Average {
    std::string name, what;
    TensorDict tensors;
  };
  std::vector<Average> averages;
  std::map<std::string, std::string> metadata;  ///< a safetensors file's __metadata__
  /// What the run recorded of its data (class names, input side, normalization): a checkpoint's
  /// state.json "dataset", or a safetensors export's "dlrun_dataset"; null when unknown.
  nlohmann::json dataset;
};

/// Read the weights `path` names. Directories: one with manifest.json is a checkpoint (every
/// file checked against it); a run or checkpoints directory gives the checkpoint LATEST names
/// when it loads, else the newest that does (as `--resume auto`; skipped ones go to `on_skip`).
/// Files: safetensors, or torch's zip format holding a dict of tensors. Anything else is
/// dlrun::Error (exit 2) saying what the file is and what would be accepted.
WeightsRead read_weights(const std::string& path,
                         const std::function<void(const std::string&, const std::string&)>& on_skip = {});

/// The checkpoint `--checkpoint best` names: RUN_DIR/checkpoints/<what BEST holds>, for the run
/// directory `run_dir`. Exit 2 when the run kept none (checkpoint.keep_best).
std::string best_checkpoint(const std::string& run_dir);

/// What the first bytes of a file say it is, for messages: "a safetensors file", "a zip archive
/// (torch.save)", "a JSON file", "a YAML or text file", "a tar archive", "a JPEG image",
/// "a PNG image", "an empty file", or "a file of unknown kind".
std::string sniff_kind(const std::string& head);

}  // namespace dlrun::ckpt
