// Loading weights from outside a run into a model: `dlrun eval --checkpoint FILE`, `dlrun
// predict` and model.init (fine-tuning from pretrained weights). Unlike load_state_dict (a
// resume, where anything but an exact match is an error), it reports what matched, can leave
// the classification head as initialised when its class count differs, and reads a folded
// export (`dlrun export --fold-batchnorm`) back into the unfolded network.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "models/model.h"

namespace dlrun::models {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

struct LoadOptions {
  /// Missing or unexpected names are an error (PyTorch's strict=True); otherwise they are
  /// reported and skipped. A shape mismatch is an error either way, except for the head below.
  bool strict = true;
  /// The classification head (the last Linear's weight and bias) stays as initialised when the
  /// file's has another number of classes (fine-tuning on a new label set).
  bool reinit_head_on_mismatch = false;
  /// Accept a folded export: each folded convolution takes the folded weight, its BatchNorm
  /// becomes an identity carrying the folded bias (eval-mode outputs within rounding).
  bool allow_folded = false;
  int64_t in_channels = 3;  ///< for the recorded pass that finds the foldable pairs
};

struct LoadReport {
  std::vector<std::string> loaded;         ///< model entries copied from the file
  std::vector<std::string> missing;        ///< model entries the file lacks (left as initialised)
  std::vector<std::string> unexpected;     ///< file entries the model lacks (ignored)
  std::vector<std::string> reinitialised;  ///< head entries left as initialised (class count differs)
  bool folded = false;                     ///< the file was a folded export
  /// "loaded 62 of 62 tensors; missing: none; unexpected: none" (+ the head, folded).
  std::string summary() const;
};

/// Copy `tensors` (from `source`, for messages) into `model` as `o` says; dlrun::Error (exit 2)
/// naming the source and the first problems otherwise.
LoadReport load_weights(Model& model, const NamedTensors& tensors, const std::string& source, const LoadOptions& o);

}  // namespace dlrun::models
