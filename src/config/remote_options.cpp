// The S3 client's settings from checkpoint.remote_* and the environment (remote_options.h).
#include "config/remote_options.h"

#include <unistd.h>

#include <mutex>
#include <set>

#include "base/env.h"
#include "base/error.h"
#include "base/fsutil.h"
#include "base/http.h"
#include "base/log.h"
#include "base/strings.h"
#include "remote/aws_profile.h"

namespace dlrun::config {

namespace {

/// The first setting that has a value, and its name for messages.
struct Setting {
  std::string value, name;
};
Setting first_of(std::initializer_list<Setting> settings) {
  for (const Setting& s : settings)
    if (!s.value.empty()) return s;
  return {};
}

/// The run log says once per endpoint that its traffic is not encrypted.
void say_unencrypted(const std::string& endpoint, bool loopback) {
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mu);
  if (!said.insert(endpoint).second) return;
  if (loopback)
    log0::info("S3 at {}: plain http, unencrypted (a loopback address: the traffic stays on this machine)", endpoint);
  else
    log0::warn("S3 at {}: plain http: checkpoints, data, requests and the session token travel UNENCRYPTED "
               "(allowed by checkpoint.remote_allow_unencrypted_http / data.allow_unencrypted_http)",
               endpoint);
}

}  // namespace

bool plain_http_allowed(const std::string& endpoint, bool allow_unencrypted) {
  if (endpoint.rfind("http://", 0) != 0) return true;
  return allow_unencrypted || http::is_loopback_host(http::url_host(endpoint));
}

remote::S3Config s3_config(const CheckpointOptions& o) {
  remote::S3Config c;
  c.region = o.remote_region;
  if (c.region.empty()) c.region = env("AWS_REGION");
  if (c.region.empty()) c.region = env("AWS_DEFAULT_REGION");
  if (c.region.empty()) c.region = remote::profile_region();
  if (c.region.empty()) c.region = "us-east-1";
  const Setting endpoint = first_of({{o.remote_endpoint, "checkpoint.remote_endpoint"},
                                     {env("AWS_ENDPOINT_URL_S3"), "AWS_ENDPOINT_URL_S3"},
                                     {env("AWS_ENDPOINT_URL"), "AWS_ENDPOINT_URL"}});
  c.endpoint = strip_trailing(endpoint.value.empty() ? "https://s3." + c.region + ".amazonaws.com" : endpoint.value, '/');
  DLRUN_CHECK_INPUT(c.endpoint.rfind("http://", 0) == 0 || c.endpoint.rfind("https://", 0) == 0,
                    "{}: '{}' must start with http:// or https://", endpoint.name, c.endpoint);
  if (c.endpoint.rfind("http://", 0) == 0) {
    if (!plain_http_allowed(c.endpoint, o.remote_allow_unencrypted_http))
      throw Error(ExitCode::kBadInput,
                  fmt::format("{}: {} is plain http to another host: checkpoints, data, requests and the session token "
                              "would travel unencrypted",
                              endpoint.name, c.endpoint),
                  "use https://; or, on a network you trust, say so: checkpoint.remote_allow_unencrypted_http: true "
                  "(--remote-allow-unencrypted-http; data.allow_unencrypted_http for data.shards)");
    say_unencrypted(c.endpoint, http::is_loopback_host(http::url_host(c.endpoint)));
  }
  c.path_style = o.remote_addressing == S3Addressing::kPath ||
                 (o.remote_addressing == S3Addressing::kAuto && !endpoint.value.empty());
  c.part_bytes = static_cast<uint64_t>(o.remote_part_mb) << 20;
  const Setting ca = first_of({{o.remote_ca_bundle, "checkpoint.remote_ca_bundle"}, {env("AWS_CA_BUNDLE"), "AWS_CA_BUNDLE"}});
  DLRUN_CHECK_INPUT(ca.value.empty() || (fsutil::is_regular_file(ca.value) && ::access(ca.value.c_str(), R_OK) == 0),
                    "{}: {} is not a readable file (the PEM certificates of the CAs to trust)", ca.name, ca.value);
  c.ca_file = ca.value;
  c.tls_min = o.remote_tls_min == TlsFloor::k1_3 ? http::Tls::k1_3 : http::Tls::k1_2;
  if (o.remote_sse != ServerSideEncryption::kNone)
    c.sse = {name_of(o.remote_sse), o.remote_sse_kms_key_id, o.remote_sse_bucket_key};
  DLRUN_CHECK_INPUT(http::available(), "checkpoint.remote needs libcurl, and dlrun was built without it");
  c.credentials = remote::credential_chain(c.region);  // never from the config
  return c;
}

}  // namespace dlrun::config
