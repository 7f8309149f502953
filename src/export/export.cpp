// Exporting a checkpoint's model weights (see export.h).
#include "export/export.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>

#include "base/error.h"
#include "base/log.h"
#include "checkpoint/averages.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/tensor_file.h"
#include "checkpoint/weights_file.h"
#include "config/loader.h"
#include "export/format.h"
#include "models/batchnorm.h"
#include "models/model.h"

namespace dlrun::exporting {
namespace {

/// The checkpoint's own config.yaml, which `why` needs.
Config checkpoint_config(const ckpt::FileSet& set, const std::string& ck, const char* why) {
  const std::vector<char>* bytes = set.find(ckpt::kConfigFile);
  const std::string yaml = bytes ? std::string(bytes->begin(), bytes->end()) : std::string();
  DLRUN_CHECK_INPUT(!yaml.empty(), "{}: the checkpoint has no config.yaml, which {} needs", ck, why);
  return config::load_text(yaml, ck + "/config.yaml");
}

/// The checkpoint's weights with every foldable BatchNorm folded into its convolution: the
/// model is rebuilt from the checkpoint's own config.yaml and loaded with `tensors`.
ckpt::TensorDict fold(const ckpt::FileSet& set, const std::string& ck, const ckpt::TensorDict& tensors) {
  const Config cfg = checkpoint_config(set, ck, "--fold-batchnorm");
  std::vector<std::string> features;
  for (const auto& z : models::zoo())
    if (z.name == cfg.model.name) features = z.features;
  if (std::find(features.begin(), features.end(), "fold_batchnorm") == features.end()) {
    log::info("--fold-batchnorm: model.name={} has no BatchNorm after a convolution; the weights are written unchanged",
              cfg.model.name);
    return tensors;
  }
  // The convolutional models pool adaptively: their parameters do not depend on the image size.
  auto model = models::build(cfg.model, cfg.run.seed, cfg.model.image_size > 0 ? cfg.model.image_size : 32);
  models::load_state_dict(*model, tensors, ck + "/model.pt");
  return models::folded_state_dict(*model, cfg.model.in_channels);
}

/// The input's side for a format that writes the network: --image-size, else what the run
/// recorded of its data, else data.image_size.
int64_t image_side(const ExportOptions& o, const nlohmann::json& dataset, const Config& cfg, const std::string& ck) {
  if (o.image_size > 0) return o.image_size;
  if (dataset.is_object() && dataset.contains("image_size") && dataset["image_size"].is_number_integer())
    return dataset["image_size"].get<int64_t>();
  if (cfg.data.image_size <= 0)
    throw Error(ExitCode::kBadInput,
                fmt::format("{}: the checkpoint does not record the size of its images (written before dlrun "
                            "recorded it)", ck),
                "pass --image-size N: the side the model was trained on (28 for Fashion-MNIST, 32 for CIFAR-10)");
  return cfg.data.image_size;
}

/// The checked files of the checkpoint `from` names, and where they came from.
ckpt::FileSet checked_files(const Source& from, std::string* where) {
  if (from.store == nullptr) {
    *where = ckpt::resolve(from.path);
    return ckpt::read_set(*where);  // every file checked against the manifest as it is read
  }
  std::string name = from.name;
  if (name.empty()) {
    const auto latest = from.store->latest();
    DLRUN_CHECK_INPUT(latest.has_value(), "{}: no LATEST (no checkpoint was uploaded there)", from.path);
    name = *latest;
  }
  *where = from.store->url().str(name);
  return from.store->fetch(name);
}

}  // namespace

ExportResult export_checkpoint(const Source& from, const ExportOptions& o) {
  const Format* format = find_format(o.format);
  if (format == nullptr) {
    std::string valid;
    for (const std::string& n : format_names()) valid += (valid.empty() ? "" : ", ") + n;
    fail_input("unknown export format '{}' (valid: {})", o.format, valid);
  }
  ExportResult r;
  const ckpt::FileSet set = checked_files(from, &r.source);
  const auto& m = set.manifest;
  r.step = m.value("step", int64_t{-1});
  const int64_t epoch = m.value("epoch", int64_t{-1});
  ckpt::TensorDict tensors;
  nlohmann::json state;  // (state.json was checked against the manifest; an older one has no "dataset")
  if (const std::vector<char>* bytes = set.find(ckpt::kStateFile))
    state = nlohmann::json::parse(bytes->begin(), bytes->end(), nullptr, /*allow_exceptions=*/false);
  const std::string file = o.weights == "raw" ? ckpt::kModelFile : o.weights + ".pt";
  if (o.weights != "raw") {  // an average: one the checkpoint says it holds, and ready
    std::vector<std::string> stems, held;
    for (const auto& [name, bytes] : set.files)
      if (name.size() > 3 && name.compare(name.size() - 3, 3, ".pt") == 0) stems.push_back(name.substr(0, name.size() - 3));
    std::optional<ckpt::AverageInCheckpoint> average;
    for (auto& a : ckpt::averages_in(state, stems)) {
      held.push_back(a.name);
      if (a.name == o.weights) average = a;
    }
    // The run keeps the average but had taken nothing into it by this checkpoint's step.
    const nlohmann::json* entry = state.is_object() && state.contains(o.weights) ? &state[o.weights] : nullptr;
    DLRUN_CHECK_INPUT(average.has_value() || !entry || !entry->is_object() || entry->value("updates", int64_t{-1}) != 0,
                      "{}: the checkpoint of step {} has no {}: its run keeps one ({}), but had averaged nothing by "
                      "that step (averages are taken at epoch ends); export a later checkpoint",
                      r.source, r.step, file, o.weights_setting.empty() ? o.weights : o.weights_setting);
    DLRUN_CHECK_INPUT(average.has_value(), "{}: the checkpoint has no {}: its run kept no such average{}; --weights "
                      "takes raw{}{}",
                      r.source, file, o.weights_setting.empty() ? "" : " (" + o.weights_setting + " keeps one)",
                      held.empty() ? "" : ", ", fmt::format("{}", fmt::join(held, ", ")));
    DLRUN_CHECK_INPUT(average->ready, "{}/{}: the {} is not ready to export: {}", r.source, file, average->what,
                      average->pending);
  }
  if (const std::vector<char>* bytes = set.find(file)) tensors = ckpt::tensors_from_bytes(*bytes, r.source + "/" + file);
  DLRUN_CHECK_INPUT(!tensors.empty(), "{}: the checkpoint has no {}", r.source, file);
  r.unfolded = tensors.size();
  const nlohmann::json dataset = state.is_object() ? state.value("dataset", nlohmann::json()) : nlohmann::json();
  Weights w{tensors, m, r.step, epoch, o.fold_batchnorm, dataset, o.weights};
  w.external_data = o.external_data;
  std::optional<Config> cfg;
  std::shared_ptr<models::Model> model;
  if (format->needs_model) {  // the network itself: the model of the checkpoint's config, with its weights
    cfg = checkpoint_config(set, r.source, fmt::format("--format {}", o.format).c_str());
    w.image_size = image_side(o, dataset, *cfg, r.source);
    model = models::build(cfg->model, cfg->run.seed, w.image_size);
    models::load_state_dict(*model, tensors, r.source + "/" + file);
    w.model = model.get();
    w.config = &*cfg;
  } else if (o.fold_batchnorm) {
    tensors = fold(set, r.source, tensors);
  }
  r.tensors = format->write(o.output, w);
  return r;
}

}  // namespace dlrun::exporting
