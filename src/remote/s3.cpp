// The S3 client (see s3.h). Every request carries x-amz-content-sha256 (S3 requires it with
// SigV4, and libcurl 7.88 takes the payload hash from it) and, with temporary credentials,
// x-amz-security-token; both are then part of the signature.
#include "remote/s3.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/error.h"
#include "base/http.h"
#include "base/sha256.h"

namespace dlrun::remote {
namespace {

constexpr const char* kEmptySha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr uint64_t kMinPart = 5ull << 20;     // S3: every part but the last at least 5 MiB
constexpr uint64_t kMaxParts = 10000;         // S3: at most 10,000 parts

std::string unescape_xml(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const size_t semi = s.find(';', i);
    if (semi == std::string::npos) {
      out += s[i];
      continue;
    }
    const std::string ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp") out += '&';
    else if (ent == "lt") out += '<';
    else if (ent == "gt") out += '>';
    else if (ent == "quot") out += '"';
    else if (ent == "apos") out += '\'';
    else if (!ent.empty() && ent[0] == '#') {
      const long cp = ent.size() > 1 && (ent[1] == 'x' || ent[1] == 'X') ? std::strtol(ent.c_str() + 2, nullptr, 16)
                                                                         : std::strtol(ent.c_str() + 1, nullptr, 10);
      if (cp < 0x80) {
        out += static_cast<char>(cp);
      } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      }
    } else {
      out += s.substr(i, semi - i + 1);
    }
    i = semi;
  }
  return out;
}

/// What a failed answer says: "HTTP 403 InvalidAccessKeyId: The AWS Access Key Id ...".
S3Error error_of(const http::Response& r, const std::string& what) {
  if (r.status == 0) return S3Error(fmt::format("{}: no answer: {}", what, r.error), 0, "");
  const std::string code = xml_value(r.body, "Code"), message = xml_value(r.body, "Message");
  std::string text = fmt::format("{}: HTTP {}", what, r.status);
  if (!code.empty()) text += " " + code;
  if (!message.empty()) text += ": " + message;
  return S3Error(text, r.status, code);
}

}  // namespace

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
  std::string rest = url.substr(5);
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
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

std::vector<std::string> xml_blocks(const std::string& xml, const std::string& tag) {
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  std::vector<std::string> out;
  for (size_t a = xml.find(open); a != std::string::npos; a = xml.find(open, a)) {
    const size_t b = xml.find(close, a + open.size());
    if (b == std::string::npos) break;
    out.push_back(xml.substr(a + open.size(), b - a - open.size()));
    a = b + close.size();
  }
  return out;
}

std::string xml_value(const std::string& xml, const std::string& tag, size_t from, size_t* pos) {
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  const size_t a = xml.find(open, from);
  const size_t b = a == std::string::npos ? std::string::npos : xml.find(close, a + open.size());
  if (b == std::string::npos) {
    if (pos) *pos = std::string::npos;
    return "";
  }
  if (pos) *pos = b + close.size();
  return unescape_xml(xml.substr(a + open.size(), b - a - open.size()));
}

// ---- configuration -------------------------------------------------------------------------

S3Error::S3Error(std::string what, long status, std::string code)
    : std::runtime_error(std::move(what)), status_(status), code_(std::move(code)) {}

bool S3Error::transient() const {
  if (code_ == "cancelled" || code_ == "local") return false;
  return status_ == 0 || status_ >= 500 || status_ == 429 || code_ == "SlowDown" || code_ == "RequestTimeout";
}

// ---- requests ------------------------------------------------------------------------------

/// One signed request.
struct S3Client::Call {
  const S3Client& client;
  http::Request req;

  Call(const S3Client& c, std::string method, std::string url, const std::string& payload_sha256) : client(c) {
    req.method = std::move(method);
    req.url = std::move(url);
    req.headers.push_back("x-amz-content-sha256: " + payload_sha256);
    if (!c.config_.session_token.empty()) req.headers.push_back("x-amz-security-token: " + c.config_.session_token);
    req.aws_sigv4 = "aws:amz:" + c.config_.region + ":s3";
    req.userpwd = c.config_.access_key + ":" + c.config_.secret_key;
    req.connect_timeout_ms = 5000;
    req.timeout_ms = 0;
    req.low_speed_bytes = 1024;  // a stalled transfer (under 1 KB/s for a minute) fails
    req.low_speed_seconds = 60;
    req.cancel = c.cancel_;
  }

  /// Perform; a status other than 2xx (or `ok_404` for 404) throws S3Error naming `what`.
  http::Response run(const std::string& what, bool ok_404 = false) {
    http::Response r = http::perform(req);
    if (r.cancelled) throw S3Error(what + ": cancelled", 0, "cancelled");
    if ((r.status >= 200 && r.status < 300) || (ok_404 && r.status == 404)) return r;
    throw error_of(r, what);
  }
};

