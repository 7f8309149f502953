// The S3 client (see s3.h). Every request carries x-amz-content-sha256 (S3 requires it with
// SigV4) and, with temporary credentials, x-amz-security-token; every header sent is part of
// the signature (sigv4.h), the server-side encryption headers of a write included.
#include "remote/s3.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <ctime>

#include "base/error.h"
#include "base/http.h"
#include "base/sha256.h"
#include "base/strings.h"
#include "remote/sigv4.h"
#include "remote/xml.h"

namespace dlrun::remote {
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

[[noreturn]] void malformed(const std::string& what, const std::string& why) {
  throw S3Error(fmt::format("{}: the service's answer is malformed: {}", what, why), 200, kMalformed);
}

XmlElement parse_or_refuse(const std::string& body, const std::string& what) {
  try {
    return parse_xml(body);
  } catch (const XmlError& e) {
    malformed(what, e.what());
  }
}

/// A decimal size, or a malformed answer.
uint64_t parse_size(const std::string& s, const std::string& what) {
  if (s.empty() || s.size() > 19 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    malformed(what, fmt::format("Size '{}' is not a byte count", s.substr(0, 40)));
  return std::strtoull(s.c_str(), nullptr, 10);
}

/// The service says the credentials are no longer good: fetch them again and retry once.
bool credentials_expired(const http::Response& r) {
  if (r.status != 400 && r.status != 403) return false;
  const std::string code = parse_error_answer(r.body).code;
  return code == "ExpiredToken" || code == "TokenRefreshRequired" || code == "ExpiredTokenException";
}

constexpr size_t kMaxListed = 1000000;  // keys under one prefix; more is not a dlrun run
constexpr int kMaxPages = 10000;         // pages of one listing (1,000 keys make a full page)
constexpr size_t kMaxKey = 1024;         // S3: a key is at most 1,024 bytes

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

// ---- URLs ----------------------------------------------------------------------------------

std::string S3Url::str(const std::string& rel) const {
  std::string s = "s3://" + bucket;
  if (!prefix.empty()) s += "/" + prefix;
  if (!rel.empty()) s += "/" + rel;
  return s;
}

std::string S3Url::key(const std::string& rel) const {
  if (prefix.empty()) return rel;
  return rel.empty() ? prefix : prefix + "/" + rel;
}

std::string S3Url::dir() const { return prefix.empty() ? "" : prefix + "/"; }

bool is_s3_url(const std::string& s) { return s.rfind("s3://", 0) == 0; }

S3Url parse_s3_url(const std::string& url, const std::string& what) {
  DLRUN_CHECK_INPUT(is_s3_url(url), "{}: '{}' is not an s3://BUCKET/PREFIX URL", what, url);
  const std::string rest = strip_trailing(url.substr(5), '/');
  const auto slash = rest.find('/');
  S3Url u;
  u.bucket = rest.substr(0, slash);
  u.prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  while (!u.prefix.empty() && u.prefix.front() == '/') u.prefix.erase(0, 1);
  // Bucket names: 3-63 characters of lower-case letters, digits, '.', '-'.
  const bool ok = u.bucket.size() >= 3 && u.bucket.size() <= 63 &&
                  std::all_of(u.bucket.begin(), u.bucket.end(), [](char c) {
                    return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) ||
                           c == '.' || c == '-';
                  });
  DLRUN_CHECK_INPUT(ok, "{}: '{}' has no valid bucket name (3-63 lower-case letters, digits, '.', '-')", what, url);
  DLRUN_CHECK_INPUT(u.prefix.find("//") == std::string::npos, "{}: '{}' has an empty path segment", what, url);
  return u;
}

std::string uri_encode(const std::string& s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 0xF];
    }
  }
  return out;
}

