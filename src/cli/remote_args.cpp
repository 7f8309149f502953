// --remote-* options (see remote_args.h).
#include "cli/remote_args.h"

#include <CLI/CLI.hpp>

#include "checkpoint/layout.h"
#include "config/options.h"
#include "config/remote_options.h"

namespace dlrun::cli {

void add_remote_args(CLI::App* cmd, RemoteArgs& a) {
  cmd->add_option("--remote-endpoint", a.endpoint,
                  "for s3:// paths: the S3-compatible service's URL (default: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, "
                  "else AWS)");
  cmd->add_option("--remote-region", a.region, "for s3:// paths: the region (default: $AWS_REGION, us-east-1)");
  cmd->add_option("--remote-addressing", a.addressing, "for s3:// paths: auto | path | virtual")
      ->check(CLI::IsMember({"auto", "path", "virtual"}));
}

std::unique_ptr<ckpt::RemoteStore> remote_store_for(const std::string& url, const RemoteArgs& a, std::string* name) {
  CheckpointOptions o;
  o.remote = url;
  o.remote_endpoint = a.endpoint;
  o.remote_region = a.region;
  o.remote_addressing = parse_enum<S3Addressing>(a.addressing).value_or(S3Addressing::kAuto);  // checked by CLI11
  remote::S3Url u = remote::parse_s3_url(url, "path");
  name->clear();
  const auto slash = u.prefix.rfind('/');
  const std::string last = slash == std::string::npos ? u.prefix : u.prefix.substr(slash + 1);
  int64_t step = 0;
  std::string suffix;
  if (ckpt::detail::parse_dir_name(last, &step, &suffix) && suffix.empty()) {
    *name = last;
    u.prefix = slash == std::string::npos ? "" : u.prefix.substr(0, slash);
  }
  return std::make_unique<ckpt::RemoteStore>(config::s3_config(o), u);
}

}  // namespace dlrun::cli
