// libcurl behind http::perform (see http.h).
#include "base/http.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/error.h"
#include "base/strings.h"

#ifdef DLRUN_HAVE_CURL
#include <curl/curl.h>

#include <exception>
#include <mutex>
#endif

namespace dlrun::http {

std::string Response::header(const std::string& name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return v;
  return "";
}

std::string url_host(const std::string& url) {
  const auto scheme = url.find("://");
  if (scheme == std::string::npos) return "";
  const size_t start = scheme + 3;
  const std::string authority = url.substr(start, url.find_first_of("/?#", start) - start);
  if (authority.empty() || authority.find('@') != std::string::npos) return "";  // no user:password@ tricks
  if (authority[0] == '[') {
    const auto close = authority.find(']');
    return close == std::string::npos ? "" : authority.substr(0, close + 1);
  }
  return authority.substr(0, authority.find(':'));
}

bool is_loopback_host(const std::string& host) {
  // A literal loopback IPv4 address: 127. and then digits and dots only (no name that merely
  // starts so, such as 127.0.0.1.example.com).
  const bool v4 = host.rfind("127.", 0) == 0 && std::count(host.begin(), host.end(), '.') == 3 &&
                  host.find_first_not_of("0123456789.") == std::string::npos;
  return v4 || lower(host) == "localhost" || host == "[::1]";
}

#ifdef DLRUN_HAVE_CURL
namespace {

struct Transfer {
  CURL* curl = nullptr;
  const Request* req = nullptr;
  Response* resp = nullptr;
  std::FILE* file = nullptr;
  uint64_t left = 0;           ///< file bytes still to send
  size_t body_pos = 0;         ///< in-memory body bytes sent
  bool aborted_by_sink = false;
  bool too_large = false;      ///< the body passed max_body
  std::exception_ptr sink_error;  ///< thrown by the sink: rethrown after the transfer
};

size_t on_body(char* data, size_t size, size_t nmemb, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * nmemb;
  long status = 0;
  curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
  if (t->req->sink && status >= 200 && status < 300) {
    try {  // nothing may be thrown through libcurl's C frames
      if (t->req->sink(data, n)) return n;
    } catch (...) {
      t->sink_error = std::current_exception();
    }
    t->aborted_by_sink = true;
    return 0;
  }
  if (t->resp->body.size() + n > t->req->max_body) {  // aborts: not what we asked for
    t->too_large = true;
    return 0;
  }
  t->resp->body.append(data, n);
  return n;
}

size_t on_header(char* data, size_t size, size_t nmemb, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * nmemb;
  std::string line(data, n);
  const auto colon = line.find(':');
  if (colon == std::string::npos) return n;
  t->resp->headers.emplace_back(lower(line.substr(0, colon)), trim(std::string_view(line).substr(colon + 1)));
  return n;
}

size_t on_read(char* buf, size_t size, size_t nmemb, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = size * nmemb;
  if (t->file) {
    n = static_cast<size_t>(std::min<uint64_t>(n, t->left));
    const size_t got = n ? std::fread(buf, 1, n, t->file) : 0;
    if (got != n) return CURL_READFUNC_ABORT;
    t->left -= got;
    return got;
  }
  if (!t->req->body) return 0;
  const std::string& body = *t->req->body;
  n = std::min(n, body.size() - t->body_pos);
  std::memcpy(buf, body.data() + t->body_pos, n);
  t->body_pos += n;
  return n;
}

// A rewind (a redirect is never followed, but a 417 to "Expect: 100-continue", or a
// connection that is retried, needs the body again): only to an absolute position.
int on_seek(void* user, curl_off_t offset, int origin) {
  auto* t = static_cast<Transfer*>(user);
  if (origin != SEEK_SET || offset < 0) return CURL_SEEKFUNC_CANTSEEK;
  const auto pos = static_cast<uint64_t>(offset);
  if (t->file) {
    if (pos > t->req->file_size ||
        ::fseeko(t->file, static_cast<off_t>(t->req->file_offset + pos), SEEK_SET) != 0)
      return CURL_SEEKFUNC_FAIL;
    t->left = t->req->file_size - pos;
    return CURL_SEEKFUNC_OK;
  }
  const size_t size = t->req->body ? t->req->body->size() : 0;
  if (pos > size) return CURL_SEEKFUNC_FAIL;
  t->body_pos = static_cast<size_t>(pos);
  return CURL_SEEKFUNC_OK;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* t = static_cast<Transfer*>(user);
  return t->req->cancel && t->req->cancel->load() ? 1 : 0;  // non-zero abandons the transfer
}

/// The words OpenSSL uses when the handshake fails over the TLS version or the server's
/// certificate (libcurl reports these as CURLE_SSL_CONNECT_ERROR, as it does a connection cut
/// during the handshake -- which is the network, and worth retrying).
bool names_a_tls_refusal(const std::string& message) {
  const std::string m = lower(message);
  for (const char* words : {"protocol version", "unsupported protocol", "wrong version number", "no protocols available",
                            "version too low", "certificate verify failed", "handshake failure"})
    if (m.find(words) != std::string::npos) return true;
  return false;
}

}  // namespace

bool available() { return true; }

bool tls_refusal(int curl_code, const std::string& message) {
  switch (curl_code) {
    case CURLE_PEER_FAILED_VERIFICATION:  // an unknown CA, an expired certificate, another host's name
    case CURLE_SSL_CACERT_BADFILE:        // the CA file cannot be read
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
      return true;
    case CURLE_SSL_CONNECT_ERROR:
      return names_a_tls_refusal(message);
    default:
      return false;
  }
}

Response perform(const Request& req) {
  static std::once_flag init;
  std::call_once(init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });

