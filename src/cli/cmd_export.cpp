// `dlrun export --checkpoint PATH --format safetensors|torch|onnx --output FILE [--fold-batchnorm]`:
// the model weights of a verified checkpoint as one file Python tools load directly
// (safetensors.torch.load_file, or torch.load of a dict of tensors), or the network as an ONNX
// model (export/onnx_format.cpp). --fold-batchnorm builds the
// model from the checkpoint's config.yaml and writes models::folded_state_dict instead: every
// BatchNorm after a convolution folded into it (docs/kernels.md, "Folded BatchNorm"). The
// export itself is exporting::export_checkpoint (export/export.h); for an s3:// path this file
// builds the remote store from the --remote-* flags.
#include <CLI/CLI.hpp>

#include <filesystem>

#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>

#include "base/error.h"
#include "base/strings.h"
#include "checkpoint/remote_store.h"
#include "checkpoint/weights_file.h"
#include "cli/app.h"
#include "cli/remote_args.h"
#include "export/export.h"
#include "remote/s3.h"
#include "train/averaging/averages.h"

namespace dlrun::cli {
namespace {

struct ExportOptions {
  std::string checkpoint;  ///< checkpoint dir, a run / checkpoints dir (uses LATEST), or s3://...
  exporting::ExportOptions to;
  RemoteArgs remote;
  bool format_given = false;
  std::string run_dir;  ///< for --checkpoint best
};

/// The format a file name's extension names (.safetensors, .onnx, .pt / .pth), or "".
std::string format_of_extension(const std::string& path) {
  const size_t dot = path.rfind('.'), slash = path.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  const std::string ext = lower(path.substr(dot + 1));
  if (ext == "safetensors") return "safetensors";
  if (ext == "onnx") return "onnx";
  if (ext == "pt" || ext == "pth") return "torch";
  return "";
}

/// --format from --output's extension when it was not given; a given one that contradicts a
/// known extension is refused (an ONNX runtime would fail on safetensors bytes in x.onnx).
void settle_format(ExportOptions& o) {
  const std::string named = format_of_extension(o.to.output);
  if (!o.format_given) {
    if (!named.empty()) o.to.format = named;
    return;
  }
  if (!named.empty() && named != o.to.format) {
    const std::string ext = o.to.format == "torch" ? ".pt or .pth" : "." + o.to.format;  // (safetensors, onnx)
    throw Error(ExitCode::kBadInput,
                fmt::format("--format {} but --output {} names a {} file", o.to.format, o.to.output, named),
                fmt::format("drop --format (the extension decides), or name the output {} for --format {}", ext,
                            o.to.format));
  }
}

void run_export(ExportOptions o) {
  settle_format(o);
  DLRUN_CHECK_INPUT(!o.to.external_data || o.to.format == "onnx",
                    "--external-data is ONNX's (the weights beside the model); --format {} writes one file", o.to.format);
  {  // where the file goes must exist: bad input, said before anything is read (not a failed write)
    const std::filesystem::path parent = std::filesystem::path(o.to.output).parent_path();
    DLRUN_CHECK_INPUT(parent.empty() || std::filesystem::is_directory(parent),
                      "--output {}: the folder {} does not exist (create it first)", o.to.output, parent.string());
  }
  if (o.checkpoint == "best") {  // the checkpoint checkpoint.keep_best kept, as eval and predict take it
    DLRUN_CHECK_INPUT(!o.run_dir.empty(), "--checkpoint best needs --run-dir (the run whose BEST to export)");
    o.checkpoint = ckpt::best_checkpoint(o.run_dir);
  }
  for (const train::AverageKind& k : train::average_kinds())
    if (o.to.weights == k.name) o.to.weights_setting = k.setting;
  exporting::Source from;
  from.path = o.checkpoint;
  std::unique_ptr<ckpt::RemoteStore> store;
  if (remote::is_s3_url(o.checkpoint)) {
    store = remote_store_for(o.checkpoint, o.remote, &from.name);
    from.store = store.get();
  }
  const exporting::ExportResult r = exporting::export_checkpoint(from, o.to);
  std::printf("%s: %zu tensors from %s (step %lld) written as %s%s\n", o.to.output.c_str(), r.tensors,
              (r.source + (o.to.weights == "raw" ? "" : "/" + o.to.weights + ".pt")).c_str(), static_cast<long long>(r.step),
              o.to.format.c_str(),
              o.to.fold_batchnorm ? fmt::format(", BatchNorm folded ({} tensors before)", r.unfolded).c_str() : "");
}

}  // namespace

void setup_export(CLI::App& app) {
  auto* cmd = app.add_subcommand("export", "write a checkpoint's model weights as safetensors or a torch file, "
                                           "or its network as ONNX");
  auto o = std::make_shared<ExportOptions>();
  cmd->add_option("--checkpoint", o->checkpoint,
                  "checkpoint directory, a run directory (uses LATEST), best (with --run-dir: the checkpoint "
                  "checkpoint.keep_best kept), or s3://BUCKET/PREFIX[/step-N]")
      ->required();
  cmd->add_option("--run-dir", o->run_dir, "the run directory of --checkpoint best");
  add_remote_args(cmd, o->remote);
  cmd->add_option_function<std::string>(
         "--format", [o](const std::string& f) { o->to.format = f, o->format_given = true; },
         "safetensors | torch (a torch.load-able dict of tensors) | onnx (the network, for onnxruntime); default: "
         "from --output's extension (.safetensors, .pt or .pth, .onnx), else safetensors")
      ->check(CLI::IsMember(exporting::format_names()));
  cmd->add_option("--output", o->to.output, "file to write")->required();
  cmd->add_flag("--fold-batchnorm", o->to.fold_batchnorm,
                "fold every BatchNorm that follows a convolution into it (weights w*s, a bias per convolution, "
                "no BatchNorm entries): for inference runtimes; same eval outputs within float rounding. "
                "onnx: Conv nodes with biases instead of Conv + BatchNormalization");
  std::string weights_help = "raw: the trained weights (model.pt)", names = "raw";
  for (const train::AverageKind& k : train::average_kinds()) {
    weights_help += fmt::format("; {0}: their {1} ({0}.pt, {2})", k.name, k.what, k.setting);
    names += std::string(", ") + k.name;
  }
  cmd->add_option("--weights", o->to.weights, weights_help)
      ->check([names](const std::string& w) {
        for (const train::AverageKind& k : train::average_kinds())
          if (w == k.name) return std::string();
        return w == "raw" ? std::string() : fmt::format("--weights {}: one of {}", w, names);
      })
      ->capture_default_str();
  cmd->add_flag("--external-data", o->to.external_data,
                "onnx: write the weights to OUTPUT.data beside the model (ONNX external data), as ONNX needs for "
                "models over 2 GB (vit_h_14, regnet_y_128gf: then it is done without the flag)");
  cmd->add_option("--image-size", o->to.image_size,
                  "onnx: the side of the input images (default: what the run recorded, or data.image_size)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  cmd->callback([o] { run_export(*o); });
}

}  // namespace dlrun::cli
