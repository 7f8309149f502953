// `dlrun eval CONFIG.yaml --checkpoint PATH|auto [key=value ...] [--run-dir DIR] [--json] [--fold-batchnorm]`
// Evaluates the weights of a checkpoint, a run directory or an exported weights file on the
// config's evaluation split: top-1, top-5, loss. The model, data and device come from the
// same build_components() as training, and `auto` picks the checkpoint a resume would (the one
// LATEST names when it verifies, else the newest that does).
#include <CLI/CLI.hpp>

#include "base/fsutil.h"
#include "base/log.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/weights_file.h"
#include "cli/app.h"
#include "cli/config_args.h"
#include "models/weights.h"
#include "train/components.h"
#include "train/evaluate.h"
#include "run/run_dir.h"

namespace dlrun::cli {
namespace {

struct EvalCmdOptions {
  ConfigArgs config;
  std::string checkpoint;
  std::string run_dir;
  bool json = false;
  bool fold_batchnorm = false;
};

void run_eval(const EvalCmdOptions& o) {
  Config cfg = load_validated(o.config);
  const auto on_skip = [](const std::string& p, const std::string& why) { log::warn("skipping checkpoint {}: {}", p, why); };
  ckpt::WeightsRead w;
  if (o.checkpoint == "auto") {
    const train::RunDir dir(train::resolve_run_dir(cfg, o.run_dir), cfg.checkpoint.dir);
    DLRUN_CHECK_INPUT(fsutil::is_directory(dir.checkpoints()),
                      "no checkpoints directory {} (use --checkpoint PATH or --run-dir)", dir.checkpoints());
    w = ckpt::read_weights(dir.checkpoints(), on_skip);
  } else {
    w = ckpt::read_weights(o.checkpoint, on_skip);  // a checkpoint, a run directory, or an exported file
  }
  auto c = train::build_components(cfg, train::place(cfg), train::Purpose::kEval);
  models::LoadOptions lo;
  lo.allow_folded = true;
  lo.in_channels = cfg.model.in_channels;
  const auto report = models::load_weights(*c.model, w.tensors, w.path, lo);
  if (report.folded) log::info("{}: a folded export; its BatchNorms run as identities", w.path);
  c.model->use_folded_batchnorm(o.fold_batchnorm);
  const auto r = train::evaluate(*c.model, *c.eval_loader);
  nlohmann::json j = {{"checkpoint", w.path}, {"kind", w.kind}, {"accuracy", r.accuracy}, {"top5", r.top5},
                      {"loss", r.loss}, {"samples", r.samples}, {"device", c.placement.device.str()},
                      {"fold_batchnorm", o.fold_batchnorm}, {"folded_export", report.folded}};
  if (w.step >= 0) j["step"] = w.step;
  if (o.json) std::printf("%s\n", j.dump().c_str());
  else
    std::printf("%s: accuracy %.4f, top-5 %.4f, loss %.4f on %lld samples\n", w.path.c_str(), r.accuracy, r.top5,
                r.loss, static_cast<long long>(r.samples));
}

}  // namespace

void setup_eval(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "evaluate a checkpoint on the config's evaluation split");
  auto o = std::make_shared<EvalCmdOptions>();
  add_config_args(cmd, o->config);
  cmd->add_option("--checkpoint", o->checkpoint,
                  "checkpoint directory, run directory, weights file from dlrun export (safetensors or torch, "
                  "folded or not), or auto (the run dir's LATEST when it verifies, else the newest that does: the one "
                  "a resume takes)")
      ->required();
  cmd->add_option("--run-dir", o->run_dir, "run directory for --checkpoint auto");
  cmd->add_flag("--json", o->json, "print the result as JSON");
  cmd->add_flag("--fold-batchnorm", o->fold_batchnorm,
                "fold every BatchNorm into the convolution before it (conv-BN-ReLU: one cuDNN conv-bias-ReLU call "
                "on CUDA); the same results within float rounding");
  cmd->callback([o] { run_eval(*o); });
}

}  // namespace dlrun::cli