  Response r;
  if (req.cancel && req.cancel->load()) {
    r.cancelled = true;
    r.error = "cancelled";
    return r;
  }
  Transfer t;
  t.req = &req;
  t.resp = &r;
  uint64_t upload_size = req.body ? req.body->size() : 0;
  if (!req.file.empty()) {
    t.file = std::fopen(req.file.c_str(), "rb");
    if (!t.file) fail_runtime("{}: cannot open for upload: {}", req.file, std::strerror(errno));
    if (::fseeko(t.file, static_cast<off_t>(req.file_offset), SEEK_SET) != 0) {
      std::fclose(t.file);
      fail_runtime("{}: cannot seek to {}", req.file, req.file_offset);
    }
    t.left = upload_size = req.file_size;
  }
  CURL* c = curl_easy_init();
  if (!c) {
    if (t.file) std::fclose(t.file);
    r.error = "curl_easy_init failed";
    return r;
  }
  t.curl = c;
  curl_slist* hdrs = nullptr;
  for (const auto& h : req.headers) hdrs = curl_slist_append(hdrs, h.c_str());
  char errbuf[CURL_ERROR_SIZE] = {0};

  curl_easy_setopt(c, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, req.connect_timeout_ms);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, req.timeout_ms);
  if (req.low_speed_seconds > 0) {
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, req.low_speed_bytes);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, req.low_speed_seconds);
  }
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // used from background threads
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_PROXY, "");
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  // https: the server is verified, always; the CA store is the system's unless one is named.
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
  curl_easy_setopt(c, CURLOPT_SSLVERSION,
                   static_cast<long>(req.tls_min == Tls::k1_3 ? CURL_SSLVERSION_TLSv1_3 : CURL_SSLVERSION_TLSv1_2));
  if (!req.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, req.ca_file.c_str());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  // A body goes up through the read callback, announced with its length; S3 answers
  // "Expect: 100-continue" at once, other servers get the body after 200 ms anyway.
  curl_easy_setopt(c, CURLOPT_EXPECT_100_TIMEOUT_MS, 200L);
  if (req.method == "HEAD") {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (req.method == "DELETE") {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE");
  } else if (req.method != "GET") {  // PUT, POST: the body (possibly empty) goes up
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(c, CURLOPT_READDATA, &t);
    curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, on_seek);
    curl_easy_setopt(c, CURLOPT_SEEKDATA, &t);
    curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(upload_size));
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }
  if (req.cancel) {
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  }

  const CURLcode rc = curl_easy_perform(c);
  if (rc == CURLE_OK) {
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  } else {
    r.cancelled = rc == CURLE_ABORTED_BY_CALLBACK && req.cancel && req.cancel->load();
    r.too_large = t.too_large;
    // An error page too long to keep still says its status; a 2xx answer cut short is no answer.
    if (t.too_large) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    if (t.too_large && r.status >= 200 && r.status < 300) r.status = 0;
    r.error = r.cancelled        ? "cancelled"
              : t.aborted_by_sink ? "aborted by the receiver"
              : t.too_large       ? fmt::format("the answer is larger than {} bytes", req.max_body)
              : errbuf[0]         ? errbuf
                                  : curl_easy_strerror(rc);
    r.tls_refused = !r.cancelled && tls_refusal(rc, r.error);
    if (r.tls_refused && rc == CURLE_SSL_CONNECT_ERROR && lower(r.error).find("wrong version number") == std::string::npos &&
        lower(r.error).find("version") != std::string::npos)  // the server and the floor have no version in common
      r.error += fmt::format(" (this client accepts TLS {} and later)", req.tls_min == Tls::k1_3 ? "1.3" : "1.2");
    if (!t.too_large) r.status = 0;
  }
  curl_slist_free_all(hdrs);
  curl_easy_cleanup(c);
  if (t.file) std::fclose(t.file);
  if (t.sink_error) std::rethrow_exception(t.sink_error);
  return r;
}

#else

bool available() { return false; }

bool tls_refusal(int, const std::string&) { return false; }

Response perform(const Request& req) {
  fail_input("{}: dlrun was built without libcurl, which HTTP requests need (install libcurl and rebuild)", req.url);
}

#endif

}  // namespace dlrun::http
