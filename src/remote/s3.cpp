// The S3 client (see s3.h). Every request carries x-amz-content-sha256 (S3 requires it with
// SigV4) and, with temporary credentials, x-amz-security-token; every header sent is part of
// the signature (sigv4.h), the server-side encryption headers of a write included. The URLs
// and the parsers of the service's answers are in s3_answers.cpp.
#include "remote/s3.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <ctime>

#include "base/error.h"
#include "base/http.h"
#include "base/sha256.h"
#include "base/strings.h"
#include "remote/s3_malformed.h"
#include "remote/sigv4.h"
#include "remote/xml.h"

namespace dlrun::remote {

using detail::malformed;

namespace {

constexpr const char* kEmptySha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr uint64_t kMinPart = 5ull << 20;     // S3: every part but the last at least 5 MiB
constexpr uint64_t kMaxParts = 10000;         // S3: at most 10,000 parts
constexpr uint64_t kMaxCopy = 5ull << 30;     // S3: one CopyObject up to 5 GiB

/// What a failed answer says: "HTTP 403 InvalidAccessKeyId: The AWS Access Key Id ...", and
/// for an AccessDenied the permission the request needs; a server TLS refused is named with
/// the reason.
S3Error error_of(const http::Response& r, const std::string& what, const std::string& endpoint = {},
                 const std::string& permission = {}) {
  if (r.too_large && r.status == 0)  // a 2xx answer over the cap (a long error page keeps its status)
    return S3Error(fmt::format("{}: the service's answer is malformed: {}", what, r.error), 200, kMalformed);
  if (r.tls_refused) return S3Error(fmt::format("{}: TLS refused the service at {}: {}", what, endpoint, r.error), 0, kTlsRefused);
  if (r.status == 0) return S3Error(fmt::format("{}: no answer: {}", what, r.error), 0, "");
  const auto [code, message] = parse_error_answer(r.body);
  std::string text = fmt::format("{}: HTTP {}", what, r.status);
  if (!code.empty()) text += " " + code;
  if (!message.empty()) text += ": " + message;
  if (r.status == 403 && code == "AccessDenied" && !permission.empty()) text += " (this request needs " + permission + ")";
  return S3Error(text, r.status, code);
}

/// The request headers that ask for `e` (none when nothing is asked).
std::vector<std::string> encryption_headers(const Encryption& e) {
  if (e.algorithm.empty()) return {};
  std::vector<std::string> h = {"x-amz-server-side-encryption: " + e.algorithm};
  if (e.algorithm == kSseKms && !e.kms_key_id.empty()) h.push_back("x-amz-server-side-encryption-aws-kms-key-id: " + e.kms_key_id);
  if (e.algorithm == kSseKms && e.bucket_key) h.push_back("x-amz-server-side-encryption-bucket-key-enabled: true");
  return h;
}

/// The encryption an answer reports for the object it is about.
Encryption encryption_of(const http::Response& r) {
  return {r.header("x-amz-server-side-encryption"), r.header("x-amz-server-side-encryption-aws-kms-key-id"),
          lower(r.header("x-amz-server-side-encryption-bucket-key-enabled")) == "true"};
}

bool is_alias(const std::string& key) { return key.rfind("alias/", 0) == 0 || key.find(":alias/") != std::string::npos; }
bool ends_with_id(const std::string& arn, const std::string& id) {
  return arn.size() > id.size() && arn.compare(arn.size() - id.size(), id.size(), id) == 0 && arn[arn.size() - id.size() - 1] == '/';
}

/// The service says the credentials are no longer good: fetch them again and retry once.
bool credentials_expired(const http::Response& r) {
  if (r.status != 400 && r.status != 403) return false;
  const std::string code = parse_error_answer(r.body).code;
  return code == "ExpiredToken" || code == "TokenRefreshRequired" || code == "ExpiredTokenException";
}

constexpr size_t kMaxListed = 1000000;  // keys under one prefix; more is not a dlrun run
constexpr int kMaxPages = 10000;         // pages of one listing (1,000 keys make a full page)

}  // namespace

// ---- server-side encryption ---------------------------------------------------------------

std::string Encryption::describe() const {
  if (algorithm.empty()) return "none";
  std::string s = algorithm;
  if (algorithm == kSseKms && (!kms_key_id.empty() || bucket_key))
    s += fmt::format(" ({}{}{})", kms_key_id.empty() ? "" : "key " + kms_key_id, !kms_key_id.empty() && bucket_key ? ", " : "",
                     bucket_key ? "bucket key" : "");
  return s;
}

bool satisfies(const Encryption& got, const Encryption& asked) {
  if (asked.algorithm.empty()) return true;
  if (got.algorithm != asked.algorithm) return false;
  const std::string &a = asked.kms_key_id, &g = got.kms_key_id;
  if (a.empty() || g.empty() || is_alias(a) || is_alias(g) || a == g) return true;
  return ends_with_id(g, a) || ends_with_id(a, g);  // an ARN and the id it ends in
}

// ---- configuration -------------------------------------------------------------------------

S3Error::S3Error(std::string what, long status, std::string code, std::optional<bool> transient)
    : std::runtime_error(std::move(what)), status_(status), code_(std::move(code)), transient_(transient) {}

bool S3Error::transient() const {
  if (transient_) return *transient_;
  if (code_ == kCancelled || code_ == kLocal || code_ == kMalformed || code_ == kNoCredentials) return false;
  if (code_ == kTlsRefused || code_ == kNotEncrypted) return false;
  return status_ == 0 || status_ >= 500 || status_ == 429 || code_ == "SlowDown" || code_ == "RequestTimeout";
}

// ---- requests ------------------------------------------------------------------------------

/// One signed request, signed again with fresh credentials when the service says they expired.
struct S3Client::Call {
  const S3Client& client;
  http::Request req;
  std::string payload_sha256;
  std::string permission;  ///< what the request needs from IAM, named when it is refused (AccessDenied)

