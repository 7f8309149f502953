// The AWS credential provider chain (see credentials.h).
#include "remote/credentials.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/env.h"
#include "base/error.h"
#include "base/fsutil.h"
#include "base/iso8601.h"
#include "base/http.h"
#include "base/json_limits.h"
#include "base/log.h"
#include "base/strings.h"
#include "remote/s3.h"
#include "remote/s3_error.h"
#include "remote/xml.h"

namespace dlrun::remote {
namespace {

constexpr double kMaxEarly = 300;  // refresh at most 5 minutes before expiry ...
constexpr double kEarlyShare = 0.25;  // ... and at most a quarter of the lifetime before it
constexpr const char* kImdsDefault = "http://169.254.169.254";
constexpr const char* kEcsHost = "http://169.254.170.2";

// ---- fixed and refreshing ------------------------------------------------------------------

class Fixed : public CredentialProvider {
 public:
  Fixed(Credentials c, std::string source) : c_(std::move(c)), source_(std::move(source)) {}
  Credentials get() override { return c_; }
  void expired(const Credentials&) override {}
  bool refreshable() const override { return false; }
  std::string source() const override { return source_; }

 private:
  Credentials c_;
  std::string source_;
};

class Refreshing : public CredentialProvider {
 public:
  Refreshing(std::function<Credentials()> fetch, std::string source, std::function<double()> clock, double retry_s)
      : fetch_(std::move(fetch)), source_(std::move(source)), clock_(clock ? std::move(clock) : wall_now),
        retry_s_(retry_s) {}

  Credentials get() override {
    std::lock_guard<std::mutex> lock(mu_);
    const double now = clock_();
    if (cur_ && !due(now)) return *cur_;
    const bool usable = cur_ && (cur_->expires <= 0 || now < cur_->expires);
    if (usable && now < next_try_) return *cur_;  // a refresh failed a moment ago
    try {
      Credentials c = fetch_();
      cur_ = c;
      fetched_at_ = now;
      if (refreshes_++ > 0) log::debug("credentials from {} refreshed", source_);
      return c;
    } catch (const S3Error& e) {
      if (!usable) throw;
      next_try_ = now + retry_s_;
      log::warn("cannot refresh the credentials from {} ({}); the current ones are used until they expire in {:.0f} s",
                source_, e.what(), cur_->expires - now);
      return *cur_;
    }
  }
  void expired(const Credentials& refused) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cur_ || cur_->access_key != refused.access_key || cur_->session_token != refused.session_token) return;
    cur_->expires = std::min(cur_->expires > 0 ? cur_->expires : 1.0, clock_());
    next_try_ = 0;
  }
  bool refreshable() const override { return true; }
  std::string source() const override { return source_; }

 private:
  bool due(double now) const {
    if (cur_->expires <= 0) return false;
    const double early = std::min(kMaxEarly, kEarlyShare * std::max(0.0, cur_->expires - fetched_at_));
    return now >= cur_->expires - early;
  }
  std::function<Credentials()> fetch_;
  std::string source_;
  std::function<double()> clock_;
  double retry_s_;
  std::mutex mu_;
  std::optional<Credentials> cur_;
  double fetched_at_ = 0, next_try_ = 0;
  int refreshes_ = 0;
};

// ---- the shared files ----------------------------------------------------------------------

using Section = std::map<std::string, std::string>;
using IniFile = std::map<std::string, Section>;

/// AWS's INI files: [section], key = value, comments from '#' or ';' at a line's start.
/// Indented lines continue a nested setting (s3 = ...) and are skipped.
IniFile read_ini(const std::string& path) {
  IniFile out;
  if (!fsutil::is_regular_file(path)) return out;
  std::string text;
  try {
    text = fsutil::read_file(path);
  } catch (const Error& e) {
    throw Error(ExitCode::kBadInput, fmt::format("{}: cannot read the AWS credentials file: {}", path, e.message()));
  }
  Section* cur = nullptr;
  size_t at = 0;
  while (at < text.size()) {
    const size_t nl = text.find('\n', at);
    std::string line = text.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    at = nl == std::string::npos ? text.size() : nl + 1;
    const bool indented = !line.empty() && (line[0] == ' ' || line[0] == '\t');
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';' || indented) continue;
    if (line.front() == '[' && line.back() == ']') {
      cur = &out[trim(line.substr(1, line.size() - 2))];
      continue;
    }
    const auto eq = line.find('=');
    if (eq == std::string::npos || !cur) continue;
    (*cur)[lower(trim(line.substr(0, eq)))] = trim(line.substr(eq + 1));
  }
  return out;
}

std::string home_file(const char* var, const char* rel) {
  std::string p = env(var);
  if (!p.empty()) return p;
  const std::string home = env("HOME");
  return home.empty() ? std::string() : home + "/" + rel;
}

