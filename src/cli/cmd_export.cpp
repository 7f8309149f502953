// `dlrun export --checkpoint PATH --format safetensors|torch --output FILE`: the model
// weights of a verified checkpoint as one file Python tools load directly
// (safetensors.torch.load_file, or torch.load of a dict of tensors).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "base/build_info.h"
#include "base/error.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/tensor_file.h"
#include "cli/app.h"

namespace dlrun::cli {
namespace {

struct ExportOptions {
  std::string checkpoint;  ///< checkpoint dir, or a run / checkpoints dir (uses LATEST)
  std::string format = "safetensors";
  std::string output;
};

void run_export(const ExportOptions& o) {
  const std::string ck = ckpt::resolve(o.checkpoint);
  const auto v = ckpt::verify(ck);
  if (!v.ok)
    throw Error(ExitCode::kBadInput, fmt::format("{}: checkpoint does not verify: {}", ck, v.reason),
                "`dlrun ckpt list RUN_DIR` shows which checkpoints are valid");
  const auto tensors = ckpt::load_tensor_file(ck + "/model.pt");
  if (o.format == "safetensors") {
    std::map<std::string, std::string> meta = {{"format", "pt"},
                                               {"dlrun_version", build::version()},
                                               {"torch_version", build::torch_version()},
                                               {"step", std::to_string(v.step)},
                                               {"epoch", std::to_string(v.epoch)}};
    if (v.manifest.contains("config_hash") && v.manifest["config_hash"].is_string())
      meta["config_hash"] = v.manifest["config_hash"].get<std::string>();
    ckpt::write_safetensors(o.output, tensors, meta);
  } else {
    ckpt::write_tensor_file(o.output, tensors);
  }
  std::printf("%s: %zu tensors from %s (step %lld) written as %s\n", o.output.c_str(), tensors.size(), ck.c_str(),
              static_cast<long long>(v.step), o.format.c_str());
}

}  // namespace

void setup_export(CLI::App& app) {
  auto* cmd = app.add_subcommand("export", "write a checkpoint's model weights as safetensors or a torch file");
  auto o = std::make_shared<ExportOptions>();
  cmd->add_option("--checkpoint", o->checkpoint, "checkpoint directory, or a run directory (uses LATEST)")
      ->required();
  cmd->add_option("--format", o->format, "safetensors | torch (a torch.load-able dict of tensors)")
      ->check(CLI::IsMember({"safetensors", "torch"}))
      ->capture_default_str();
  cmd->add_option("--output", o->output, "file to write")->required();
  cmd->callback([o] { run_export(*o); });
}

}  // namespace dlrun::cli
