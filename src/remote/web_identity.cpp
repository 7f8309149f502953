// Web identity: STS AssumeRoleWithWebIdentity with a token file (see credential_sources.h).
#include <string>

#include "base/clock.h"
#include "base/env.h"
#include "base/error.h"
#include "base/fsutil.h"
#include "base/http.h"
#include "base/iso8601.h"
#include "base/strings.h"
#include "remote/credential_sources.h"
#include "remote/s3.h"
#include "remote/s3_error.h"
#include "remote/xml.h"

namespace dlrun::remote {
namespace {

std::string form_encode(const std::string& s) { return uri_encode(s, false); }

std::string sts_endpoint(const std::string& region) {
  std::string e = env("AWS_ENDPOINT_URL_STS");
  if (e.empty()) e = env("AWS_ENDPOINT_URL");
  if (e.empty()) e = "https://sts." + region + ".amazonaws.com";
  return strip_trailing(e, '/');
}

CredentialFetch web_identity_fetch(std::string token_file, std::string role_arn, std::string session,
                                   std::string region) {
  return [=](const std::atomic<bool>* cancel) {
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
    req.cancel = cancel;
    req.ca_file = env("AWS_CA_BUNDLE");  // as the SDKs read it, for every service they call
    const http::Response r = http::perform(req);
    const std::string where = "STS AssumeRoleWithWebIdentity at " + url;
    if (r.cancelled) throw S3Error(where + ": cancelled", 0, kCancelled);
    if (r.tls_refused) throw S3Error(where + ": TLS refused the service: " + r.error, 0, kTlsRefused);
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

}  // namespace

std::shared_ptr<CredentialProvider> web_identity(const std::string& token_file, const std::string& role_arn,
                                                 std::string session, const std::string& region,
                                                 const std::string& how) {
  if (session.empty()) session = fmt::format("dlrun-{}", static_cast<long long>(wall_now()));
  return refreshing_credentials(web_identity_fetch(token_file, role_arn, session, region),
                                fmt::format("web identity ({}, role {})", how, role_arn));
}

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

}  // namespace dlrun::remote
