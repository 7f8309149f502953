// The `CONFIG.yaml [key=value ...]` arguments shared by train, eval and config.
#pragma once

#include <functional>
#include <map>
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

/// Run `f`, a command that builds its config from flags (`dlrun bench memory --checkpointing
/// stages`): a bad-input error naming a config key the user set through a flag (`flag_of`: key
/// -> flag) is rethrown naming the flag instead, so the user reads what they typed.
void with_flag_names(const std::map<std::string, std::string>& flag_of, const std::function<void()>& f);

}  // namespace dlrun::cli