  Call(const S3Client& c, std::string method, std::string url, std::string sha) : client(c), payload_sha256(std::move(sha)) {
    req.method = std::move(method);
    req.url = std::move(url);
    req.connect_timeout_ms = 5000;
    req.timeout_ms = 0;
    req.low_speed_bytes = 1024;  // a stalled transfer (under 1 KB/s for a minute) fails
    req.low_speed_seconds = 60;
    req.cancel = c.cancel_;
    req.ca_file = c.config_.ca_file;
    req.tls_min = c.config_.tls_min;
  }
  void header(std::string h) { extra.push_back(std::move(h)); }
  /// A write that stores an object: it asks for the configured server-side encryption.
  void encrypt() {
    for (auto& h : encryption_headers(client.config_.sse)) header(std::move(h));
  }
  /// The service's answer to a write must report the encryption asked for: a service that
  /// ignores the headers (some S3-compatible ones do) must not pass for one that applied them.
  void check_encrypted(const http::Response& r, const std::string& what) const {
    const Encryption& asked = client.config_.sse;
    const Encryption got = encryption_of(r);
    if (!satisfies(got, asked))
      throw S3Error(fmt::format("{}: the service reports server-side encryption {}, not the {} asked for", what,
                                got.describe(), asked.describe()),
                    r.status, kNotEncrypted);
  }

  /// Perform; a status other than 2xx (or `ok_404` for 404) throws S3Error naming `what`.
  http::Response run(const std::string& what, bool ok_404 = false) {
    CredentialProvider& creds = *client.config_.credentials;
    http::Response r;
    for (int attempt = 0; attempt < 2; ++attempt) {
      const Credentials used = creds.get(req.cancel);
      sign(used);
      r = http::perform(req);
      if (r.cancelled) throw S3Error(what + ": cancelled", 0, kCancelled);
      if (attempt > 0 || !creds.refreshable() || !credentials_expired(r)) break;
      creds.expired(used);  // and once more with fresh ones
    }
    if ((r.status >= 200 && r.status < 300) || (ok_404 && r.status == 404)) return r;
    S3Error e = error_of(r, what, client.config_.endpoint, permission);
    // Fresh credentials refused as expired too: their source will hand out new ones soon.
    if (credentials_expired(r) && creds.refreshable()) throw S3Error(e.what(), e.status(), e.code(), true);
    throw e;
  }

