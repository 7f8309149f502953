// bind_listener: see listen.h.
#include "world/listen.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "base/error.h"

namespace dlrun::dist {
namespace {

bool is_loopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr) >> 24) == 127;
  if (sa->sa_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
  }
  return false;
}

std::string text_of(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  const void* a = sa->sa_family == AF_INET ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(sa)->sin_addr)
                                           : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr);
  return ::inet_ntop(sa->sa_family, a, buf, sizeof(buf)) ? buf : "?";
}

bool is_literal(const std::string& addr) {
  unsigned char buf[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, addr.c_str(), buf) == 1 || ::inet_pton(AF_INET6, addr.c_str(), buf) == 1;
}

}  // namespace

Listener bind_listener(const std::string& addr, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(addr.c_str(), service.c_str(), &hints, &res); rc != 0)
    return {-1, "", "MASTER_ADDR " + addr + " does not resolve here (" + ::gai_strerror(rc) + ")"};
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(res, ::freeaddrinfo);

  bool only_loopback = true;
  for (const addrinfo* ai = res; ai; ai = ai->ai_next) only_loopback = only_loopback && is_loopback(ai->ai_addr);
  if (only_loopback && addr != "localhost" && !is_literal(addr))
    return {-1, "", "MASTER_ADDR " + addr + " resolves here only to a loopback address (other hosts may resolve it "
                    "to this host's network address)"};

  for (const addrinfo* ai = res; ai; ai = ai->ai_next) {
    if (!only_loopback && is_loopback(ai->ai_addr)) continue;  // a name for this host on the network
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0)
      return {fd, text_of(ai->ai_addr), ""};
    const int err = errno;
    ::close(fd);
    if (err == EADDRINUSE)
      throw Error(ExitCode::kRuntime, fmt::format("port {} on {} is in use", port, text_of(ai->ai_addr)),
                  "another job may use this port: pick another with --master-port (MASTER_PORT), or start a "
                  "single-node job with scripts/dlrun-launch --standalone, which picks a free one");
  }
  return {-1, "", "MASTER_ADDR " + addr + " is not an address of this host (a service or NAT address?)"};
}

}  // namespace dlrun::dist
