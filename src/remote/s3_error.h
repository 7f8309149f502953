// A failed request to object storage (or to the service that hands out its credentials), with
// what decides what to do next: worth retrying or not.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

namespace dlrun::remote {

/// The S3 error codes dlrun itself gives (besides the service's own, "AccessDenied", ...).
inline constexpr const char* kCancelled = "cancelled";            ///< abandoned through a cancel flag
inline constexpr const char* kLocal = "local";                    ///< a local failure (the file to upload)
inline constexpr const char* kMalformed = "MalformedAnswer";      ///< an answer that is not what S3 sends
inline constexpr const char* kNoCredentials = "NoCredentials";    ///< no source has credentials to give
inline constexpr const char* kTlsRefused = "TlsRefused";          ///< TLS refused the server (http.h tls_refused)
inline constexpr const char* kNotEncrypted = "EncryptionNotApplied";  ///< stored without the encryption asked for

/// A failed request: the HTTP status (0: no answer), the error code and the message.
class S3Error : public std::runtime_error {
 public:
  /// `transient` overrides what the status and code say.
  S3Error(std::string what, long status, std::string code, std::optional<bool> transient = std::nullopt);
  long status() const { return status_; }
  const std::string& code() const { return code_; }
  /// Worth retrying: no answer, a 5xx, throttling (429, SlowDown), a request timeout; not a
  /// request cancelled on purpose, a local failure, a malformed answer, missing credentials, a
  /// server TLS refused or an object stored without the encryption asked for.
  bool transient() const;

 private:
  long status_;
  std::string code_;
  std::optional<bool> transient_;
};

}  // namespace dlrun::remote