 private:
  void sign(const Credentials& c) {
    req.headers = {"x-amz-content-sha256: " + payload_sha256};
    if (!c.session_token.empty()) req.headers.push_back("x-amz-security-token: " + c.session_token);
    req.headers.insert(req.headers.end(), extra.begin(), extra.end());
    for (auto& h : sigv4_headers(req.method, req.url, req.headers, payload_sha256, c, client.config_.region, "s3",
                                 std::time(nullptr)))
      req.headers.push_back(std::move(h));
  }
  std::vector<std::string> extra;
};

S3Client::S3Client(S3Config config, std::string bucket) : config_(std::move(config)), bucket_(std::move(bucket)) {
  if (!config_.credentials) fail_runtime("S3 client for bucket {} without a credential provider", bucket_);
}

std::string S3Client::needs(const std::string& action, const std::string& key, bool object) const {
  std::string s = object ? fmt::format("{} on arn:aws:s3:::{}/{}", action, bucket_, key)
                         : fmt::format("{} on arn:aws:s3:::{}{}", action, bucket_, key.empty() ? "" : " (prefix " + key + ")");
  // SSE-KMS: S3 asks KMS on the caller's behalf, with the caller's permissions.
  if (config_.sse.algorithm == kSseKms && action == "s3:PutObject")
    s += " and kms:GenerateDataKey, kms:Decrypt on the KMS key";
  else if (action == "s3:GetObject")
    s += " (and kms:Decrypt on its KMS key if it is encrypted with SSE-KMS)";
  return s;
}

std::string S3Client::url(const std::string& key, const std::vector<std::pair<std::string, std::string>>& query) const {
  std::string host = config_.endpoint;
  std::string path = "/" + uri_encode(key, true);
  if (config_.path_style) {
    path = "/" + bucket_ + (key.empty() ? "" : path);
  } else {
    const auto scheme_end = host.find("://") + 3;
    host = host.substr(0, scheme_end) + bucket_ + "." + host.substr(scheme_end);
  }
  // libcurl 7.88 signs the query string as written: parameters sorted, values encoded.
  auto q = query;
  std::sort(q.begin(), q.end());
  std::string qs;
  for (const auto& [k, v] : q) qs += (qs.empty() ? "?" : "&") + uri_encode(k, false) + "=" + uri_encode(v, false);
  return host + path + qs;
}

void S3Client::put_bytes(const std::string& key, const std::string& data, const std::string& content_type) {
  Call call(*this, "PUT", url(key), sha256_hex(data.data(), data.size()));
  if (!content_type.empty()) call.header("Content-Type: " + content_type);
  call.encrypt();
  call.permission = needs("s3:PutObject", key);
  call.req.body = &data;
  const std::string what = "PUT " + describe(key);
  call.check_encrypted(call.run(what), what);
}

namespace {

/// A part size for `size` bytes: at least `want` and S3's 5 MiB, at most 10,000 parts.
uint64_t part_size(uint64_t size, uint64_t want) {
  uint64_t part = std::max(want, kMinPart);
  while ((size + part - 1) / part > kMaxParts) part *= 2;
  return part;
}

}  // namespace

/// A multipart upload: `start` the upload, `put_part(n, offset, length, upload_id)` each part
/// (returning its ETag), complete; aborted (best effort, so its parts are not billed) when
/// anything fails.
void S3Client::multipart(const std::string& key, uint64_t size, uint64_t part,
                         const std::function<std::string(uint64_t, uint64_t, uint64_t, const std::string&)>& put_part) {
  Call init(*this, "POST", url(key, {{"uploads", ""}}), kEmptySha256);
  init.encrypt();  // every part is stored with the upload's encryption
  init.permission = needs("s3:PutObject", key);
  const std::string what = "start multipart upload of " + describe(key);
  const http::Response started = init.run(what);
  init.check_encrypted(started, what);
  const std::string upload_id = parse_upload_id(started.body, what);
  try {
    std::string parts = "<CompleteMultipartUpload>";
    for (uint64_t n = 1, off = 0; off < size; ++n, off += part) {
      const std::string etag = put_part(n, off, std::min(part, size - off), upload_id);
      parts += fmt::format("<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>", n, etag);
    }
    parts += "</CompleteMultipartUpload>";
    Call done(*this, "POST", url(key, {{"uploadId", upload_id}}), sha256_hex(parts.data(), parts.size()));
    done.header("Content-Type: application/xml");
    done.permission = needs("s3:PutObject", key);
    done.req.body = &parts;
    const std::string done_what = "complete multipart upload of " + describe(key);
    const http::Response r = done.run(done_what);
    // S3 may answer 200 and still report an error in the body.
    if (!parse_error_answer(r.body).code.empty()) throw error_of(http::Response{500, r.body, "", false, false, false, {}}, describe(key));
    done.check_encrypted(r, done_what);
  } catch (...) {
    try {
      abort_upload({key, upload_id});
    } catch (...) {
    }
    throw;
  }
}

void S3Client::put_file(const std::string& key, const std::string& path, uint64_t size, const std::string& sha256) {
  if (size <= config_.part_bytes) {
    Call call(*this, "PUT", url(key), sha256);
    call.encrypt();
    call.permission = needs("s3:PutObject", key);
    call.req.file = path;
    call.req.file_size = size;
    const std::string what = "PUT " + describe(key);
    call.check_encrypted(call.run(what), what);
    return;
  }
  multipart(key, size, part_size(size, config_.part_bytes),
            [&](uint64_t n, uint64_t off, uint64_t len, const std::string& upload_id) {
              // The part's own SHA-256: it is what gets signed, and S3 checks it on arrival.
              Call call(*this, "PUT", url(key, {{"partNumber", std::to_string(n)}, {"uploadId", upload_id}}),
                        sha256_file_range(path, off, len));
              call.req.file = path;
              call.req.file_offset = off;
              call.req.file_size = len;
              call.permission = needs("s3:PutObject", key);
              const std::string what = fmt::format("PUT part {} of {}", n, describe(key));
              const http::Response r = call.run(what);
              call.check_encrypted(r, what);
              const std::string etag = r.header("etag");
              if (etag.empty()) throw S3Error(describe(key) + ": the service returned no ETag for a part", r.status, kMalformed);
              return etag;
            });
}

void S3Client::copy(const std::string& from, const std::string& to, uint64_t size) {
  const std::string source = "x-amz-copy-source: /" + bucket_ + "/" + uri_encode(from, true);
  const std::string what = "copy " + describe(from) + " to " + describe(to);
  auto check = [&](const http::Response& r, const char* result) {
    // A copy may fail after its 200 has been sent: the body then holds an <Error>.
    const std::string etag = [&] {
      try {
        const XmlElement root = parse_xml(r.body);
        return root.name == result ? root.child_text("ETag") : std::string();
      } catch (const XmlError&) {
        return std::string();
      }
    }();
    if (etag.empty()) throw error_of(http::Response{500, r.body, "", false, false, false, {}}, what);
    return etag;
  };
  const std::string permission = needs("s3:GetObject", from) + " and " + needs("s3:PutObject", to);
  if (size <= kMaxCopy) {
    Call call(*this, "PUT", url(to), kEmptySha256);
    call.header(source);
    call.encrypt();  // a copy is a new object: without the headers it would be stored unencrypted
    call.permission = permission;
    const http::Response r = call.run(what);
    check(r, "CopyObjectResult");
    call.check_encrypted(r, what);
    return;
  }
  multipart(to, size, part_size(size, kMaxCopy / 4),
            [&](uint64_t n, uint64_t off, uint64_t len, const std::string& upload_id) {
              Call call(*this, "PUT", url(to, {{"partNumber", std::to_string(n)}, {"uploadId", upload_id}}), kEmptySha256);
              call.header(source);
              call.header(fmt::format("x-amz-copy-source-range: bytes={}-{}", off, off + len - 1));
              call.permission = permission;
              return check(call.run(fmt::format("{} (part {})", what, n)), "CopyPartResult");
            });
}

std::string S3Client::get_bytes(const std::string& key) {
  Call call(*this, "GET", url(key), kEmptySha256);
  call.req.max_body = 64 << 20;
  call.permission = needs("s3:GetObject", key);
  return call.run("GET " + describe(key)).body;
}

Encryption S3Client::get(const std::string& key, const std::function<void(const char*, size_t)>& sink) {
  Call call(*this, "GET", url(key), kEmptySha256);
  call.req.sink = [&](const char* p, size_t n) {
    sink(p, n);
    return true;
  };
  call.permission = needs("s3:GetObject", key);
  return encryption_of(call.run("GET " + describe(key)));
}

Listing S3Client::list(const std::string& prefix, const std::string& delimiter) {
  Listing out;
  std::string token;
  const std::string what = "list " + describe(prefix);
  int pages = 0;
  do {
    if (++pages > kMaxPages) malformed(what, fmt::format("more than {} pages", kMaxPages));
    std::vector<std::pair<std::string, std::string>> q = {{"list-type", "2"}, {"prefix", prefix}, {"encoding-type", "url"}};
    if (!delimiter.empty()) q.emplace_back("delimiter", delimiter);
    if (!token.empty()) q.emplace_back("continuation-token", token);
    Call call(*this, "GET", url("", q), kEmptySha256);
    call.req.max_body = 64 << 20;
    call.permission = needs("s3:ListBucket", prefix, false);
    ListPage page = parse_list_page(call.run(what).body, prefix, what);
    for (auto& o : page.listing.objects) out.objects.push_back(std::move(o));
    for (auto& p : page.listing.prefixes) out.prefixes.push_back(std::move(p));
    if (out.objects.size() + out.prefixes.size() > kMaxListed)
      malformed(what, fmt::format("more than {} keys under one prefix", kMaxListed));
    if (page.truncated && page.next_token == token) malformed(what, "the same continuation token twice");
    token = page.truncated ? page.next_token : "";
  } while (!token.empty());
  return out;
}

std::vector<PendingUpload> S3Client::pending_uploads(const std::string& prefix) {
  std::vector<PendingUpload> out;
  std::string key_marker, id_marker;
  const std::string what = "list the unfinished multipart uploads under " + describe(prefix);
  for (int pages = 1;; ++pages) {
    if (pages > kMaxPages) malformed(what, fmt::format("more than {} pages", kMaxPages));
    std::vector<std::pair<std::string, std::string>> q = {{"uploads", ""}, {"prefix", prefix}, {"encoding-type", "url"}};
    if (!key_marker.empty()) q.emplace_back("key-marker", key_marker);
    if (!id_marker.empty()) q.emplace_back("upload-id-marker", id_marker);
    Call call(*this, "GET", url("", q), kEmptySha256);
    call.req.max_body = 64 << 20;
    call.permission = needs("s3:ListBucketMultipartUploads", prefix, false);
    UploadsPage page = parse_uploads_page(call.run(what).body, prefix, what);
    for (auto& u : page.uploads) out.push_back(std::move(u));
    if (!page.truncated) break;
    if (out.size() > kMaxListed) malformed(what, fmt::format("more than {} unfinished uploads", kMaxListed));
    if (page.next_key_marker == key_marker && page.next_upload_id_marker == id_marker)
      malformed(what, "the same markers twice");
    key_marker = page.next_key_marker;
    id_marker = page.next_upload_id_marker;
  }
  return out;
}

void S3Client::abort_upload(const PendingUpload& u) {
  Call call(*this, "DELETE", url(u.key, {{"uploadId", u.upload_id}}), kEmptySha256);
  call.permission = needs("s3:AbortMultipartUpload", u.key);
  call.run("abort multipart upload of " + describe(u.key), true);
}

void S3Client::remove(const std::string& key) {
  Call call(*this, "DELETE", url(key), kEmptySha256);
  call.permission = needs("s3:DeleteObject", key);
  call.run("DELETE " + describe(key), true);
}

}  // namespace dlrun::remote
