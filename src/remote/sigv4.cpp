// AWS Signature Version 4 (sigv4.h): the canonical request, the string to sign, the key derived
// from the secret through the date, region and service, and the Authorization header.
#include "remote/sigv4.h"

#include <algorithm>
#include <utility>

#include "base/sha256.h"
#include "base/strings.h"

namespace dlrun::remote {

namespace {

/// A header value as signed: surrounding whitespace off, inner runs of spaces made one.
std::string canonical_value(const std::string& v) {
  const std::string t = trim(v);
  std::string out;
  for (char c : t) {
    if (c == ' ' && !out.empty() && out.back() == ' ') continue;
    out += c;
  }
  return out;
}

}  // namespace

std::vector<std::string> sigv4_headers(const std::string& method, const std::string& url,
                                       const std::vector<std::string>& headers, const std::string& payload_sha256,
                                       const Credentials& credentials, const std::string& region,
                                       const std::string& service, std::time_t now) {
  // The URL: scheme://authority/path?query
  const size_t start = url.find("://") == std::string::npos ? 0 : url.find("://") + 3;
  const size_t path_at = url.find('/', start), query_at = url.find('?', start);
  const std::string authority = url.substr(start, std::min(path_at, query_at) - start);
  std::string path = path_at == std::string::npos || path_at > query_at ? "/" : url.substr(path_at, query_at - path_at);
  const std::string query = query_at == std::string::npos ? "" : url.substr(query_at + 1);

  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char stamp[17];
  std::strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
  const std::string date(stamp, 8);

  std::vector<std::pair<std::string, std::string>> signed_headers = {{"host", authority}, {"x-amz-date", stamp}};
  for (const auto& h : headers) {
    const auto colon = h.find(':');
    signed_headers.emplace_back(lower(trim(std::string_view(h).substr(0, colon))),
                                canonical_value(colon == std::string::npos ? "" : h.substr(colon + 1)));
  }
  std::stable_sort(signed_headers.begin(), signed_headers.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string canonical_headers, names;
  for (size_t i = 0; i < signed_headers.size(); ++i) {
    const auto& [name, value] = signed_headers[i];
    if (i > 0 && signed_headers[i - 1].first == name) {  // a repeated header: its values, comma-separated
      canonical_headers.back() = ',';
      canonical_headers += value + "\n";
      continue;
    }
    canonical_headers += name + ":" + value + "\n";
    names += (names.empty() ? "" : ";") + name;
  }
  const std::string canonical_request =
      method + "\n" + path + "\n" + query + "\n" + canonical_headers + "\n" + names + "\n" + payload_sha256;
  const std::string scope = date + "/" + region + "/" + service + "/aws4_request";
  const std::string to_sign = std::string("AWS4-HMAC-SHA256\n") + stamp + "\n" + scope + "\n" +
                              sha256_hex(canonical_request.data(), canonical_request.size());
  std::string key = hmac_sha256("AWS4" + credentials.secret_key, date);
  key = hmac_sha256(key, region);
  key = hmac_sha256(key, service);
  key = hmac_sha256(key, "aws4_request");
  const std::string signature = to_hex(hmac_sha256(key, to_sign));
  return {"Host: " + authority, std::string("x-amz-date: ") + stamp,
          "Authorization: AWS4-HMAC-SHA256 Credential=" + credentials.access_key + "/" + scope +
              ", SignedHeaders=" + names + ", Signature=" + signature};
}

}  // namespace dlrun::remote
