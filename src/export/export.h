// Exporting a checkpoint's model weights as one file that Python tools load directly
// (`dlrun export`): the checkpoint is read locally or from remote storage, every file checked
// against its manifest as it is read; with fold_batchnorm the model is rebuilt from the
// checkpoint's own config.yaml and its folded state dict is written instead (every BatchNorm
// after a convolution folded into it: docs/kernels.md, "Folded BatchNorm"). The file formats
// are chosen by name (format.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/remote_store.h"

namespace dlrun::exporting {

/// Where the checkpoint to export is.
struct Source {
  /// A checkpoint directory, or a run or checkpoints directory (the checkpoint its LATEST
  /// names); with `store`, the s3:// URL the user gave, for messages.
  std::string path;
  /// The remote store holding the checkpoint, or null for a local `path`. The caller builds it
  /// (the command line, from its --remote-* flags) and keeps it alive during the export.
  ckpt::RemoteStore* store = nullptr;
  /// The checkpoint's name in `store` ("step-00001200"); "": the one the store's LATEST names.
  std::string name;
};

struct ExportOptions {
  std::string format = "safetensors";  ///< one of format_names()
  std::string output;                  ///< the file to write
  bool fold_batchnorm = false;         ///< write models::folded_state_dict (onnx: Conv nodes without BatchNormalization)
  int64_t image_size = 0;              ///< onnx: the input's side; 0: the run's record, or data.image_size
  bool external_data = false;          ///< onnx: the weights in OUTPUT.data (ONNX external data); always past 2 GB
  /// raw (model.pt), or the name of an average the checkpoint holds (<name>.pt: "ema", "swa";
  /// checkpoint/averages.h)
  std::string weights = "raw";
  /// For the message when the checkpoint has no average `weights`: the config key that keeps
  /// one ("train.ema_decay"), from the command line's list of averages; "" when unknown.
  std::string weights_setting;
};

/// What was written.
struct ExportResult {
  std::string source;   ///< the checkpoint read: its directory, or its URL
  int64_t step = -1;    ///< from its manifest (-1 when it has none)
  size_t tensors = 0;   ///< tensors written
  size_t unfolded = 0;  ///< tensors of its model.pt (before folding)
};

/// Read the checkpoint `from` names, checking every file against its manifest, fold its
/// BatchNorms when asked, and write `o.output` in `o.format`, atomically. A checkpoint that does
/// not verify, has no model.pt (or, to fold, no config.yaml), a remote prefix without LATEST and
/// an unknown format are dlrun::Error, exit 2; nothing is written then.
ExportResult export_checkpoint(const Source& from, const ExportOptions& o);

/// The format names, in the order `dlrun export --format` lists them.
std::vector<std::string> format_names();

}  // namespace dlrun::exporting
