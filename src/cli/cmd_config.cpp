// `dlrun config show|validate CONFIG.yaml [key=value ...]`
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>

#include "base/log.h"
#include "cli/app.h"
#include "config/loader.h"
#include "config/validate.h"

namespace dlrun::cli {
namespace {

struct ConfigCmdOptions {
  std::string path;
  std::vector<std::string> overrides;
  bool no_docs = false;
};

int world_size_from_env() {
  const char* w = std::getenv("WORLD_SIZE");
  if (!w) w = std::getenv("SLURM_NTASKS");
  if (!w) w = std::getenv("OMPI_COMM_WORLD_SIZE");
  int n = w ? std::atoi(w) : 1;
  return n > 0 ? n : 1;
}

Config load_and_validate(const ConfigCmdOptions& o) {
  Config cfg = config::load(o.path, o.overrides);
  for (const auto& w : config::validate(cfg, {world_size_from_env()})) log::warn("{}", w);
  return cfg;
}

void add_common(CLI::App* sub, ConfigCmdOptions& o) {
  sub->add_option("config", o.path, "experiment YAML file")->required();
  sub->add_option("overrides", o.overrides, "dotted.key=value overrides (Hydra style)");
}

}  // namespace

void setup_config(CLI::App& app) {
  auto* cmd = app.add_subcommand("config", "show or check a resolved experiment config");
  cmd->require_subcommand(1);
  auto opts = std::make_shared<ConfigCmdOptions>();

  auto* show = cmd->add_subcommand("show", "print the resolved config (defaults included) as YAML");
  add_common(show, *opts);
  show->add_flag("--no-docs", opts->no_docs, "omit the one-line doc comments");
  show->callback([opts] {
    Config cfg = load_and_validate(*opts);
    std::string text = config::to_yaml(cfg, !opts->no_docs);
    std::fwrite(text.data(), 1, text.size(), stdout);  // only after everything succeeded
  });

  auto* validate = cmd->add_subcommand("validate", "check a config; exit 0 if valid, 2 if not");
  add_common(validate, *opts);
  validate->callback([opts] {
    load_and_validate(*opts);
    std::printf("%s: ok\n", opts->path.c_str());
  });
}

}  // namespace dlrun::cli
