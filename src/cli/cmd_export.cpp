// `dlrun export --checkpoint PATH --format safetensors|torch --output FILE [--fold-batchnorm]`:
// the model weights of a verified checkpoint as one file Python tools load directly
// (safetensors.torch.load_file, or torch.load of a dict of tensors). --fold-batchnorm builds the
// model from the checkpoint's config.yaml and writes models::folded_state_dict instead: every
// BatchNorm after a convolution folded into it (docs/kernels.md, "Folded BatchNorm").
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "base/build_info.h"
#include "base/error.h"
#include "base/log.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/tensor_file.h"
#include "checkpoint/remote.h"
#include "cli/app.h"
#include "cli/remote_args.h"
#include "config/loader.h"
#include "models/batchnorm.h"
#include "models/model.h"

namespace dlrun::cli {
namespace {

struct ExportOptions {
  std::string checkpoint;  ///< checkpoint dir, a run / checkpoints dir (uses LATEST), or s3://...
  std::string format = "safetensors";
  std::string output;
  bool fold_batchnorm = false;
  RemoteArgs remote;
};

/// The checkpoint's weights with every foldable BatchNorm folded into its convolution: the
/// model is rebuilt from the checkpoint's own config.yaml and loaded with `tensors`.
ckpt::TensorDict fold(const ckpt::FileSet& set, const std::string& ck, const ckpt::TensorDict& tensors) {
  std::string yaml;
  for (const auto& [name, bytes] : set.files)
    if (name == "config.yaml") yaml.assign(bytes.begin(), bytes.end());
  DLRUN_CHECK_INPUT(!yaml.empty(), "{}: the checkpoint has no config.yaml, which --fold-batchnorm needs", ck);
  const Config cfg = config::load_text(yaml, ck + "/config.yaml");
  if (cfg.model.name == "mlp") {
    log::info("--fold-batchnorm: model.name=mlp has no BatchNorm; the weights are written unchanged");
    return tensors;
  }
  // The convolutional models pool adaptively: their parameters do not depend on the image size.
  auto model = models::build(cfg.model, cfg.run.seed, 32);
  models::load_state_dict(*model, tensors, ck + "/model.pt");
  return models::folded_state_dict(*model, cfg.model.in_channels);
}

/// The checked files of the checkpoint `path` names, and where they came from.
ckpt::FileSet checked_files(const ExportOptions& o, std::string* where) {
  if (!remote::is_s3_url(o.checkpoint)) {
    *where = ckpt::resolve(o.checkpoint);
    return ckpt::read_set(*where);  // every file checked against the manifest as it is read
  }
  std::string name;
  auto store = remote_store_for(o.checkpoint, o.remote, &name);
  if (name.empty()) {
    const auto latest = store->latest();
    DLRUN_CHECK_INPUT(latest.has_value(), "{}: no LATEST (no checkpoint was uploaded there)", o.checkpoint);
    name = *latest;
  }
  *where = store->url().str(name);
  return store->fetch(name);
}

void run_export(const ExportOptions& o) {
  std::string ck;
  const ckpt::FileSet set = checked_files(o, &ck);
  const auto& m = set.manifest;
  const int64_t step = m.value("step", int64_t{-1}), epoch = m.value("epoch", int64_t{-1});
  ckpt::TensorDict tensors;
  for (const auto& [name, bytes] : set.files)
    if (name == "model.pt") tensors = ckpt::tensors_from_bytes(bytes, ck + "/model.pt");
  DLRUN_CHECK_INPUT(!tensors.empty(), "{}: the checkpoint has no model.pt", ck);
  const size_t unfolded = tensors.size();
  if (o.fold_batchnorm) tensors = fold(set, ck, tensors);
  if (o.format == "safetensors") {
    std::map<std::string, std::string> meta = {{"format", "pt"},
                                               {"dlrun_version", build::version()},
                                               {"torch_version", build::torch_version()},
                                               {"step", std::to_string(step)},
                                               {"epoch", std::to_string(epoch)}};
    if (m.contains("config_hash") && m["config_hash"].is_string()) meta["config_hash"] = m["config_hash"].get<std::string>();
    if (o.fold_batchnorm) meta["folded_batchnorm"] = "true";
    ckpt::write_safetensors(o.output, tensors, meta);
  } else {
    ckpt::write_tensor_file(o.output, tensors);
  }
  std::printf("%s: %zu tensors from %s (step %lld) written as %s%s\n", o.output.c_str(), tensors.size(), ck.c_str(),
              static_cast<long long>(step), o.format.c_str(),
              o.fold_batchnorm ? fmt::format(", BatchNorm folded ({} tensors before)", unfolded).c_str() : "");
}

}  // namespace

void setup_export(CLI::App& app) {
  auto* cmd = app.add_subcommand("export", "write a checkpoint's model weights as safetensors or a torch file");
  auto o = std::make_shared<ExportOptions>();
  cmd->add_option("--checkpoint", o->checkpoint,
                  "checkpoint directory, a run directory (uses LATEST), or s3://BUCKET/PREFIX[/step-N]")
      ->required();
  add_remote_args(cmd, o->remote);
  cmd->add_option("--format", o->format, "safetensors | torch (a torch.load-able dict of tensors)")
      ->check(CLI::IsMember({"safetensors", "torch"}))
      ->capture_default_str();
  cmd->add_option("--output", o->output, "file to write")->required();
  cmd->add_flag("--fold-batchnorm", o->fold_batchnorm,
                "fold every BatchNorm that follows a convolution into it (weights w*s, a bias per convolution, "
                "no BatchNorm entries): for inference runtimes; same eval outputs within float rounding");
  cmd->callback([o] { run_export(*o); });
}

}  // namespace dlrun::cli
