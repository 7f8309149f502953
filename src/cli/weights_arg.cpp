// --checkpoint PATH|auto|best (see weights_arg.h).
#include "cli/weights_arg.h"

#include <filesystem>

#include "base/error.h"
#include "base/fsutil.h"
#include "base/log.h"
#include "base/strings.h"
#include "run/run_dir.h"

namespace dlrun::cli {

const char* const kCheckpointHelp =
    "checkpoint directory, run directory, weights file from dlrun export (safetensors or torch, folded or not), "
    "auto (the run dir's LATEST when it verifies, else the newest that does: the one a resume takes), or best "
    "(the one checkpoint.keep_best kept)";

ckpt::WeightsRead read_checkpoint_arg(const Config& cfg, const std::string& checkpoint, const std::string& run_dir) {
  const auto on_skip = [](const std::string& p, const std::string& why) {
    log::warn("skipping checkpoint {}: {}", p, why);
  };
  if (checkpoint != "auto" && checkpoint != "best") return ckpt::read_weights(checkpoint, on_skip);
  const train::RunDir dir(train::resolve_run_dir(cfg, run_dir), cfg.checkpoint.dir);
  DLRUN_CHECK_INPUT(fsutil::is_directory(dir.checkpoints()),
                    "no checkpoints directory {} (use --checkpoint PATH or --run-dir)", dir.checkpoints());
  return ckpt::read_weights(checkpoint == "best" ? ckpt::best_checkpoint(dir.checkpoints()) : dir.checkpoints(),
                            on_skip);
}

bool is_override(const std::string& a) {
  const auto eq = a.find('=');
  if (eq == std::string::npos || a.find('/') < eq) return false;
  const std::string key = a.substr(0, eq);
  return key.find('.') != std::string::npos &&
         key.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_.") == std::string::npos;
}

bool is_yaml_name(const std::string& p) { return ends_with(p, ".yaml") || ends_with(p, ".yml"); }

std::string config_of_checkpoint(const std::string& checkpoint, const std::string& run_dir, const char* command) {
  const bool named = checkpoint == "auto" || checkpoint == "best";
  const std::string dir = named ? run_dir : checkpoint;
  DLRUN_CHECK_INPUT(!dir.empty() && std::filesystem::is_regular_file(dir + "/config.yaml"),
                    "no config given, and --checkpoint {}{} carries none (config.yaml): give the experiment YAML "
                    "first (an exported weights file holds the weights, not the model's config)",
                    checkpoint, named ? (run_dir.empty() ? " (without --run-dir)" : " --run-dir " + run_dir) : "");
  log::info("{}: the config from {}/config.yaml", command, dir);
  return dir + "/config.yaml";
}

}  // namespace dlrun::cli