std::string url_decode(const std::string& s, const std::string& what) {
  std::string out;
  out.reserve(s.size());
  auto hexval = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%') {
      const int hi = i + 2 < s.size() ? hexval(s[i + 1]) : -1, lo = hi >= 0 ? hexval(s[i + 2]) : -1;
      if (lo < 0) malformed(what, fmt::format("a broken %-escape in the URL-encoded '{}'", printable(s.substr(0, 200))));
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// ---- the service's answers -----------------------------------------------------------------

ErrorAnswer parse_error_answer(const std::string& body) {
  try {
    const XmlElement root = parse_xml(body);
    if (root.name == "Error") return {root.child_text("Code"), root.child_text("Message")};
    if (const XmlElement* e = root.child("Error"); e && root.name == "ErrorResponse")  // STS
      return {e->child_text("Code"), e->child_text("Message")};
  } catch (const XmlError&) {
  }
  return {};
}

ListPage parse_list_page(const std::string& body, const std::string& prefix, const std::string& what) {
  const XmlElement root = parse_or_refuse(body, what);
  if (root.name != "ListBucketResult") malformed(what, fmt::format("<{}> where <ListBucketResult> belongs", root.name));
  const bool encoded = root.child_text("EncodingType") == "url";
  auto key_of = [&](const std::string& raw, const char* field) {
    std::string k = encoded ? url_decode(raw, what) : raw;
    if (k.size() > kMaxKey) malformed(what, fmt::format("a {} of {} bytes; S3 keys are at most {}", field, k.size(), kMaxKey));
    if (k.size() < prefix.size() || k.compare(0, prefix.size(), prefix) != 0)
      malformed(what, fmt::format("{} '{}' is not under the prefix '{}' asked for", field, printable(k.substr(0, 200)),
                                  prefix));
    return k;
  };
  ListPage page;
  for (const XmlElement* c : root.all("Contents")) {
    const XmlElement* k = c->child("Key");
    if (!k) malformed(what, "a <Contents> without a <Key>");
    page.listing.objects.push_back({key_of(k->text, "Key"), parse_size(c->child_text("Size"), what)});
  }
  for (const XmlElement* c : root.all("CommonPrefixes")) page.listing.prefixes.push_back(key_of(c->child_text("Prefix"), "Prefix"));
  const std::string truncated = root.child_text("IsTruncated");
  if (truncated != "true" && truncated != "false" && !truncated.empty())
    malformed(what, fmt::format("IsTruncated is '{}'", printable(truncated.substr(0, 40))));
  page.truncated = truncated == "true";
  page.next_token = root.child_text("NextContinuationToken");
  if (page.truncated && page.next_token.empty())
    malformed(what, "IsTruncated is true and NextContinuationToken is empty (the listing would end silently)");
  return page;
}

UploadsPage parse_uploads_page(const std::string& body, const std::string& prefix, const std::string& what) {
  const XmlElement root = parse_or_refuse(body, what);
  if (root.name != "ListMultipartUploadsResult")
    malformed(what, fmt::format("<{}> where <ListMultipartUploadsResult> belongs", root.name));
  const bool encoded = root.child_text("EncodingType") == "url";
  UploadsPage page;
  for (const XmlElement* u : root.all("Upload")) {
    PendingUpload p{u->child_text("Key"), u->child_text("UploadId")};
    if (encoded) p.key = url_decode(p.key, what);
    if (p.key.size() > kMaxKey) malformed(what, fmt::format("a Key of {} bytes; S3 keys are at most {}", p.key.size(), kMaxKey));
    if (p.key.compare(0, prefix.size(), prefix) != 0 || p.upload_id.empty())
      malformed(what, fmt::format("an upload of '{}' outside the prefix '{}' or without an UploadId",
                                  printable(p.key.substr(0, 200)), prefix));
    page.uploads.push_back(std::move(p));
  }
  const std::string truncated = root.child_text("IsTruncated");
  if (truncated != "true" && truncated != "false" && !truncated.empty())
    malformed(what, fmt::format("IsTruncated is '{}'", printable(truncated.substr(0, 40))));
  page.truncated = truncated == "true";
  page.next_key_marker = root.child_text("NextKeyMarker");
  if (encoded) page.next_key_marker = url_decode(page.next_key_marker, what);
  page.next_upload_id_marker = root.child_text("NextUploadIdMarker");
  if (page.truncated && page.next_key_marker.empty() && page.next_upload_id_marker.empty())
    malformed(what, "IsTruncated is true and there is no marker to go on from");
  return page;
}

std::string parse_upload_id(const std::string& body, const std::string& what) {
  const XmlElement root = parse_or_refuse(body, what);
  const std::string id = root.child_text("UploadId");
  if (root.name != "InitiateMultipartUploadResult" || id.empty()) malformed(what, "no UploadId");
  return id;
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
