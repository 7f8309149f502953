// libcurl wrapper for the notice watchers (see http.h). Metadata services answer in
// milliseconds on the instance; anything slow is treated as "no notice" and retried at
// the next poll, so the timeouts are short and a hung endpoint cannot stall the watcher.
#include "preempt/http.h"

#include "base/error.h"

#ifdef DLRUN_HAVE_CURL
#include <curl/curl.h>

#include <mutex>
#endif

namespace dlrun::preempt {

#ifdef DLRUN_HAVE_CURL
namespace {

constexpr size_t kMaxBody = 64 * 1024;

size_t on_body(char* data, size_t size, size_t nmemb, void* user) {
  auto* body = static_cast<std::string*>(user);
  const size_t n = size * nmemb;
  if (body->size() + n > kMaxBody) return 0;  // aborts the transfer: not a metadata answer
  body->append(data, n);
  return n;
}

}  // namespace

bool have_http() { return true; }

HttpResponse http_request(const std::string& method, const std::string& url,
                          const std::vector<std::string>& headers) {
  static std::once_flag init;
  std::call_once(init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });

  HttpResponse r;
  CURL* c = curl_easy_init();
  if (!c) {
    r.error = "curl_easy_init failed";
    return r;
  }
  curl_slist* hdrs = nullptr;
  for (const auto& h : headers) hdrs = curl_slist_append(hdrs, h.c_str());
  char errbuf[CURL_ERROR_SIZE] = {0};

  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 2000L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // we run on a background thread
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_PROXY, "");
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &r.body);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  if (method == "PUT") {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "PUT");
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
  }

  const CURLcode rc = curl_easy_perform(c);
  if (rc == CURLE_OK) {
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  } else {
    r.error = errbuf[0] ? errbuf : curl_easy_strerror(rc);
    r.body.clear();
  }
  curl_slist_free_all(hdrs);
  curl_easy_cleanup(c);
  return r;
}

#else

bool have_http() { return false; }

HttpResponse http_request(const std::string&, const std::string& url,
                          const std::vector<std::string>&) {
  fail_input("{}: cannot poll: dlrun was built without libcurl (install libcurl and rebuild, "
             "or use preemption.watch: file)", url);
}

#endif

}  // namespace dlrun::preempt
