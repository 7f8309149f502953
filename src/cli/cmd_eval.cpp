// `dlrun eval CONFIG.yaml --checkpoint PATH|auto [key=value ...] [--run-dir DIR] [--json]`
// Evaluates the weights of a checkpoint (or of a torch.load-able weights file) on the
// config's evaluation split: top-1, top-5, loss.
#include <CLI/CLI.hpp>

#include <filesystem>

#include "base/log.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/tensor_file.h"
#include "cli/app.h"
#include "cli/config_args.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "models/model.h"
#include "train/evaluate.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace dlrun::cli {
namespace {

struct EvalCmdOptions {
  ConfigArgs config;
  std::string checkpoint;
  std::string run_dir;
  bool json = false;
};

/// name -> tensor from a checkpoint directory (verified) or a torch.load-able weights file.
ckpt::TensorDict load_weights(const std::string& path) {
  if (!fs::is_directory(path)) return ckpt::load_tensor_file(path);
  auto snap = ckpt::load(path);
  auto it = snap.tensor_files.find("model");
  DLRUN_CHECK_INPUT(it != snap.tensor_files.end(), "{}: checkpoint has no model.pt", path);
  return it->second;
}

void run_eval(const EvalCmdOptions& o) {
  Config cfg = load_validated(o.config);
  std::string path = o.checkpoint;
  if (path == "auto") {
    std::string run_dir = train::resolve_run_dir(cfg, o.run_dir);
    std::string dir = cfg.checkpoint.dir.empty() ? (fs::path(run_dir) / "checkpoints").string() : cfg.checkpoint.dir;
    DLRUN_CHECK_INPUT(fs::is_directory(dir), "no checkpoints directory {} (use --checkpoint PATH or --run-dir)", dir);
    auto latest = ckpt::latest_verified(dir, [](const std::string& p, const std::string& why) {
      log::warn("skipping checkpoint {}: {}", p, why);
    });
    DLRUN_CHECK_INPUT(latest.has_value(), "no checkpoint in {} verifies", dir);
    path = *latest;
  }
  torch::Device device = torch::kCPU;
  if (cfg.run.device != "cpu" && torch::cuda::is_available()) device = torch::Device(torch::kCUDA, 0);
  auto ds = data::open(cfg.data, data::Split::kEval, cfg.run.seed);
  auto info = ds->info();
  auto model = models::build(cfg.model, cfg.run.seed, info.height > 0 ? info.height : cfg.data.image_size);
  models::load_state_dict(*model, load_weights(path), path);
  model->to(device);
  data::LoaderSpec spec;
  spec.seed = cfg.run.seed;
  spec.device = device;
  spec.train = false;
  data::Loader loader(ds, cfg.data, spec);
  auto r = train::evaluate(*model, loader);
  nlohmann::json j = {{"checkpoint", path}, {"accuracy", r.accuracy}, {"top5", r.top5}, {"loss", r.loss},
                      {"samples", r.samples}};
  if (o.json) std::printf("%s\n", j.dump().c_str());
  else
    std::printf("%s: accuracy %.4f, top-5 %.4f, loss %.4f on %lld samples\n", path.c_str(), r.accuracy, r.top5, r.loss,
                static_cast<long long>(r.samples));
}

}  // namespace

void setup_eval(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "evaluate a checkpoint on the config's evaluation split");
  auto o = std::make_shared<EvalCmdOptions>();
  add_config_args(cmd, o->config);
  cmd->add_option("--checkpoint", o->checkpoint,
                  "checkpoint directory, weights file (torch.load-able dict), or auto (newest verified in the run dir)")
      ->required();
  cmd->add_option("--run-dir", o->run_dir, "run directory for --checkpoint auto");
  cmd->add_flag("--json", o->json, "print the result as JSON");
  cmd->callback([o] { run_eval(*o); });
}

}  // namespace dlrun::cli