struct Profile {
  std::string name;
  bool explicit_name = false;  ///< AWS_PROFILE was set
  std::string credentials_file, config_file;
  const Section* in_credentials = nullptr;
  const Section* in_config = nullptr;
  IniFile creds, config;
};

Profile load_profile() {
  Profile p;
  p.name = env("AWS_PROFILE");
  p.explicit_name = !p.name.empty();
  if (p.name.empty()) p.name = "default";
  p.credentials_file = home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  p.config_file = home_file("AWS_CONFIG_FILE", ".aws/config");
  if (!p.credentials_file.empty()) p.creds = read_ini(p.credentials_file);
  if (!p.config_file.empty()) p.config = read_ini(p.config_file);
  if (auto it = p.creds.find(p.name); it != p.creds.end()) p.in_credentials = &it->second;
  // The config file names its sections "profile NAME", except [default].
  for (const std::string& s : {"profile " + p.name, p.name}) {
    if (s == p.name && p.name != "default") continue;
    if (auto it = p.config.find(s); it != p.config.end()) {
      p.in_config = &it->second;
      break;
    }
  }
  return p;
}

std::string get(const Section* s, const char* key) {
  if (!s) return "";
  auto it = s->find(key);
  return it == s->end() ? std::string() : it->second;
}

// ---- web identity (STS) --------------------------------------------------------------------

std::string form_encode(const std::string& s) { return uri_encode(s, false); }

std::string sts_endpoint(const std::string& region) {
  std::string e = env("AWS_ENDPOINT_URL_STS");
  if (e.empty()) e = env("AWS_ENDPOINT_URL");
  if (e.empty()) e = "https://sts." + region + ".amazonaws.com";
  return strip_trailing(e, '/');
}

std::function<Credentials()> web_identity_fetch(std::string token_file, std::string role_arn, std::string session,
                                                std::string region) {
  return [=] {
    std::string token;
    try {
      token = trim(fsutil::read_file(token_file));
    } catch (const Error& e) {
      throw S3Error(fmt::format("web identity: cannot read the token file {}: {}", token_file, e.message()), 0, "");
    }
    if (token.empty()) throw S3Error(fmt::format("web identity: the token file {} is empty", token_file), 0, "");
    const std::string url = sts_endpoint(region) + "/";
    const std::string body = "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=" + form_encode(role_arn) +
                             "&RoleSessionName=" + form_encode(session) + "&WebIdentityToken=" + form_encode(token);
    http::Request req;
    req.method = "POST";
    req.url = url;
    req.body = &body;
    req.headers = {"Content-Type: application/x-www-form-urlencoded; charset=utf-8", "Accept: application/xml"};
    req.connect_timeout_ms = 5000;
    req.timeout_ms = 15000;
    const http::Response r = http::perform(req);
    const std::string where = "STS AssumeRoleWithWebIdentity at " + url;
    if (r.status == 0) throw S3Error(where + ": no answer: " + r.error, 0, "");
    if (r.status != 200) {
      const ErrorAnswer err = parse_error_answer(r.body);
      // An expired or not-yet-valid token, throttling, the identity provider unreachable:
      // the next try may work (EKS writes a fresh token well before the old one expires).
      const bool again = r.status >= 500 || r.status == 429 || err.code == "IDPCommunicationError" ||
                         err.code == "InvalidIdentityToken" || err.code == "ExpiredTokenException" ||
                         err.code == "Throttling";
      throw S3Error(fmt::format("{}: HTTP {} {}{}", where, r.status, err.code, err.message.empty() ? "" : ": " + err.message),
                    r.status, err.code.empty() ? "StsError" : err.code, again);
    }
    return parse_sts_credentials(r.body, where);
  };
}

std::shared_ptr<CredentialProvider> web_identity(const std::string& token_file, const std::string& role_arn,
                                                 std::string session, const std::string& region,
                                                 const std::string& how) {
  if (session.empty()) session = fmt::format("dlrun-{}", static_cast<long long>(wall_now()));
  return refreshing_credentials(web_identity_fetch(token_file, role_arn, session, region),
                                fmt::format("web identity ({}, role {})", how, role_arn));
}

// ---- container and instance metadata -------------------------------------------------------

/// http:// container endpoints are allowed on the hosts AWS's agents listen on only.
bool allowed_container_url(const std::string& url) {
  const bool https = url.rfind("https://", 0) == 0;
  if (!https && url.rfind("http://", 0) != 0) return false;
  const std::string authority = url.substr(https ? 8 : 7, url.find_first_of("/?#", https ? 8 : 7) - (https ? 8 : 7));
  if (authority.empty() || authority.find('@') != std::string::npos) return false;  // no user:password@ tricks
  if (https) return true;
  std::string host = authority;
  if (host[0] == '[') host = host.substr(0, host.find(']') + 1);
  else host = host.substr(0, host.find(':'));
  // A literal loopback IPv4 address: 127. and then digits and dots only.
  const bool loopback4 = host.rfind("127.", 0) == 0 && std::count(host.begin(), host.end(), '.') == 3 &&
                         host.find_first_not_of("0123456789.") == std::string::npos;
  return loopback4 || host == "localhost" || host == "[::1]" || host == "169.254.170.2" ||
         host == "169.254.170.23" || host == "[fd00:ec2::23]";
}

