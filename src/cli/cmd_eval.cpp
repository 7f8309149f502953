// `dlrun eval [CONFIG.yaml] --checkpoint PATH|auto|best [key=value ...] [--run-dir DIR] [--json] [--fold-batchnorm]
//  [--save-batch FILE]`
// Evaluates the weights of a checkpoint, a run directory or an exported weights file on the
// config's evaluation split: top-1, top-5, loss; a checkpoint's averages (ema.pt, swa.pt) too. The model, data and device come from the
// same build_components() as training; `auto` picks the checkpoint a resume would (the one
// LATEST names when it verifies, else the newest that does), `best` the one checkpoint.keep_best
// kept (cli/weights_arg.h).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"
#include "base/log.h"
#include "checkpoint/safetensors.h"
#include "cli/app.h"
#include "cli/config_args.h"
#include "cli/weights_arg.h"
#include "models/weights.h"
#include "train/components.h"
#include "train/observe/evaluate.h"

namespace dlrun::cli {
namespace {

struct EvalCmdOptions {
  ConfigArgs config;
  std::string checkpoint;
  std::string run_dir;
  bool json = false;
  bool fold_batchnorm = false;
  std::string save_batch;  ///< the first batch's images, labels and logits, as safetensors
  std::string weights = "raw";  ///< whose logits --save-batch writes: raw, or an average (ema, swa)
};

/// The evaluation split's first batch as the model sees it (after the evaluation transform) and
/// the logits it gives: what another runtime (onnxruntime, on an ONNX export) is checked against.
void save_first_batch(models::Model& model, data::Loader& loader, const std::string& path) {
  torch::NoGradGuard no_grad;
  model.eval();
  loader.start_epoch(0, 0);
  const auto b = loader.next();
  DLRUN_CHECK_INPUT(b.has_value(), "--save-batch: the evaluation split is empty");
  const auto logits = model.forward(b->x).to(torch::kCPU, torch::kFloat32);
  ckpt::write_safetensors(path, {{"images", b->x.to(torch::kCPU, torch::kFloat32)}, {"labels", b->y.to(torch::kCPU)},
                                 {"logits", logits}},
                          {{"fold_batchnorm", model.folded_batchnorm() ? "true" : "false"}});
  log::info("--save-batch: {} images, their labels and logits written to {}", b->x.size(0), path);
}

void run_eval(const EvalCmdOptions& o) {
  // The config is optional, as predict's: without one, the checkpoint's or run directory's.
  ConfigArgs ca = o.config;
  if (!ca.path.empty() && !is_yaml_name(ca.path) && is_override(ca.path)) {
    ca.overrides.insert(ca.overrides.begin(), ca.path);
    ca.path.clear();
  }
  if (ca.path.empty()) ca.path = config_of_checkpoint(o.checkpoint, o.run_dir, "eval");
  Config cfg = load_validated(ca);
  const ckpt::WeightsRead w = read_checkpoint_arg(cfg, o.checkpoint, o.run_dir);
  auto c = train::build_components(cfg, train::place(cfg), train::Purpose::kEval);
  models::LoadOptions lo;
  lo.allow_folded = true;
  lo.in_channels = cfg.model.in_channels;
  const auto report = models::load_weights(*c.model, w.tensors, w.path, lo);
  if (report.folded) log::info("{}: a folded export; its BatchNorms run as identities", w.path);
  c.model->use_folded_batchnorm(o.fold_batchnorm);
  const auto r = train::evaluate(*c.model, *c.eval_loader);
  if (!o.save_batch.empty() && o.weights == "raw") save_first_batch(*c.model, *c.eval_loader, o.save_batch);
  bool saved = o.save_batch.empty() || o.weights == "raw";
  nlohmann::json j = {{"checkpoint", w.path}, {"kind", w.kind}, {"accuracy", r.accuracy}, {"top5", r.top5},
                      {"loss", r.loss}, {"samples", r.samples}, {"device", c.placement.device.str()},
                      {"fold_batchnorm", o.fold_batchnorm}, {"folded_export", report.folded}};
  if (w.step >= 0) j["step"] = w.step;
  std::string ema_line;
  for (const auto& a : w.averages) {  // a checkpoint's averages (ema.pt, swa.pt): evaluated the same way
    models::load_weights(*c.model, a.tensors, w.path + "/" + a.name + ".pt", lo);
    const auto e = train::evaluate(*c.model, *c.eval_loader);
    j[a.name] = {{"accuracy", e.accuracy}, {"top5", e.top5}, {"loss", e.loss}, {"samples", e.samples}};
    ema_line += fmt::format("\n{}/{}.pt ({}): accuracy {:.4f}, top-5 {:.4f}, loss {:.4f}", w.path, a.name, a.what,
                            e.accuracy, e.top5, e.loss);
    if (!saved && a.name == o.weights) {  // the average's logits, to check its export elsewhere
      save_first_batch(*c.model, *c.eval_loader, o.save_batch);
      saved = true;
    }
  }
  std::vector<std::string> held;
  for (const auto& a : w.averages) held.push_back(a.name);
  DLRUN_CHECK_INPUT(saved, "--save-batch --weights {}: {} holds no such average (it has: {})", o.weights, w.path,
                    held.empty() ? std::string("none") : fmt::format("{}", fmt::join(held, ", ")));
  if (o.json) std::printf("%s\n", j.dump().c_str());
  else
    std::printf("%s: accuracy %.4f, top-5 %.4f, loss %.4f on %lld samples%s\n", w.path.c_str(), r.accuracy, r.top5,
                r.loss, static_cast<long long>(r.samples), ema_line.c_str());
}

}  // namespace

void setup_eval(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "evaluate a checkpoint on the config's evaluation split");
  auto o = std::make_shared<EvalCmdOptions>();
  cmd->add_option("config", o->config.path,
                  "experiment YAML file; optional: without it, the config.yaml of the checkpoint or run directory "
                  "--checkpoint names");
  cmd->add_option("overrides", o->config.overrides, "dotted.key=value overrides (Hydra style)");
  cmd->add_option("--checkpoint", o->checkpoint, kCheckpointHelp)->required();
  cmd->add_option("--run-dir", o->run_dir, "run directory for --checkpoint auto|best");
  cmd->add_flag("--json", o->json, "print the result as JSON");
  cmd->add_flag("--fold-batchnorm", o->fold_batchnorm,
                "fold every BatchNorm into the convolution before it (conv-BN-ReLU: one cuDNN conv-bias-ReLU call "
                "on CUDA); the same results within float rounding");
  cmd->add_option("--save-batch", o->save_batch,
                  "write the first evaluation batch (images as the model sees them, labels) and its logits to this "
                  "safetensors file: to check an exported model in another runtime");
  cmd->add_option("--weights", o->weights,
                  "whose logits --save-batch writes: raw (the trained weights) or an average the checkpoint holds "
                  "(ema, swa), as `dlrun export --weights` exports it")
      ->check(CLI::IsMember({"raw", "ema", "swa"}))
      ->capture_default_str();
  cmd->callback([o] { run_eval(*o); });
}

}  // namespace dlrun::cli
