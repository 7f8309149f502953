// checkpoint.remote_* and the AWS environment turned into the S3 client's settings. Here, not
// in remote/, so that the S3 client depends on base/ alone and knows nothing of the config.
#pragma once

#include "config/options.h"
#include "remote/s3.h"

namespace dlrun::config {

/// The configuration of checkpoint.remote_*: endpoint (checkpoint.remote_endpoint, else
/// AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else AWS's for the region),
/// region (checkpoint.remote_region, else AWS_REGION, AWS_DEFAULT_REGION, the AWS_PROFILE
/// profile's region, else us-east-1), addressing (auto: virtual-host for AWS's endpoint, path
/// for any other), credentials from AWS's provider chain (remote/credentials.h; never from the
/// config; exit 2 when the environment or the shared files are inconsistent).
remote::S3Config s3_config(const CheckpointOptions& opts);

}  // namespace dlrun::config
