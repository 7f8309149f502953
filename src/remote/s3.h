// An S3 client for checkpoints: objects up and down (large files streamed, in parts above a
// size), listings, deletes — against AWS S3 or any S3-compatible service (MinIO, Cloudflare
// R2, Google Cloud Storage's XML API with HMAC keys, Alibaba OSS). Requests are signed by
// libcurl's own AWS SigV4 (CURLOPT_AWS_SIGV4); dlrun writes no signing code, but it builds
// each URL in canonical form (keys and query encoded, query parameters sorted), because the
// libcurl of Debian 12 (7.88) signs the path and query exactly as given. Credentials come from
// the caller (config/remote_options.h reads them from the environment) and are never logged.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace dlrun::remote {

/// "s3://BUCKET/PREFIX": the bucket and the key prefix (no leading or trailing '/').
struct S3Url {
  std::string bucket;
  std::string prefix;
  /// "s3://bucket/prefix[/rel]"
  std::string str(const std::string& rel = {}) const;
  /// "prefix/rel" (or "rel" without a prefix): an object key.
  std::string key(const std::string& rel) const;
  /// "prefix/" ("" without a prefix): what every key below the prefix starts with.
  std::string dir() const;
};
bool is_s3_url(const std::string& s);
/// Parse "s3://bucket[/prefix]"; throws dlrun::Error (exit 2) naming `what` when malformed.
S3Url parse_s3_url(const std::string& url, const std::string& what = "checkpoint.remote");

/// Where and how to reach the service.
struct S3Config {
  std::string endpoint;     ///< "https://s3.us-east-1.amazonaws.com" or the service's URL
  std::string region;
  bool path_style = false;  ///< https://host/bucket/key instead of https://bucket.host/key
  std::string access_key, secret_key, session_token;
  uint64_t part_bytes = 512ull << 20;  ///< files above go up in parts of this size
};

/// A failed request: the HTTP status (0: no answer), S3's error code and message.
class S3Error : public std::runtime_error {
 public:
  S3Error(std::string what, long status, std::string code);
  long status() const { return status_; }
  const std::string& code() const { return code_; }
  /// Worth retrying: no answer, a 5xx, throttling (429, SlowDown), a request timeout; not a
  /// request cancelled through S3Client::set_cancel (code "cancelled") nor a local failure
  /// (code "local").
  bool transient() const;

 private:
  long status_;
  std::string code_;
};

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
};

struct Listing {
  std::vector<ObjectInfo> objects;    ///< keys under the prefix (not under a common prefix)
  std::vector<std::string> prefixes;  ///< common prefixes when a delimiter was given
};

class S3Client {
 public:
  S3Client(S3Config config, std::string bucket);
  const std::string& bucket() const { return bucket_; }

  /// Upload a file whose SHA-256 is known (the checkpoint manifest has it): one signed PUT
  /// up to config.part_bytes, a multipart upload above (each part hashed and signed).
  void put_file(const std::string& key, const std::string& path, uint64_t size, const std::string& sha256_hex);
  void put_bytes(const std::string& key, const std::string& data, const std::string& content_type = {});
  /// A small object in memory (limit 64 MiB).
  std::string get_bytes(const std::string& key);
  /// An object streamed to `sink`.
  void get(const std::string& key, const std::function<void(const char*, size_t)>& sink);
  /// Every key under `prefix` (all pages); with a delimiter, common prefixes separately.
  Listing list(const std::string& prefix, const std::string& delimiter = {});
  /// Delete one object (absent is fine).
  void remove(const std::string& key);
  /// While `*flag` is set, requests fail at once and a transfer under way is abandoned within
  /// about a second, with S3Error code "cancelled". The flag must outlive the client's use.
  void set_cancel(const std::atomic<bool>* flag) { cancel_ = flag; }

 private:
  std::string url(const std::string& key, const std::vector<std::pair<std::string, std::string>>& query = {}) const;
  struct Call;
  std::string describe(const std::string& key) const { return "s3://" + bucket_ + "/" + key; }

  S3Config config_;
  std::string bucket_;
  const std::atomic<bool>* cancel_ = nullptr;
};

/// AWS's URI encoding (RFC 3986 unreserved characters kept; '/' kept when `keep_slash`).
std::string uri_encode(const std::string& s, bool keep_slash);
/// The text of the first <tag>...</tag> in `xml` from `from` on, XML entities decoded;
/// `pos` (if given) receives the position after the closing tag, npos when absent.
std::string xml_value(const std::string& xml, const std::string& tag, size_t from = 0, size_t* pos = nullptr);
/// The raw inner text of every <tag>...</tag> in `xml`, in order.
std::vector<std::string> xml_blocks(const std::string& xml, const std::string& tag);

}  // namespace dlrun::remote
