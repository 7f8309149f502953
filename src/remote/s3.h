// An S3 client for checkpoints: objects up and down (large files streamed, in parts above a
// size), listings, copies, deletes, unfinished multipart uploads -- against AWS S3 or any
// S3-compatible service (MinIO, Cloudflare R2, Google Cloud Storage's XML API with HMAC keys,
// Alibaba OSS). Requests are signed with AWS Signature Version 4 (sigv4.h: libcurl's own signer
// orders some headers wrongly), over each URL built in canonical form (keys and query encoded,
// query parameters sorted), which is what is sent and what is signed. Credentials come from a provider (credentials.h: the AWS chain), are fetched again
// when the service says they expired, and are never logged. What the service answers is
// untrusted input: parsed as XML by expat (xml.h), keys URL-decoded, every malformed answer
// an S3Error with code MalformedAnswer. Objects written carry the server-side encryption the
// config asks for, and the service's answer must say it was applied; a request the service
// refuses as AccessDenied names the IAM permission it needs (docs/security.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/http.h"
#include "remote/credentials.h"
#include "remote/s3_error.h"

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

inline constexpr const char* kSseS3 = "AES256";    ///< SSE-S3: keys S3 manages
inline constexpr const char* kSseKms = "aws:kms";  ///< SSE-KMS: a key of AWS KMS

/// Server-side encryption of an object, as S3's x-amz-server-side-encryption headers say it.
struct Encryption {
  std::string algorithm;    ///< "" (none asked or reported), kSseS3 or kSseKms
  std::string kms_key_id;   ///< aws:kms: the key (id, ARN or alias/NAME); "": the account's aws/s3 key
  bool bucket_key = false;  ///< aws:kms: with an S3 Bucket Key (fewer requests to KMS)
  /// "aws:kms (key K, bucket key)", "AES256", "none".
  std::string describe() const;
};
/// Whether an object stored with `got` has the encryption `asked` asks for: the same algorithm
/// and, where both name a key and neither is an alias, the same key (an ARN ending in the id
/// counts). Nothing asked is always satisfied.
bool satisfies(const Encryption& got, const Encryption& asked);

/// Where and how to reach the service.
struct S3Config {
  std::string endpoint;     ///< "https://s3.us-east-1.amazonaws.com" or the service's URL
  std::string region;
  bool path_style = false;  ///< https://host/bucket/key instead of https://bucket.host/key
  std::shared_ptr<CredentialProvider> credentials;  ///< required
  uint64_t part_bytes = 512ull << 20;  ///< files above go up in parts of this size
  std::string ca_file;                 ///< the CAs that may sign the service's certificate ("": the system's)
  http::Tls tls_min = http::Tls::k1_2; ///< a service that offers less is refused
  Encryption sse;                      ///< asked of every object written: PUT, each multipart upload, copy
};

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
};

struct Listing {
  std::vector<ObjectInfo> objects;    ///< keys under the prefix (not under a common prefix)
  std::vector<std::string> prefixes;  ///< common prefixes when a delimiter was given
};

/// A multipart upload started and neither completed nor aborted.
struct PendingUpload {
  std::string key, upload_id;
};

/// One page of a listing as the service sent it (ListObjectsV2 with encoding-type=url).
struct ListPage {
  Listing listing;
  bool truncated = false;
  std::string next_token;
};
/// One page of ListMultipartUploads.
struct UploadsPage {
  std::vector<PendingUpload> uploads;
  bool truncated = false;
  std::string next_key_marker, next_upload_id_marker;
};
/// The code and message of an error document ("" when the body is not one).
struct ErrorAnswer {
  std::string code, message;
};

/// What the client makes of the service's answers (public for the tests and the fuzzer).
/// Each throws S3Error (code MalformedAnswer, not worth retrying) naming `what` when the body
/// is not well-formed XML of the expected shape: a key outside `prefix`, a size that is not a
/// number, a truncated page without a continuation token.
ListPage parse_list_page(const std::string& body, const std::string& prefix, const std::string& what);
UploadsPage parse_uploads_page(const std::string& body, const std::string& prefix, const std::string& what);
std::string parse_upload_id(const std::string& body, const std::string& what);
/// Never throws: a body that is not an error document gives empty fields.
ErrorAnswer parse_error_answer(const std::string& body);
/// The inverse of encoding-type=url: %XX and '+' (a space) decoded; a broken escape throws
/// S3Error (MalformedAnswer) naming `what`.
std::string url_decode(const std::string& s, const std::string& what);

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
  /// An object streamed to `sink`; returns the server-side encryption the service says it is
  /// stored with.
  Encryption get(const std::string& key, const std::function<void(const char*, size_t)>& sink);
  /// Every key under `prefix` (all pages); with a delimiter, common prefixes separately.
  Listing list(const std::string& prefix, const std::string& delimiter = {});
  /// Delete one object (absent is fine).
  void remove(const std::string& key);
  /// A copy of `from` as `to`, made by the service (no bytes pass through here).
  void copy(const std::string& from, const std::string& to, uint64_t size);
  /// The multipart uploads under `prefix` that were started and never completed or aborted.
  std::vector<PendingUpload> pending_uploads(const std::string& prefix);
  /// Abort one (its parts are no longer stored, nor billed).
  void abort_upload(const PendingUpload& u);
  /// While `*flag` is set, requests fail at once and a transfer under way is abandoned within
  /// about a second, with S3Error code kCancelled. The flag must outlive the client's use.
  void set_cancel(const std::atomic<bool>* flag) { cancel_ = flag; }

 private:
  std::string url(const std::string& key, const std::vector<std::pair<std::string, std::string>>& query = {}) const;
  struct Call;
  /// What a request on `key` ("": the bucket) needs from IAM, for the message of an AccessDenied.
  std::string needs(const std::string& action, const std::string& key, bool object = true) const;
  void multipart(const std::string& key, uint64_t size, uint64_t part,
                 const std::function<std::string(uint64_t, uint64_t, uint64_t, const std::string&)>& put_part);
  std::string describe(const std::string& key) const { return "s3://" + bucket_ + "/" + key; }

  S3Config config_;
  std::string bucket_;
  const std::atomic<bool>* cancel_ = nullptr;
};

/// AWS's URI encoding (RFC 3986 unreserved characters kept; '/' kept when `keep_slash`).
std::string uri_encode(const std::string& s, bool keep_slash);
}  // namespace dlrun::remote