http::Response metadata_get(const std::string& method, const std::string& url, std::vector<std::string> headers) {
  http::Request req;
  req.method = method;
  req.url = url;
  req.headers = std::move(headers);
  req.connect_timeout_ms = 1000;
  req.timeout_ms = 3000;
  return http::perform(req);
}

std::function<Credentials()> container_fetch(std::string url) {
  return [url] {
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
    const http::Response r = metadata_get("GET", url, headers);
    const std::string where = "container credentials at " + url;
    if (r.status == 0) throw S3Error(where + ": no answer: " + r.error, 0, "");
    if (r.status != 200)
      throw S3Error(fmt::format("{}: HTTP {}", where, r.status), r.status, "CredentialsRefused", r.status >= 500 || r.status == 429);
    return parse_json_credentials(r.body, where);
  };
}

std::function<Credentials()> imds_fetch(std::string base) {
  auto answered = std::make_shared<bool>(false);  // once it has answered, a silence is a hiccup
  return [base, answered] {
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
    http::Response t = metadata_get("PUT", base + "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds: 21600"});
    if (t.status == 0) throw fail(where + ": no answer: " + t.error, 0);
    if (t.status == 200) headers.push_back("X-aws-ec2-metadata-token: " + trim(t.body));
    else if (t.status != 403 && t.status != 404 && t.status != 405)  // those: IMDSv1 only
      throw fail(fmt::format("{}: HTTP {} to the session token request", where, t.status), t.status);
    const std::string list_url = base + "/latest/meta-data/iam/security-credentials/";
    http::Response roles = metadata_get("GET", list_url, headers);
    if (roles.status == 404) throw fail(where + ": this instance has no IAM role", 404);
    if (roles.status != 200) throw fail(fmt::format("{}: HTTP {} listing the instance's role", where, roles.status), roles.status);
    const std::string role = trim(roles.body.substr(0, roles.body.find('\n')));
    if (role.empty() || role.find('/') != std::string::npos)
      throw S3Error(where + ": no role name in the answer", 200, kMalformed);
    http::Response c = metadata_get("GET", list_url + role, headers);
    if (c.status != 200) throw fail(fmt::format("{}: HTTP {} for role {}", where, c.status, role), c.status);
    Credentials out = parse_json_credentials(c.body, where);
    *answered = true;
    return out;
  };
}

}  // namespace

// ---- public --------------------------------------------------------------------------------

Credentials parse_sts_credentials(const std::string& body, const std::string& where) {
  XmlElement root;
  try {
    root = parse_xml(body);
  } catch (const XmlError& e) {
    throw S3Error(where + ": " + e.what(), 200, kMalformed);
  }
  const XmlElement* result = root.child("AssumeRoleWithWebIdentityResult");
  const XmlElement* c = result ? result->child("Credentials") : nullptr;
  if (root.name != "AssumeRoleWithWebIdentityResponse" || !c)
    throw S3Error(where + ": the answer holds no AssumeRoleWithWebIdentityResult/Credentials", 200, kMalformed);
  Credentials out{c->child_text("AccessKeyId"), c->child_text("SecretAccessKey"), c->child_text("SessionToken"), 0};
  const auto exp = parse_iso8601(c->child_text("Expiration"));
  if (out.access_key.empty() || out.secret_key.empty() || out.session_token.empty() || !exp)
    throw S3Error(where + ": the credentials lack AccessKeyId, SecretAccessKey, SessionToken or a valid Expiration",
                  200, kMalformed);
  out.expires = *exp;
  return out;
}

