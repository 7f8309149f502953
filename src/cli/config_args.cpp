// Shared config arguments (see config_args.h).
#include "cli/config_args.h"

#include <CLI/CLI.hpp>

#include <cstdlib>

#include "base/log.h"
#include "config/loader.h"
#include "config/validate.h"

namespace dlrun::cli {

int world_size_from_env() {
  for (const char* var : {"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"})
    if (const char* w = std::getenv(var)) {
      int n = std::atoi(w);
      if (n > 0) return n;
    }
  return 1;
}

void add_config_args(CLI::App* cmd, ConfigArgs& a) {
  cmd->add_option("config", a.path, "experiment YAML file")->required();
  cmd->add_option("overrides", a.overrides, "dotted.key=value overrides (Hydra style)");
}

Config load_validated(const ConfigArgs& a) {
  Config cfg = config::load(a.path, a.overrides);
  for (const auto& w : config::validate(cfg, {world_size_from_env()})) log::warn("{}", w);
  return cfg;
}

}  // namespace dlrun::cli
