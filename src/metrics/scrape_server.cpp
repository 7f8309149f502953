// The scrape server's one loop (scrape_server.h): poll() over the stop pipe, the listening
// socket and every open client; each client is read, answered and closed as its own socket
// allows, never waited for.
#include "metrics/scrape_server.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"

namespace dlrun::metrics {
namespace {

constexpr size_t kMaxRequest = 8192;     // a scrape's request is a few hundred bytes: past this, it is answered as it is
constexpr double kBackoffSeconds = 0.2;  // out of descriptors: accepting pauses this long, serving goes on

/// One open client: its request as read so far, then its answer as sent so far.
struct Client {
  int fd = -1;
  double deadline = 0;  ///< mono_now() past which it is dropped
  std::string request;
  std::string answer;   ///< empty while the request is still being read
  size_t sent = 0;
  bool answering() const { return !answer.empty(); }
};

bool whole(const std::string& request) {
  return request.find("\r\n\r\n") != std::string::npos || request.size() >= kMaxRequest;
}

/// The HTTP answer to `request`: `body()` for a GET of `path`, else 404. Every answer closes
/// its connection.
std::string answer_to(const std::string& request, const std::string& path, const std::function<std::string()>& body) {
  const bool ok = request.rfind("GET " + path + " ", 0) == 0 || request.rfind("GET " + path + "?", 0) == 0;
  const std::string b = ok ? body() : fmt::format("dlrun serves GET {} only\n", path);
  return fmt::format(
      "HTTP/1.1 {}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\n"
      "Connection: close\r\n\r\n{}",
      ok ? "200 OK" : "404 Not Found", b.size(), b);
}

/// Reads what `c` has sent so far; once its request is whole (its blank line, kMaxRequest bytes,
/// or the client's end of sending), makes its answer. False: drop the client.
bool read_request(Client& c, const std::string& path, const std::function<std::string()>& body) {
  char buf[2048];
  while (!whole(c.request)) {
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n > 0) {
      c.request.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {  // the client's end of sending: what it sent is its request
      if (c.request.empty()) return false;
      break;
    } else if (errno != EINTR) {
      return errno == EAGAIN || errno == EWOULDBLOCK;  // the rest when it comes
    }
  }
  c.answer = answer_to(c.request, path, body);
  return true;
}

/// Sends as much of `c`'s answer as its socket takes now. False: all sent, or the client is
/// gone; either way, close it.
bool send_answer(Client& c) {
  while (c.sent < c.answer.size()) {
    const ssize_t n = ::send(c.fd, c.answer.data() + c.sent, c.answer.size() - c.sent, MSG_NOSIGNAL);
    if (n > 0) {
      c.sent += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      return errno == EAGAIN || errno == EWOULDBLOCK;  // the rest when the socket takes it
    }
  }
  return false;
}

/// Takes the connections waiting on `listen_fd`, at most `o.max_clients` in one turn. Past the
/// bound, each new client drops the oldest one still sending its request (the likely idle one),
/// or the oldest when every client is being answered. Returns when to accept again: `now`, or
/// after a pause when the process is out of descriptors.
double accept_clients(int listen_fd, std::vector<Client>& clients, const ScrapeServerOptions& o, double now) {
  for (size_t n = 0; n < o.max_clients; ++n) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) return now + kBackoffSeconds;
      return now;  // none waiting (EAGAIN), or a connection that failed on its way in
    }
    if (clients.size() >= o.max_clients) {
      auto oldest = std::find_if(clients.begin(), clients.end(), [](const Client& c) { return !c.answering(); });
      if (oldest == clients.end()) oldest = clients.begin();
      ::close(oldest->fd);
      clients.erase(oldest);
    }
    Client c;
    c.fd = fd;
    c.deadline = now + o.client_timeout_s;
    clients.push_back(std::move(c));
  }
  return now;
}

}  // namespace

ScrapeServer::ScrapeServer(int listen_fd, std::function<std::string()> body, ScrapeServerOptions opts)
    : listen_fd_(listen_fd), body_(std::move(body)), o_(std::move(opts)) {
  o_.max_clients = std::max<size_t>(1, o_.max_clients);
  if (::pipe2(wake_, O_CLOEXEC) != 0) fail_runtime("metrics endpoint: pipe: {}", std::strerror(errno));
  try {
    thread_ = std::thread([this] { serve(); });
  } catch (...) {
    ::close(wake_[0]), ::close(wake_[1]);
    throw;
  }
}

ScrapeServer::~ScrapeServer() { stop(); }

void ScrapeServer::stop() {
  if (!thread_.joinable()) return;
  (void)!::write(wake_[1], "x", 1);
  thread_.join();
  ::close(wake_[0]);
  ::close(wake_[1]);
  wake_[0] = wake_[1] = -1;
}

void ScrapeServer::serve() {
  std::vector<Client> clients;  // oldest first
  std::vector<pollfd> fds;
  double accept_after = 0;
  auto drop_closed = [&clients] {
    clients.erase(std::remove_if(clients.begin(), clients.end(), [](const Client& c) { return c.fd < 0; }),
                  clients.end());
  };
  while (true) {
    const double now = mono_now();
    double wake = std::numeric_limits<double>::infinity();
    for (Client& c : clients) {
      if (c.deadline > now) {
        wake = std::min(wake, c.deadline);
      } else {  // a slow or idle client: dropped unanswered
        ::close(c.fd);
        c.fd = -1;
      }
    }
    drop_closed();
    const bool accepting = now >= accept_after;
    if (!accepting) wake = std::min(wake, accept_after);
    fds.assign({{wake_[0], POLLIN, 0}, {accepting ? listen_fd_ : -1, POLLIN, 0}});  // (a negative fd is skipped)
    for (const Client& c : clients) fds.push_back({c.fd, static_cast<short>(c.answering() ? POLLOUT : POLLIN), 0});
    const int timeout_ms =
        std::isinf(wake) ? -1 : static_cast<int>(std::min(3.6e6, std::ceil((wake - now) * 1000)));
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0) {
      if (errno == EINTR) continue;
      log::warn("metrics endpoint: poll: {}; no longer serving", std::strerror(errno));
      break;
    }
    if (fds[0].revents) break;
    for (size_t i = 0; i < clients.size(); ++i) {
      if (!fds[i + 2].revents) continue;
      Client& c = clients[i];
      bool open = c.answering() || read_request(c, o_.path, body_);
      if (open && c.answering()) open = send_answer(c);  // (a fresh answer goes out at once)
      if (!open) {
        ::close(c.fd);
        c.fd = -1;
      }
    }
    drop_closed();
    if (accepting && (fds[1].revents & POLLIN)) accept_after = accept_clients(listen_fd_, clients, o_, mono_now());
  }
  for (const Client& c : clients) ::close(c.fd);
}

}  // namespace dlrun::metrics
