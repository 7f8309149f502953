// The sources of temporary credentials that the chain (credential_chain.cpp) picks from, each a
// refreshing provider around its own fetch: web identity through STS (web_identity.cpp), the
// container agent and the EC2 instance metadata service (metadata_credentials.cpp), a
// profile's credential_process (process_credentials.cpp). Internal to src/remote: the rest of
// dlrun gets a chain from credential_chain() in credentials.h.
#pragma once

#include <memory>
#include <string>

#include "remote/credentials.h"

namespace dlrun::remote {

/// STS AssumeRoleWithWebIdentity for `role_arn`, the token read from `token_file` at every
/// fetch (the platform rotates it); `session` "" for one named after the time; `region` picks
/// STS's endpoint (AWS_ENDPOINT_URL_STS, AWS_ENDPOINT_URL move it); `how` says in messages
/// where the settings came from.
std::shared_ptr<CredentialProvider> web_identity(const std::string& token_file, const std::string& role_arn,
                                                 std::string session, const std::string& region,
                                                 const std::string& how);

/// Whether `url` may be a container credentials endpoint: https:// anywhere, http:// only on a
/// loopback address or the hosts AWS's agents listen on (169.254.170.2, 169.254.170.23,
/// fd00:ec2::23); never with user:password@.
bool allowed_container_url(const std::string& url);

/// The container agent at `url` (ECS, EKS Pod Identity), with the authorization token of
/// AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or AWS_CONTAINER_AUTHORIZATION_TOKEN read at every fetch.
std::shared_ptr<CredentialProvider> container_credentials(const std::string& url);

/// The instance role through IMDSv2 at `base` ("http://169.254.169.254" or the test's): a
/// session token, the role's name, its credentials.
std::shared_ptr<CredentialProvider> instance_credentials(const std::string& base);

/// A profile's credential_process `command` (split as shlex.split does, run without a shell),
/// at every fetch; `where` ("profile NAME in FILE") names it in messages. Throws dlrun::Error
/// (exit 2) when `command` is empty or not a command line (an unclosed quote).
std::shared_ptr<CredentialProvider> process_credentials(const std::string& command, const std::string& where);

}  // namespace dlrun::remote
