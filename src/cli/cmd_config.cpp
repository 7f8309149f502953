// `dlrun config show|validate CONFIG.yaml [key=value ...]` and `dlrun config docs`.
// show prints the resolved config (schema-level checks only, so a GPU config can be shown on
// a laptop); validate also runs what `dlrun train` checks at start-up on this machine (the
// device exists, the data opens and fits the model), so the two cannot disagree.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "base/log.h"
#include "cli/app.h"
#include "cli/config_args.h"
#include "config/loader.h"
#include "config/schema.h"
#include "config/validate.h"
#include "train/components.h"

namespace dlrun::cli {
namespace {

struct ConfigCmdOptions {
  ConfigArgs args;
  bool no_docs = false;
};

}  // namespace

void setup_config(CLI::App& app) {
  auto* cmd = app.add_subcommand("config", "show or check a resolved experiment config");
  cmd->require_subcommand(1);
  auto opts = std::make_shared<ConfigCmdOptions>();

  auto* show = cmd->add_subcommand("show", "print the resolved config (defaults included) as YAML");
  add_config_args(show, opts->args);
  show->add_flag("--no-docs", opts->no_docs, "omit the one-line doc comments");
  show->callback([opts] {
    Config cfg = load_validated(opts->args);
    std::string text = config::to_yaml(cfg, !opts->no_docs);
    std::fwrite(text.data(), 1, text.size(), stdout);  // only after everything succeeded
  });

  auto* validate = cmd->add_subcommand("validate", "check a config; exit 0 if valid, 2 if not");
  add_config_args(validate, opts->args);
  validate->callback([opts] {
    train::preflight(load_validated(opts->args));
    std::printf("%s: ok\n", opts->args.path.c_str());
  });

  auto* docs = cmd->add_subcommand("docs", "print the reference of every key (Markdown, as in docs/configuration.md)");
  docs->callback([] {
    const std::string text = config::reference_markdown();
    std::fwrite(text.data(), 1, text.size(), stdout);
  });
}

}  // namespace dlrun::cli
