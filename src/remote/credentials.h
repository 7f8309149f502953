// Where the S3 client's keys come from: the standard AWS provider chain, in this order --
//
//   1. environment     AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN)
//   2. shared files    profile AWS_PROFILE (default "default") in AWS_SHARED_CREDENTIALS_FILE
//                      (~/.aws/credentials) and AWS_CONFIG_FILE (~/.aws/config), in botocore's
//                      order: the credentials file's static keys (or role_arn +
//                      web_identity_token_file), the profile's credential_process (a program
//                      it names, run without a shell), the config file's static keys (or web
//                      identity)
//   3. web identity    AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (EKS IRSA, other OIDC
//                      federation): STS AssumeRoleWithWebIdentity, the token file read anew
//                      at every refresh (the platform rotates it)
//   4. container       AWS_CONTAINER_CREDENTIALS_RELATIVE_URI / _FULL_URI with
//                      AWS_CONTAINER_AUTHORIZATION_TOKEN(_FILE) (ECS tasks, EKS Pod Identity)
//   5. instance role   the EC2 instance metadata service, IMDSv2 (a session token first);
//                      AWS_EC2_METADATA_SERVICE_ENDPOINT moves it (the tests' fake service),
//                      AWS_EC2_METADATA_DISABLED=true leaves it out
//
// The first source that is configured is the one used. Temporary credentials are fetched again
// ahead of their expiry (a quarter of their lifetime before it, at most 5 minutes) and at once
// when the service answers ExpiredToken. A fetch is cancelled by the cancel flag of the request
// that needs it (S3Client::set_cancel: a stop), so a stop never waits out a credential
// service's timeout. Nothing here logs or returns a secret in a message.
// Only a run with checkpoint.remote (or an s3:// path) builds a chain, and the metadata
// service is asked only when no earlier source is configured (docs/security.md).
//
// Where each part is: the providers, credentials.cpp; the order, credential_chain.cpp; the
// shared files, aws_profile.h; the sources' fetches, credential_sources.h.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace dlrun::remote {

struct Credentials {
  std::string access_key, secret_key, session_token;
  double expires = 0;  ///< wall-clock seconds; 0: never
};

/// The keys of the S3 client's requests. Thread-safe.
class CredentialProvider {
 public:
  virtual ~CredentialProvider() = default;
  /// The current credentials, fetched anew when they are due. Throws S3Error: code
  /// "NoCredentials" (not worth retrying) when the source has none to give, a transient one
  /// when it did not answer, kCancelled when `cancel` (may be null) is set by another thread
  /// before or during the fetch, or while waiting for another thread's (nothing is kept from a
  /// cancelled fetch).
  Credentials get(const std::atomic<bool>* cancel = nullptr) { return current(cancel); }
  /// The service refused `refused` as expired: the next get() fetches anew (unless other
  /// credentials have been fetched since: another thread was refused first).
  virtual void expired(const Credentials& refused) = 0;
  /// Whether expired() can lead to other credentials (false for fixed keys).
  virtual bool refreshable() const = 0;
  /// Where they come from, for messages ("environment", "web identity (STS ...)", ...).
  virtual std::string source() const = 0;

 protected:
  /// What get() returns, for the implementations.
  virtual Credentials current(const std::atomic<bool>* cancel) = 0;
};

/// One fetch from a source of temporary credentials; throws S3Error. When `cancel` (may be
/// null) is set by another thread, it gives up within about a second: S3Error kCancelled.
using CredentialFetch = std::function<Credentials(const std::atomic<bool>* cancel)>;

/// Keys that never change (the environment's, a profile's, a test's).
std::shared_ptr<CredentialProvider> fixed_credentials(Credentials c, std::string source);

/// Credentials fetched by `fetch`, kept until they are due and fetched again then. A failed
/// refresh keeps the old ones while they last (tried again `retry_s` later); while one thread
/// refreshes, the others get the current ones if still valid, else wait (a cancel ends their
/// wait). `clock` is wall-clock seconds (tests pass their own).
std::shared_ptr<CredentialProvider> refreshing_credentials(CredentialFetch fetch, std::string source,
                                                           std::function<double()> clock = {}, double retry_s = 5);

/// The chain above. `region` picks STS's regional endpoint. Throws dlrun::Error (exit 2)
/// when the environment or the files are inconsistent (one of the key pair without the other,
/// AWS_PROFILE naming no profile, a profile of a kind dlrun does not run) or when no source is
/// configured at all and the metadata service is disabled.
std::shared_ptr<CredentialProvider> credential_chain(const std::string& region);

/// What the fetchers make of an answer (separate, for the tests and the fuzzer): STS's
/// AssumeRoleWithWebIdentity response, and the JSON of the container and instance-metadata
/// endpoints. Throw S3Error naming `where` when the answer is not one.
Credentials parse_sts_credentials(const std::string& body, const std::string& where);
Credentials parse_json_credentials(const std::string& body, const std::string& where);
/// What a credential_process printed: {"Version": 1, "AccessKeyId", "SecretAccessKey",
/// "SessionToken"?, "Expiration"? (RFC 3339)}. Throws S3Error (MalformedAnswer) naming `where`,
/// never quoting the output.
Credentials parse_process_credentials(const std::string& output, const std::string& where);

}  // namespace dlrun::remote