Credentials parse_json_credentials(const std::string& body, const std::string& where) {
  nlohmann::json j;
  try {
    j = parse_json_capped(body, 8);
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

std::shared_ptr<CredentialProvider> fixed_credentials(Credentials c, std::string source) {
  return std::make_shared<Fixed>(std::move(c), std::move(source));
}

std::shared_ptr<CredentialProvider> refreshing_credentials(std::function<Credentials()> fetch, std::string source,
                                                           std::function<double()> clock, double retry_s) {
  return std::make_shared<Refreshing>(std::move(fetch), std::move(source), std::move(clock), retry_s);
}

std::string profile_region() {
  const Profile p = load_profile();
  return get(p.in_config, "region");
}

std::shared_ptr<CredentialProvider> credential_chain(const std::string& region) {
  // 1. The environment.
  const std::string id = env("AWS_ACCESS_KEY_ID"), secret = env("AWS_SECRET_ACCESS_KEY");
  if (!id.empty() || !secret.empty()) {
    DLRUN_CHECK_INPUT(!id.empty() && !secret.empty(),
                      "the environment sets {} but not {}: set both (and AWS_SESSION_TOKEN for temporary keys), or "
                      "neither to use the next source of credentials",
                      id.empty() ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID",
                      id.empty() ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY");
    return fixed_credentials({id, secret, env("AWS_SESSION_TOKEN"), 0}, "the environment (AWS_ACCESS_KEY_ID)");
  }
  // 2. The shared files, profile AWS_PROFILE.
  const Profile p = load_profile();
  for (const auto& [section, file] : {std::pair{p.in_credentials, p.credentials_file}, std::pair{p.in_config, p.config_file}}) {
    if (!section) continue;
    const std::string where = fmt::format("profile {} in {}", p.name, file);
    const std::string key = get(section, "aws_access_key_id"), sec = get(section, "aws_secret_access_key");
    if (!key.empty() || !sec.empty()) {
      DLRUN_CHECK_INPUT(!key.empty() && !sec.empty(), "{}: aws_access_key_id and aws_secret_access_key go together",
                        where);
      return fixed_credentials({key, sec, get(section, "aws_session_token"), 0}, where);
    }
    if (const std::string file_tok = get(section, "web_identity_token_file"); !file_tok.empty()) {
      const std::string arn = get(section, "role_arn");
      DLRUN_CHECK_INPUT(!arn.empty(), "{}: web_identity_token_file needs role_arn", where);
      return web_identity(file_tok, arn, get(section, "role_session_name"), region, where);
    }
    for (const char* other : {"source_profile", "credential_source", "credential_process", "sso_session", "sso_start_url"})
      if (!get(section, other).empty())
        throw Error(ExitCode::kBadInput, fmt::format("{}: {} is a kind of profile dlrun does not resolve", where, other),
                    "export the credentials it yields into the environment (e.g. eval \"$(aws configure "
                    "export-credentials --profile " + p.name + " --format env)\"), or use static keys, web identity, "
                    "container or instance credentials (docs/checkpoints.md, \"Credentials\")");
  }
  DLRUN_CHECK_INPUT(!p.explicit_name || p.in_credentials || p.in_config,
                    "AWS_PROFILE={}: no such profile in {} or {}", p.name,
                    p.credentials_file.empty() ? "~/.aws/credentials" : p.credentials_file,
                    p.config_file.empty() ? "~/.aws/config" : p.config_file);
  // 3. Web identity from the environment.
  const std::string token_file = env("AWS_WEB_IDENTITY_TOKEN_FILE"), role = env("AWS_ROLE_ARN");
  if (!token_file.empty() || !role.empty()) {
    DLRUN_CHECK_INPUT(!token_file.empty() && !role.empty(),
                      "web identity needs both AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN (only {} is set)",
                      token_file.empty() ? "AWS_ROLE_ARN" : "AWS_WEB_IDENTITY_TOKEN_FILE");
    return web_identity(token_file, role, env("AWS_ROLE_SESSION_NAME"), region, "AWS_WEB_IDENTITY_TOKEN_FILE");
  }
  // 4. The container endpoint.
  if (const std::string rel = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"); !rel.empty()) {
    const std::string url = kEcsHost + (rel[0] == '/' ? rel : "/" + rel);
    return refreshing_credentials(container_fetch(url), "container credentials (" + url + ")");
  }
  if (const std::string full = env("AWS_CONTAINER_CREDENTIALS_FULL_URI"); !full.empty()) {
    DLRUN_CHECK_INPUT(allowed_container_url(full),
                      "AWS_CONTAINER_CREDENTIALS_FULL_URI={}: an http:// endpoint must be on a loopback address or "
                      "the ECS/EKS agent's (169.254.170.2, 169.254.170.23); use https:// elsewhere",
                      full);
    return refreshing_credentials(container_fetch(full), "container credentials (" + full + ")");
  }
  // 5. The instance role.
  DLRUN_CHECK_INPUT(lower(env("AWS_EC2_METADATA_DISABLED")) != "true",
                    "no AWS credentials: none in the environment (AWS_ACCESS_KEY_ID), no profile '{}' in the shared "
                    "files, no web identity or container credentials, and the instance metadata service is disabled "
                    "(AWS_EC2_METADATA_DISABLED=true)",
                    p.name);
  std::string base = env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
  if (base.empty()) base = kImdsDefault;
  base = strip_trailing(base, '/');
  return refreshing_credentials(imds_fetch(base), "the EC2 instance role (" + base + ")");
}

}  // namespace dlrun::remote
