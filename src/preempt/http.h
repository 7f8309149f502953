// A minimal HTTP client for cloud metadata endpoints (libcurl when DLRUN_HAVE_CURL).
// Internal to src/preempt: short timeouts, no redirects, no proxies, small bodies.
#pragma once

#include <string>
#include <vector>

namespace dlrun::preempt {

struct HttpResponse {
  long status = 0;    ///< HTTP status; 0 when no response arrived (see error)
  std::string body;   ///< at most kMaxBody bytes
  std::string error;  ///< transport error text when status == 0
};

/// True when dlrun was built with libcurl.
bool have_http();

/// One request. method: "GET" or "PUT" (PUT sends an empty body). headers: "Name: value".
/// Connect timeout 1 s, total 2 s; redirects are never followed (a 3xx is returned as is);
/// proxy environment variables are ignored (metadata services are link-local). Never
/// throws for network errors; throws dlrun::Error(2) when built without libcurl.
HttpResponse http_request(const std::string& method, const std::string& url,
                          const std::vector<std::string>& headers);

}  // namespace dlrun::preempt
