// The `CONFIG.yaml [key=value ...]` arguments shared by train, eval and config.
#pragma once

#include <string>
#include <vector>

#include "config/options.h"

namespace CLI {
class App;
}

namespace dlrun::cli {

struct ConfigArgs {
  std::string path;
  std::vector<std::string> overrides;
};

/// Register the positional config path and overrides on `cmd`.
void add_config_args(CLI::App* cmd, ConfigArgs& args);

/// Load, apply overrides, validate (world size from the environment); warnings are logged.
Config load_validated(const ConfigArgs& args);

}  // namespace dlrun::cli
