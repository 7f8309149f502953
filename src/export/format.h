// An export format: how `dlrun export` writes a checkpoint's model weights as one file. A new
// format is one file of this folder defining its write function, declared below and given its
// line in the table of formats.cpp. (It cannot register itself from its own file: the linker
// drops the members of a static library that nobody names, cmake/Targets.cmake.)
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "config/options.h"

namespace dlrun::models {
class Model;
}

namespace dlrun::exporting {

/// What a format writes, and where it came from.
struct Weights {
  const ckpt::TensorDict& tensors;  ///< name -> tensor, in state-dict order
  const nlohmann::json& manifest;   ///< the checkpoint's manifest.json (config_hash, versions, ...)
  int64_t step = -1;                ///< the checkpoint's step (-1: unknown)
  int64_t epoch = -1;               ///< the checkpoint's epoch (-1: unknown)
  bool folded_batchnorm = false;    ///< the tensors are a folded state dict
  nlohmann::json dataset;           ///< the checkpoint's state.json "dataset" (class names, ...), or null
  std::string weights = "raw";      ///< raw (model.pt), ema (the moving average, ema.pt) or swa (swa.pt)
  // Formats that write the network, not only its weights (Format::needs_model):
  models::Model* model = nullptr;   ///< built from the checkpoint's config.yaml, loaded with its (unfolded) weights
  const Config* config = nullptr;   ///< that config.yaml
  int64_t image_size = 0;           ///< the input's side: --image-size, the run's record, or data.image_size
  bool external_data = false;       ///< onnx: the weights in OUTPUT.data beside it (always past 2 GB)
};

/// Writes `weights` to the file `path`, atomically and durably; returns how many tensors the file
/// holds (ONNX: its initializers, which folding or lowering may make fewer than `weights.tensors`).
using WriteFn = size_t (*)(const std::string& path, const Weights& weights);

struct Format {
  const char* name;  ///< what --format takes
  WriteFn write;
  /// The format writes the network: it gets Weights::model and does its own BatchNorm folding
  /// (Weights::tensors are then the unfolded weights).
  bool needs_model = false;
};

/// Every format, in the order --format lists them.
const std::vector<Format>& formats();
/// The format called `name`, or nullptr.
const Format* find_format(const std::string& name);

// The formats, one file each.

/// safetensors, with the checkpoint's step, epoch, config hash and versions as metadata
/// (safetensors_format.cpp).
size_t write_as_safetensors(const std::string& path, const Weights& weights);
/// torch.load-able dict of tensors, as a checkpoint's model.pt (torch_format.cpp).
size_t write_as_torch(const std::string& path, const Weights& weights);
/// An ONNX model: the network lowered to standard operators, its weights as initializers
/// (onnx_format.cpp).
size_t write_as_onnx(const std::string& path, const Weights& weights);
/// An ONNX model as files: the model, and its external data when the weights are there.
struct OnnxFiles {
  std::string model;
  std::string data;  ///< the external data file's bytes ("" when the weights are in `model`)
  size_t initializers = 0;
};
/// `model` (built from `opts`, in any mode: lowered in evaluation) as ONNX on images of side
/// `side`, BatchNorm folded when `fold`. The weights go to the external data file `data_name`
/// (a name beside the model file) when `external` or when they pass 2 GB, protobuf's limit on a
/// file; without `data_name`, weights past 2 GB are refused (exit 2).
OnnxFiles onnx_files(models::Model& model, const ModelOptions& opts, int64_t side, bool fold,
                     const std::map<std::string, std::string>& metadata, const std::string& data_name = "",
                     bool external = false);

}  // namespace dlrun::exporting