S3Client::S3Client(S3Config config, std::string bucket) : config_(std::move(config)), bucket_(std::move(bucket)) {}

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
  if (!content_type.empty()) call.req.headers.push_back("Content-Type: " + content_type);
  call.req.body = &data;
  call.run("PUT " + describe(key));
}

void S3Client::put_file(const std::string& key, const std::string& path, uint64_t size, const std::string& sha256) {
  if (size <= config_.part_bytes) {
    Call call(*this, "PUT", url(key), sha256);
    call.req.file = path;
    call.req.file_size = size;
    call.run("PUT " + describe(key));
    return;
  }
  uint64_t part = std::max(config_.part_bytes, kMinPart);
  while ((size + part - 1) / part > kMaxParts) part *= 2;
  Call init(*this, "POST", url(key, {{"uploads", ""}}), kEmptySha256);
  const std::string upload_id = xml_value(init.run("start multipart upload of " + describe(key)).body, "UploadId");
  if (upload_id.empty()) throw S3Error(describe(key) + ": the service returned no UploadId", 200, "");
  try {
    std::string parts = "<CompleteMultipartUpload>";
    std::vector<char> buf(1 << 20);
    for (uint64_t n = 1, off = 0; off < size; ++n, off += part) {
      const uint64_t len = std::min(part, size - off);
      // The part's own SHA-256: it is what gets signed, and S3 checks it on arrival.
      Sha256 h;
      std::FILE* f = std::fopen(path.c_str(), "rb");
      if (!f || ::fseeko(f, static_cast<off_t>(off), SEEK_SET) != 0) {
        if (f) std::fclose(f);
        fail_runtime("{}: cannot read for upload", path);
      }
      for (uint64_t left = len; left > 0;) {
        const size_t want = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
        const size_t got = std::fread(buf.data(), 1, want, f);
        if (got != want) {
          std::fclose(f);
          fail_runtime("{}: short read while uploading", path);
        }
        h.update(buf.data(), got);
        left -= got;
      }
      std::fclose(f);
      Call call(*this, "PUT", url(key, {{"partNumber", std::to_string(n)}, {"uploadId", upload_id}}), h.hex());
      call.req.file = path;
      call.req.file_offset = off;
      call.req.file_size = len;
      const http::Response r = call.run(fmt::format("PUT part {} of {}", n, describe(key)));
      const std::string etag = r.header("etag");
      if (etag.empty()) throw S3Error(describe(key) + ": the service returned no ETag for a part", r.status, "");
      parts += fmt::format("<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>", n, etag);
    }
    parts += "</CompleteMultipartUpload>";
    Call done(*this, "POST", url(key, {{"uploadId", upload_id}}), sha256_hex(parts.data(), parts.size()));
    done.req.headers.push_back("Content-Type: application/xml");
    done.req.body = &parts;
    const http::Response r = done.run("complete multipart upload of " + describe(key));
    // S3 may answer 200 and still report an error in the body.
    if (r.body.find("<Error>") != std::string::npos) throw error_of(http::Response{500, r.body, "", {}}, describe(key));
  } catch (...) {
    try {  // best effort: do not leave the parts billed
      Call abort(*this, "DELETE", url(key, {{"uploadId", upload_id}}), kEmptySha256);
      abort.run("abort multipart upload of " + describe(key), true);
    } catch (...) {
    }
    throw;
  }
}

std::string S3Client::get_bytes(const std::string& key) {
  Call call(*this, "GET", url(key), kEmptySha256);
  call.req.max_body = 64 << 20;
  return call.run("GET " + describe(key)).body;
}

void S3Client::get(const std::string& key, const std::function<void(const char*, size_t)>& sink) {
  Call call(*this, "GET", url(key), kEmptySha256);
  call.req.sink = [&](const char* p, size_t n) {
    sink(p, n);
    return true;
  };
  call.run("GET " + describe(key));
}

Listing S3Client::list(const std::string& prefix, const std::string& delimiter) {
  Listing out;
  std::string token;
  do {
    std::vector<std::pair<std::string, std::string>> q = {{"list-type", "2"}, {"prefix", prefix}};
    if (!delimiter.empty()) q.emplace_back("delimiter", delimiter);
    if (!token.empty()) q.emplace_back("continuation-token", token);
    Call call(*this, "GET", url("", q), kEmptySha256);
    call.req.max_body = 64 << 20;
    const std::string xml = call.run("list " + describe(prefix)).body;
    for (const auto& item : xml_blocks(xml, "Contents"))
      out.objects.push_back({xml_value(item, "Key"), std::strtoull(xml_value(item, "Size").c_str(), nullptr, 10)});
    for (const auto& item : xml_blocks(xml, "CommonPrefixes")) out.prefixes.push_back(xml_value(item, "Prefix"));
    token = xml_value(xml, "IsTruncated") == "true" ? xml_value(xml, "NextContinuationToken") : "";
  } while (!token.empty());
  return out;
}

void S3Client::remove(const std::string& key) {
  Call call(*this, "DELETE", url(key), kEmptySha256);
  call.run("DELETE " + describe(key), true);
}

}  // namespace dlrun::remote
