// The --remote-* options of the commands that accept s3:// paths (ckpt list, ckpt verify,
// export): where an S3-compatible service is, when the config file that would say it is not
// at hand. Credentials come from the environment only (AWS_ACCESS_KEY_ID, ...).
#pragma once

#include <memory>
#include <string>

#include "checkpoint/remote_store.h"

namespace CLI {
class App;
}

namespace dlrun::cli {

struct RemoteArgs {
  std::string endpoint;  ///< like checkpoint.remote_endpoint
  std::string region;    ///< like checkpoint.remote_region
  std::string addressing = "auto";
};

void add_remote_args(CLI::App* cmd, RemoteArgs& args);

/// The store holding `url` = s3://BUCKET/PREFIX/NAME: returns it for s3://BUCKET/PREFIX and
/// sets `name` to NAME, or, when `url` names the prefix itself (no step-N at its end), the
/// store for it and an empty `name`.
std::unique_ptr<ckpt::RemoteStore> remote_store_for(const std::string& url, const RemoteArgs& args, std::string* name);

}  // namespace dlrun::cli
