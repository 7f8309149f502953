// The rendezvous store's listening socket, bound by dlrun rather than by c10d: c10d's TCPStore
// server listens on every interface of the host, while the other ranks only ever connect to
// MASTER_ADDR. Rank 0 binds MASTER_ADDR itself and hands the socket to the store
// (TCPStoreOptions::masterListenFd), so a single-host job on 127.0.0.1 is not reachable from the
// network at all. No LibTorch: unit-tested in tests/world/world_test.cpp.
#pragma once

#include <string>

namespace dlrun::dist {

struct Listener {
  int fd = -1;          ///< a listening TCP socket (close-on-exec), or -1: bind every interface
  std::string address;  ///< the address it is bound to ("127.0.0.1"), or "" with fd -1
  std::string note;     ///< with fd -1: why every interface (for the log)
};

/// Bind and listen on `addr`:`port` (port 0: any free port). A loopback address or "localhost"
/// binds loopback; another literal address or a host name binds the first of its addresses
/// that belongs to this host -- but a host name that resolves here only to loopback (Debian
/// maps the host's own name to 127.0.1.1) is taken to mean this host as the others see it, and
/// gets every interface, as torchrun does. An address that is not this host's (a Kubernetes
/// ClusterIP service, a NAT) also gets every interface. Throws dlrun::Error (exit 1) when the
/// port is in use.
Listener bind_listener(const std::string& addr, int port);

}  // namespace dlrun::dist
