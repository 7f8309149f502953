// The container agent's and the EC2 instance metadata service's credentials (see
// credential_sources.h). Both answer the same JSON; both are asked with short timeouts, being
// on this host or one hop away.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/env.h"
#include "base/error.h"
#include "base/fsutil.h"
#include "base/http.h"
#include "base/iso8601.h"
#include "base/json_limits.h"
#include "base/strings.h"
#include "remote/credential_sources.h"
#include "remote/s3_error.h"

namespace dlrun::remote {
namespace {

/// One request to a metadata endpoint; abandoned through `cancel`, it throws S3Error kCancelled
/// naming `where`.
http::Response metadata_get(const std::string& method, const std::string& url, std::vector<std::string> headers,
                            const std::atomic<bool>* cancel, const std::string& where) {
  http::Request req;
  req.method = method;
  req.url = url;
  req.headers = std::move(headers);
  req.connect_timeout_ms = 1000;
  req.timeout_ms = 3000;
  req.cancel = cancel;
  http::Response r = http::perform(req);
  if (r.cancelled) throw S3Error(where + ": cancelled", 0, kCancelled);
  return r;
}

CredentialFetch container_fetch(std::string url) {
  return [url](const std::atomic<bool>* cancel) {
    std::vector<std::string> headers;
    std::string auth;
    if (const std::string file = env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"); !file.empty()) {
      try {
        auth = trim(fsutil::read_file(file));
      } catch (const Error& e) {
        throw S3Error(fmt::format("container credentials: cannot read {}: {}", file, e.message()), 0, "");
      }
    } else {
      auth = env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
    }
    if (!auth.empty()) headers.push_back("Authorization: " + auth);
    const std::string where = "container credentials at " + url;
    const http::Response r = metadata_get("GET", url, headers, cancel, where);
    if (r.status == 0) throw S3Error(where + ": no answer: " + r.error, 0, "");
    if (r.status != 200)
      throw S3Error(fmt::format("{}: HTTP {}", where, r.status), r.status, "CredentialsRefused", r.status >= 500 || r.status == 429);
    return parse_json_credentials(r.body, where);
  };
}

CredentialFetch imds_fetch(std::string base) {
  auto answered = std::make_shared<bool>(false);  // once it has answered, a silence is a hiccup
  return [base, answered](const std::atomic<bool>* cancel) {
    const auto fail = [&](const std::string& what, long status) -> S3Error {
      if (status >= 500 || status == 429) return S3Error(what, status, "");  // there, and busy: try again
      if (!*answered)
        return S3Error(fmt::format("{} (no earlier source in the chain was configured: see docs/checkpoints.md, "
                                   "\"Credentials\")", what),
                       status, kNoCredentials);
      return S3Error(what, status, "");
    };
    const std::string where = "the EC2 instance metadata service at " + base;
    std::vector<std::string> headers;
    http::Response t = metadata_get("PUT", base + "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds: 21600"},
                                     cancel, where);
    if (t.status == 0) throw fail(where + ": no answer: " + t.error, 0);
    if (t.status == 200) headers.push_back("X-aws-ec2-metadata-token: " + trim(t.body));
    else if (t.status != 403 && t.status != 404 && t.status != 405)  // those: IMDSv1 only
      throw fail(fmt::format("{}: HTTP {} to the session token request", where, t.status), t.status);
    const std::string list_url = base + "/latest/meta-data/iam/security-credentials/";
    http::Response roles = metadata_get("GET", list_url, headers, cancel, where);
    if (roles.status == 404) throw fail(where + ": this instance has no IAM role", 404);
    if (roles.status != 200) throw fail(fmt::format("{}: HTTP {} listing the instance's role", where, roles.status), roles.status);
    const std::string role = trim(roles.body.substr(0, roles.body.find('\n')));
    if (role.empty() || role.find('/') != std::string::npos)
      throw S3Error(where + ": no role name in the answer", 200, kMalformed);
    http::Response c = metadata_get("GET", list_url + role, headers, cancel, where);
    if (c.status != 200) throw fail(fmt::format("{}: HTTP {} for role {}", where, c.status, role), c.status);
    Credentials out = parse_json_credentials(c.body, where);
    *answered = true;
    return out;
  };
}

}  // namespace

bool allowed_container_url(const std::string& url) {
  const bool https = url.rfind("https://", 0) == 0;
  if (!https && url.rfind("http://", 0) != 0) return false;
  const std::string host = http::url_host(url);
  if (host.empty()) return false;
  if (https) return true;
  return http::is_loopback_host(host) || host == "169.254.170.2" || host == "169.254.170.23" || host == "[fd00:ec2::23]";
}

std::shared_ptr<CredentialProvider> container_credentials(const std::string& url) {
  return refreshing_credentials(container_fetch(url), "container credentials (" + url + ")");
}

std::shared_ptr<CredentialProvider> instance_credentials(const std::string& base) {
  return refreshing_credentials(imds_fetch(base), "the EC2 instance role (" + base + ")");
}

Credentials parse_json_credentials(const std::string& body, const std::string& where) {
  nlohmann::json j;
  try {
    j = parse_json_capped(body, 8);
  } catch (const nlohmann::json::parse_error& e) {
    // Only where: the parser's message quotes the text it last read, which can be a secret.
    throw S3Error(fmt::format("{}: the answer is not JSON (at byte {})", where, e.byte), 200, kMalformed);
  } catch (const std::exception& e) {
    throw S3Error(fmt::format("{}: the answer is not JSON ({})", where, e.what()), 200, kMalformed);
  }
  auto text = [&](const char* key) {
    auto it = j.is_object() ? j.find(key) : j.end();
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (const std::string code = text("Code"); !code.empty() && code != "Success")
    throw S3Error(fmt::format("{}: the service answered Code {}", where, code), 200, "CredentialsRefused", true);
  Credentials out{text("AccessKeyId"), text("SecretAccessKey"), text("Token"), 0};
  if (out.access_key.empty() || out.secret_key.empty())
    throw S3Error(where + ": the answer has no AccessKeyId and SecretAccessKey", 200, kMalformed);
  if (const std::string e = text("Expiration"); !e.empty()) {
    const auto t = parse_iso8601(e);
    if (!t) throw S3Error(where + ": Expiration is not an ISO 8601 time", 200, kMalformed);
    out.expires = *t;
  }
  return out;
}

}  // namespace dlrun::remote
