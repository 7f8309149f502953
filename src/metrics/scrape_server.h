// The HTTP side of the live metrics endpoint (openmetrics.h). Prometheus and a person's curl
// scrape at the same time, and a port scanner or a half-open connection may connect and say
// nothing; a server that answered one client at a time made every other scraper wait for such
// a client's deadline. This one serves many at once from one thread: one poll() loop over the
// listening socket and the open clients, each with its own request buffer, answer and deadline,
// every socket non-blocking, so one slow client never delays another's answer. The number of
// open clients is bounded; past the bound the oldest one still sending its request is dropped.
// docs/training.md, "Live metrics".
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <thread>

namespace dlrun::metrics {

struct ScrapeServerOptions {
  std::string path = "/metrics";   ///< the one path answered (GET, any query); others get 404
  size_t max_clients = 64;         ///< open clients at once; a new one past this drops the oldest
                                   ///< one still sending its request (else the oldest)
  double client_timeout_s = 2.0;   ///< a client's whole exchange, its request and our answer;
                                   ///< a client still in it after this is dropped unanswered
};

/// Serves GET `path` on a listening socket from a thread of its own until stop().
class ScrapeServer {
 public:
  /// Serves on `listen_fd`, a listening non-blocking socket the caller keeps and closes after
  /// stop(). `body` is called on the server's thread for each GET of the path, once the
  /// request is whole. Throws dlrun::Error (exit 1) when its pipe cannot be made, and
  /// std::system_error when its thread cannot.
  ScrapeServer(int listen_fd, std::function<std::string()> body, ScrapeServerOptions opts = {});
  ~ScrapeServer();
  ScrapeServer(const ScrapeServer&) = delete;
  ScrapeServer& operator=(const ScrapeServer&) = delete;

  /// Stops serving within one turn of the loop: the open clients are closed, unanswered.
  void stop();

 private:
  void serve();

  int listen_fd_;
  std::function<std::string()> body_;
  ScrapeServerOptions o_;
  int wake_[2] = {-1, -1};  ///< stop() writes to [1]; the loop polls [0]
  std::thread thread_;
};

}  // namespace dlrun::metrics
