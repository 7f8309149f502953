// A small HTTP client over libcurl (when built with it, DLRUN_HAVE_CURL), shared by the cloud
// notice watchers (short metadata requests) and the S3 checkpoint store (large streamed
// uploads and downloads, signed by remote/sigv4.h). Proxies are never used; redirects are never
// followed; the headers of a request are never logged. https is
// always verified (the system's CA store or a bundle the caller names, at least TLS 1.2), and a
// server that TLS refuses is told apart from one that does not answer: the first is a setting
// or a server to fix, the second a moment to wait out.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dlrun::http {

/// The lowest TLS version a request accepts.
enum class Tls { k1_2, k1_3 };

struct Request {
  std::string method = "GET";          ///< GET, PUT, POST, DELETE, HEAD
  std::string url;
  std::vector<std::string> headers;    ///< "Name: value"
  /// The request body: `body` in memory, or bytes [file_offset, file_offset + file_size) of
  /// `file`. None: an empty body.
  const std::string* body = nullptr;
  std::string file;
  uint64_t file_offset = 0, file_size = 0;
  /// The response body: streamed to `sink` (return false to abort the transfer) when the
  /// status is 2xx, else (and without a sink) kept in Response::body up to `max_body` bytes
  /// (a longer one aborts the transfer) — so a sink never sees an error document.
  std::function<bool(const char*, size_t)> sink;
  size_t max_body = 64 * 1024;
  long connect_timeout_ms = 1000;
  long timeout_ms = 2000;              ///< whole transfer; 0: no limit (see low_speed_*)
  long low_speed_bytes = 0;            ///< abort when slower than this ...
  long low_speed_seconds = 0;          ///< ... for this long (0: off)
  /// When given and set (by another thread), the request is not started, or the transfer
  /// under way is abandoned within about a second (Response::cancelled).
  const std::atomic<bool>* cancel = nullptr;
  /// https: the PEM file of the certificate authorities to trust ("": the system's store).
  std::string ca_file;
  /// https: a server that offers no version at or above this one is refused.
  Tls tls_min = Tls::k1_2;
};

struct Response {
  long status = 0;                     ///< HTTP status; 0 when no response arrived (see error)
  std::string body;
  std::string error;                   ///< transport error text when status == 0
  bool cancelled = false;              ///< abandoned through Request::cancel (status 0)
  bool too_large = false;              ///< the body passed Request::max_body: status 0 when it was
                                       ///< a 2xx answer (cut short: no answer), else the error's
  /// TLS refused the server (status 0, `error` says why): its certificate does not verify
  /// (an unknown CA, expired, another host's name), the CA file cannot be read, or it offers
  /// no TLS version at or above Request::tls_min. Not worth retrying: waiting changes nothing.
  bool tls_refused = false;
  std::vector<std::pair<std::string, std::string>> headers;  ///< names in lower case
  /// The value of a response header (`name` in lower case), or "".
  std::string header(const std::string& name) const;
};

/// True when dlrun was built with libcurl.
bool available();

/// Whether libcurl's failure `curl_code` (a CURLcode) with the text `message` is TLS refusing
/// the server (Response::tls_refused) rather than a network that failed. Public for the tests.
bool tls_refusal(int curl_code, const std::string& message);

/// The host of an http:// or https:// URL as written there ("127.0.0.1", "[::1]",
/// "s3.amazonaws.com"); "" when the URL has no host or carries user:password@.
std::string url_host(const std::string& url);
/// Whether `host` (as url_host gives it) is this machine: localhost, 127.x.y.z, [::1].
bool is_loopback_host(const std::string& host);

/// One request. Never throws for network errors (status 0 and `error`); throws
/// dlrun::Error (exit 2) when built without libcurl, and (exit 1) when `file` cannot be read;
/// an exception thrown by the sink ends the transfer and is rethrown.
Response perform(const Request& request);

}  // namespace dlrun::http
