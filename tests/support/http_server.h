// A tiny HTTP/1.1 server for tests: listens on 127.0.0.1 on an ephemeral port, answers
// each request (one per connection) through a handler, records what it received, and
// stops in its destructor. Used to stand in for cloud metadata services.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace dlrun::test {

class HttpTestServer {
 public:
  struct Request {
    std::string method, path;
    std::map<std::string, std::string> headers;  ///< names lower-cased
    std::string body;
    std::string header(const std::string& name) const {
      auto it = headers.find(name);
      return it == headers.end() ? std::string() : it->second;
    }
  };
  struct Response {
    int status = 200;
    std::string body;
    std::vector<std::string> headers;  ///< extra "Name: value" lines
  };
  using Handler = std::function<Response(const Request&)>;

  explicit HttpTestServer(Handler handler) : handler_(std::move(handler)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(fd_, 16) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      throw std::runtime_error("HttpTestServer: cannot listen on 127.0.0.1");
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }

  ~HttpTestServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }

  int port() const { return port_; }
  std::string base() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<Request> requests() {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_;
  }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      timeval tv{2, 0};
      ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      handle(c);
      ::close(c);
    }
  }

  void handle(int c) {
    std::string in;
    char buf[4096];
    size_t head_end;
    while ((head_end = in.find("\r\n\r\n")) == std::string::npos) {
      ssize_t n = ::recv(c, buf, sizeof(buf), 0);
      if (n <= 0) return;
      in.append(buf, size_t(n));
    }
    Request req;
    size_t line_end = in.find("\r\n");
    const std::string first = in.substr(0, line_end);
    const size_t sp1 = first.find(' '), sp2 = first.rfind(' ');
    req.method = first.substr(0, sp1);
    req.path = first.substr(sp1 + 1, sp2 - sp1 - 1);
    for (size_t pos = line_end + 2; pos < head_end;) {
      size_t e = in.find("\r\n", pos);
      const std::string line = in.substr(pos, e - pos);
      pos = e + 2;
      size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return std::tolower(ch); });
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      req.headers[name] = value;
    }
    size_t want = req.headers.count("content-length") ? std::stoul(req.headers["content-length"]) : 0;
    while (in.size() - head_end - 4 < want) {  // drain the body (PUT sends Content-Length: 0)
      ssize_t n = ::recv(c, buf, sizeof(buf), 0);
      if (n <= 0) break;
      in.append(buf, size_t(n));
    }
    req.body = in.substr(head_end + 4, want);
    Response resp;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      requests_.push_back(req);
    }
    resp = handler_(req);
    std::string out = "HTTP/1.1 " + std::to_string(resp.status) + " X\r\nContent-Length: " +
                      std::to_string(resp.body.size()) + "\r\nConnection: close\r\n";
    for (const auto& h : resp.headers) out += h + "\r\n";
    out += "\r\n" + resp.body;
    for (size_t off = 0; off < out.size();) {
      ssize_t n = ::send(c, out.data() + off, out.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += size_t(n);
    }
  }

  Handler handler_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mutex_;
  std::vector<Request> requests_;
};

}  // namespace dlrun::test
