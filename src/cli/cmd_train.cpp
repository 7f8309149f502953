// `dlrun train CONFIG.yaml [key=value ...] [--run-dir DIR] [--resume auto|never|PATH]`
#include <CLI/CLI.hpp>

#include "base/error.h"
#include "base/log.h"
#include "cli/app.h"
#include "cli/config_args.h"
#include "config/diff.h"
#include "config/loader.h"
#include "world/world.h"
#include "preempt/preempt.h"
#include "run/run_dir.h"
#include "train/trainer.h"

namespace dlrun::cli {

void setup_train(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "train a model from an experiment file");
  auto o = std::make_shared<ConfigArgs>();
  auto t = std::make_shared<train::TrainArgs>();
  auto print_config = std::make_shared<bool>(false);
  add_config_args(cmd, *o);
  cmd->add_option("--run-dir", t->run_dir, "run directory (default: run.dir, else runs/<run.name>)");
  cmd->add_option("--resume", t->resume,
                  "auto: continue from the newest checkpoint that verifies (default); never: start fresh; "
                  "PATH: continue from that checkpoint directory");
  cmd->add_flag("--force", t->force, "with --resume never: set the earlier run in the run directory aside (nothing is deleted) and start fresh");
  cmd->add_option("--save-init", t->save_init, "write the initial weights (torch.load-able dict) to this file");
  cmd->add_flag("--print-config", *print_config,
                "print the whole resolved config at start (it is written to RUN_DIR/config.yaml in any case)");
  cmd->callback([o, t, print_config] {
    preempt::install_signal_handlers();  // first: SIGTERM while loading still means "requeue me" (75)
    // --force alone used to be ignored and the earlier run continued: say so instead.
    DLRUN_CHECK_INPUT(!t->force || t->resume == "never",
                      "--force only applies with --resume never (it sets an earlier run aside and starts fresh), "
                      "but --resume is {}: add --resume never to start fresh, or drop --force to continue",
                      t->resume);
    const dist::World world = dist::world_from_env();  // a bad launcher variable: exit 2 here
    log::set_rank(world.rank, world.size);
    train::TrainArgs args = *t;
    args.cfg = load_validated(*o);
    args.run_dir = train::resolve_run_dir(args.cfg, t->run_dir);
    if (*print_config) {
      log0::info("{}", "resolved config:\n" + config::to_yaml(args.cfg, false));
    } else {  // a short header: what this config sets; the whole of it is in the run directory
      std::string set;
      for (const config::Change& c : config::changes(Config{}, args.cfg)) set += "\n  " + c.key + ": " + c.after;
      // (config.yaml is written once the start-up checks pass: a refused start writes nothing)
      log0::info("config {}, run directory {}; set apart from the defaults:{}\n(the whole resolved config: "
                 "--print-config, or {}/config.yaml once training starts)",
                 o->path, args.run_dir, set.empty() ? " nothing" : set, args.run_dir);
    }
    int code = train::run(args);
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace dlrun::cli
