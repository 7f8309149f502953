// Shared config arguments (see config_args.h).
#include "cli/config_args.h"

#include <CLI/CLI.hpp>

#include "base/log.h"
#include "config/loader.h"
#include "config/validate.h"
#include "world/world.h"

namespace dlrun::cli {

void add_config_args(CLI::App* cmd, ConfigArgs& a) {
  cmd->add_option("config", a.path, "experiment YAML file")->required();
  cmd->add_option("overrides", a.overrides, "dotted.key=value overrides (Hydra style)");
}

Config load_validated(const ConfigArgs& a) {
  Config cfg = config::load(a.path, a.overrides);
  for (const auto& w : config::validate(cfg, {dist::world_from_env({}, /*rendezvous=*/false).size})) log::warn("{}", w);
  return cfg;
}

}  // namespace dlrun::cli
