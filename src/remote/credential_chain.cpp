// The order in which the credential sources are tried (see credentials.h): the first source
// that is configured is the one used; an inconsistent configuration is refused at start-up.
#include <string>
#include <tuple>

#include "base/env.h"
#include "base/error.h"
#include "base/strings.h"
#include "remote/aws_profile.h"
#include "remote/credential_sources.h"
#include "remote/credentials.h"
#include "remote/s3_error.h"

namespace dlrun::remote {
namespace {

constexpr const char* kImdsDefault = "http://169.254.169.254";
constexpr const char* kEcsHost = "http://169.254.170.2";

/// What one file's section of the profile configures: static keys, or a role with a web
/// identity token file; nullptr when neither. Refuses the kinds of profile dlrun does not run.
std::shared_ptr<CredentialProvider> from_profile_section(const AwsProfile& p, bool found, const IniSection& section,
                                                         const std::string& file, const std::string& region) {
  if (!found) return nullptr;
  const auto get = [&](const char* key) { return ini_value(section, key); };
  const std::string where = fmt::format("profile {} in {}", p.name, file);
  const std::string key = get("aws_access_key_id"), sec = get("aws_secret_access_key");
  if (!key.empty() || !sec.empty()) {
    DLRUN_CHECK_INPUT(!key.empty() && !sec.empty(), "{}: aws_access_key_id and aws_secret_access_key go together",
                      where);
    if (get("aws_session_token").empty()) return fixed_credentials({key, sec, "", 0}, where);
    // Temporary keys in the shared file (what `aws sso login`-style helpers, a sidecar or `aws
    // configure set` keep fresh): read the file again when the store says they expired, so a
    // file rewritten with new keys is taken without a restart.
    const bool in_credentials_file = &section == &p.credentials;
    return refreshing_credentials(
        [in_credentials_file, where](const std::atomic<bool>*) {
          const AwsProfile now = load_aws_profile();
          const IniSection& sec_now = in_credentials_file ? now.credentials : now.config;
          const std::string k = ini_value(sec_now, "aws_access_key_id"), s = ini_value(sec_now, "aws_secret_access_key");
          if (k.empty() || s.empty())
            throw S3Error(where + ": no longer holds aws_access_key_id and aws_secret_access_key", 0, kNoCredentials);
          return Credentials{k, s, ini_value(sec_now, "aws_session_token"), 0};
        },
        where + " (read again when they expire)");
  }
  if (const std::string file_tok = get("web_identity_token_file"); !file_tok.empty()) {
    const std::string arn = get("role_arn");
    DLRUN_CHECK_INPUT(!arn.empty(), "{}: web_identity_token_file needs role_arn", where);
    return web_identity(file_tok, arn, get("role_session_name"), region, where);
  }
  for (const char* other : {"source_profile", "credential_source", "sso_session", "sso_start_url"})
    if (!get(other).empty())
      throw Error(ExitCode::kBadInput, fmt::format("{}: {} is a kind of profile dlrun does not resolve", where, other),
                  "export the credentials it yields into the environment (e.g. eval \"$(aws configure "
                  "export-credentials --profile " + p.name + " --format env)\"), or use static keys, "
                  "credential_process, web identity, container or instance credentials (docs/checkpoints.md, "
                  "\"Credentials\")");
  return nullptr;
}

}  // namespace

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
  // 2. The shared files, profile AWS_PROFILE, in botocore's order within a profile: the
  // credentials file, the profile's credential_process (the credentials file's if both have
  // one), the config file.
  const AwsProfile p = load_aws_profile();
  if (auto c = from_profile_section(p, p.in_credentials, p.credentials, p.credentials_file, region)) return c;
  for (const auto& [found, section, file] : {std::tuple{p.in_credentials, &p.credentials, p.credentials_file},
                                             std::tuple{p.in_config, &p.config, p.config_file}})
    if (found && section->count("credential_process"))
      return process_credentials(ini_value(*section, "credential_process"), fmt::format("profile {} in {}", p.name, file));
  if (auto c = from_profile_section(p, p.in_config, p.config, p.config_file, region)) return c;
  DLRUN_CHECK_INPUT(!p.named || p.in_credentials || p.in_config,
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
    return container_credentials(url);
  }
  if (const std::string full = env("AWS_CONTAINER_CREDENTIALS_FULL_URI"); !full.empty()) {
    DLRUN_CHECK_INPUT(allowed_container_url(full),
                      "AWS_CONTAINER_CREDENTIALS_FULL_URI={}: an http:// endpoint must be on a loopback address or "
                      "the ECS/EKS agent's (169.254.170.2, 169.254.170.23); use https:// elsewhere",
                      full);
    return container_credentials(full);
  }
  // 5. The instance role.
  DLRUN_CHECK_INPUT(lower(env("AWS_EC2_METADATA_DISABLED")) != "true",
                    "no AWS credentials: none in the environment (AWS_ACCESS_KEY_ID), no profile '{}' in the shared "
                    "files, no web identity or container credentials, and the instance metadata service is disabled "
                    "(AWS_EC2_METADATA_DISABLED=true)",
                    p.name);
  std::string base = env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
  if (base.empty()) base = kImdsDefault;
  return instance_credentials(strip_trailing(base, '/'));
}

}  // namespace dlrun::remote
