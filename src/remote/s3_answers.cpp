// The S3 client's URLs and keys (s3://BUCKET/PREFIX, the URI encoding SigV4 signs, the URL
// decoding of listed keys) and the parsers of what the service answers -- error documents,
// listings, unfinished uploads, a multipart upload's id -- as untrusted input: expat with bounds
// (xml.h), keys checked against the prefix asked for and S3's length, sizes as byte counts;
// anything else is S3Error MalformedAnswer (s3_malformed.h). Declared in s3.h.
#include "remote/s3.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "base/error.h"
#include "base/strings.h"
#include "remote/s3_malformed.h"
#include "remote/xml.h"

namespace dlrun::remote {

[[noreturn]] void detail::malformed(const std::string& what, const std::string& why) {
  throw S3Error(fmt::format("{}: the service's answer is malformed: {}", what, why), 200, kMalformed);
}

namespace {

using detail::malformed;

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

constexpr size_t kMaxKey = 1024;  // S3: a key is at most 1,024 bytes

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

}  // namespace dlrun::remote
