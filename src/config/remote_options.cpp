// The S3 client's settings from checkpoint.remote_* and the environment (remote_options.h).
#include "config/remote_options.h"

#include "base/env.h"
#include "base/error.h"
#include "base/http.h"
#include "base/strings.h"
#include "remote/aws_profile.h"

namespace dlrun::config {

remote::S3Config s3_config(const CheckpointOptions& o) {
  remote::S3Config c;
  c.region = o.remote_region;
  if (c.region.empty()) c.region = env("AWS_REGION");
  if (c.region.empty()) c.region = env("AWS_DEFAULT_REGION");
  if (c.region.empty()) c.region = remote::profile_region();
  if (c.region.empty()) c.region = "us-east-1";
  std::string endpoint = o.remote_endpoint;
  if (endpoint.empty()) endpoint = env("AWS_ENDPOINT_URL_S3");
  if (endpoint.empty()) endpoint = env("AWS_ENDPOINT_URL");
  c.endpoint = strip_trailing(endpoint.empty() ? "https://s3." + c.region + ".amazonaws.com" : endpoint, '/');
  DLRUN_CHECK_INPUT(c.endpoint.rfind("http://", 0) == 0 || c.endpoint.rfind("https://", 0) == 0,
                    "checkpoint.remote_endpoint: '{}' must start with http:// or https://", c.endpoint);
  c.path_style = o.remote_addressing == S3Addressing::kPath ||
                 (o.remote_addressing == S3Addressing::kAuto && !endpoint.empty());
  c.part_bytes = static_cast<uint64_t>(o.remote_part_mb) << 20;
  DLRUN_CHECK_INPUT(http::available(), "checkpoint.remote needs libcurl, and dlrun was built without it");
  c.credentials = remote::credential_chain(c.region);  // never from the config
  return c;
}

}  // namespace dlrun::config
