// --remote-* options (see remote_args.h).
#include "cli/remote_args.h"

#include <CLI/CLI.hpp>

#include "base/error.h"
#include "checkpoint/layout.h"
#include "config/remote_options.h"

namespace dlrun::cli {

void add_remote_args(CLI::App* cmd, RemoteArgs& a, bool writes) {
  cmd->add_option("--remote-endpoint", a.endpoint,
                  "for s3:// paths: the S3-compatible service's URL (default: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, "
                  "else AWS)");
  cmd->add_option("--remote-region", a.region, "for s3:// paths: the region (default: $AWS_REGION, us-east-1)");
  cmd->add_option("--remote-addressing", a.addressing, "for s3:// paths: auto | path | virtual")
      ->check(CLI::IsMember({"auto", "path", "virtual"}));
  cmd->add_option("--remote-ca-bundle", a.ca_bundle,
                  "for s3:// paths: PEM file of the CAs that sign the service's certificate (default: $AWS_CA_BUNDLE, "
                  "else the system's)");
  cmd->add_option("--remote-tls-min", a.tls_min, "for s3:// paths: the lowest TLS version accepted: 1.2 | 1.3");
  cmd->add_flag("--remote-allow-unencrypted-http", a.allow_unencrypted_http,
                "for s3:// paths: accept a plain http:// endpoint on another host (traffic and the session token "
                "travel unencrypted)");
  if (!writes) return;
  cmd->add_option("--remote-sse", a.sse, "server-side encryption of what is written: none | AES256 | aws:kms");
  cmd->add_option("--remote-sse-kms-key-id", a.sse_kms_key_id,
                  "with --remote-sse aws:kms: the KMS key (id, ARN or alias/NAME; default: the account's aws/s3 key)");
  cmd->add_flag("--remote-sse-bucket-key", a.sse_bucket_key, "with --remote-sse aws:kms: use an S3 Bucket Key");
}

CheckpointOptions remote_options(const RemoteArgs& a) {
  CheckpointOptions o;
  o.remote_endpoint = a.endpoint;
  o.remote_region = a.region;
  o.remote_addressing = parse_enum<S3Addressing>(a.addressing).value_or(S3Addressing::kAuto);  // checked by CLI11
  o.remote_ca_bundle = a.ca_bundle;
  o.remote_tls_min = parse_enum_or_fail<TlsFloor>(a.tls_min, "--remote-tls-min");
  o.remote_allow_unencrypted_http = a.allow_unencrypted_http;
  o.remote_sse = parse_enum_or_fail<ServerSideEncryption>(a.sse, "--remote-sse");
  o.remote_sse_kms_key_id = a.sse_kms_key_id;
  o.remote_sse_bucket_key = a.sse_bucket_key;
  DLRUN_CHECK_INPUT(o.remote_sse == ServerSideEncryption::kKms || (a.sse_kms_key_id.empty() && !a.sse_bucket_key),
                    "--remote-sse-kms-key-id and --remote-sse-bucket-key belong to SSE-KMS: add --remote-sse aws:kms");
  return o;
}

std::unique_ptr<ckpt::RemoteStore> remote_store_for(const std::string& url, const RemoteArgs& a, std::string* name) {
  CheckpointOptions o = remote_options(a);
  o.remote = url;
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
