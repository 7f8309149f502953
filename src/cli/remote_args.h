// The --remote-* options of the commands that accept s3:// paths (ckpt list, ckpt verify,
// export, data pack|index|verify): where an S3-compatible service is and how to reach it safely
// (TLS, server-side encryption of what they write), when the config file that would say it is
// not at hand. Credentials come from the environment only (AWS_ACCESS_KEY_ID, ...).
#pragma once

#include <memory>
#include <string>

#include "checkpoint/remote_store.h"
#include "config/options.h"

namespace CLI {
class App;
}

namespace dlrun::cli {

struct RemoteArgs {
  std::string endpoint;  ///< like checkpoint.remote_endpoint
  std::string region;    ///< like checkpoint.remote_region
  std::string addressing = "auto";
  std::string ca_bundle;                ///< like checkpoint.remote_ca_bundle
  std::string tls_min = "1.2";          ///< like checkpoint.remote_tls_min
  bool allow_unencrypted_http = false;  ///< like checkpoint.remote_allow_unencrypted_http
  std::string sse = "none";             ///< like checkpoint.remote_sse (commands that write)
  std::string sse_kms_key_id;           ///< like checkpoint.remote_sse_kms_key_id
  bool sse_bucket_key = false;          ///< like checkpoint.remote_sse_bucket_key
};

/// Adds the options to `cmd`; with `writes`, those of server-side encryption too.
void add_remote_args(CLI::App* cmd, RemoteArgs& args, bool writes = false);

/// The settings the options give, as the checkpoint.remote_* keys would (config::s3_config
/// turns them into the S3 client's); exit 2 for a KMS key or bucket key without aws:kms.
CheckpointOptions remote_options(const RemoteArgs& args);

/// The store holding `url` = s3://BUCKET/PREFIX/NAME: returns it for s3://BUCKET/PREFIX and
/// sets `name` to NAME, or, when `url` names the prefix itself (no step-N at its end), the
/// store for it and an empty `name`.
std::unique_ptr<ckpt::RemoteStore> remote_store_for(const std::string& url, const RemoteArgs& args, std::string* name);

}  // namespace dlrun::cli
