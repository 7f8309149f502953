// Shared config arguments (see config_args.h).
#include "cli/config_args.h"

#include <CLI/CLI.hpp>

#include "base/error.h"
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

void with_flag_names(const std::map<std::string, std::string>& flag_of, const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    if (e.code() != ExitCode::kBadInput) throw;
    std::string key = e.key(), message = e.message(), hint = e.hint();
    for (const auto& [k, flag] : flag_of) {
      if (key == k) key = flag;
      for (std::string* text : {&message, &hint})
        for (size_t at = text->find(k); at != std::string::npos; at = text->find(k, at + flag.size()))
          text->replace(at, k.size(), flag);
    }
    throw Error(ExitCode::kBadInput, key.empty() ? message : key + ": " + message, hint);
  }
}

}  // namespace dlrun::cli
