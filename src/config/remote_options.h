// checkpoint.remote_* and the AWS environment turned into the S3 client's settings. Here, not
// in remote/, so that the S3 client depends on base/ alone and knows nothing of the config.
// The one place where S3 settings are made: remote checkpoints, s3:// shards and the commands'
// --remote-* flags all come through s3_config().
#pragma once

#include <string>

#include "config/options.h"
#include "remote/s3.h"

namespace dlrun::config {

/// The configuration of checkpoint.remote_*: endpoint (checkpoint.remote_endpoint, else
/// AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else AWS's for the region),
/// region (checkpoint.remote_region, else AWS_REGION, AWS_DEFAULT_REGION, the AWS_PROFILE
/// profile's region, else us-east-1), addressing (auto: virtual-host for AWS's endpoint, path
/// for any other), TLS (the CAs of checkpoint.remote_ca_bundle, else AWS_CA_BUNDLE, else the
/// system's store; checkpoint.remote_tls_min), server-side encryption (checkpoint.remote_sse*),
/// credentials from AWS's provider chain (remote/credentials.h; never from the config). Exit 2
/// when the environment or the shared files are inconsistent, the CA file cannot be read, or
/// the endpoint is plain http to another host without remote_allow_unencrypted_http. A plain
/// http endpoint is said in the log, once.
remote::S3Config s3_config(const CheckpointOptions& opts);

/// Whether `endpoint` may be used: https, or http to this machine (loopback), or http anywhere
/// when the user accepts the risk (`allow_unencrypted`).
bool plain_http_allowed(const std::string& endpoint, bool allow_unencrypted);

}  // namespace dlrun::config
