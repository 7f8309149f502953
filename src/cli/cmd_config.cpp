// `dlrun config show|validate CONFIG.yaml [key=value ...]`
#include <CLI/CLI.hpp>

#include <cstdio>

#include "base/log.h"
#include "cli/app.h"
#include "cli/config_args.h"
#include "config/loader.h"
#include "config/validate.h"

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
    load_validated(opts->args);
    std::printf("%s: ok\n", opts->args.path.c_str());
  });
}

}  // namespace dlrun::cli
