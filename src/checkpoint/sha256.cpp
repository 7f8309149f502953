// SHA-256 as specified in FIPS 180-4 (section 6.2), written for the checkpoint manifests.
#include "checkpoint/sha256.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "base/error.h"

namespace dlrun::ckpt::detail {

std::string sha256_file(const std::string& path, uint64_t* bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_input("{}: cannot open: {}", path, std::strerror(errno));
  metrics::Sha256 s;
  std::vector<uint8_t> buf(1 << 20);
  uint64_t total = 0;
  for (;;) {
    ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int err = errno;
      ::close(fd);
      fail_input("{}: read failed: {}", path, std::strerror(err));
    }
    if (r == 0) break;
    s.update(buf.data(), static_cast<size_t>(r));
    total += static_cast<uint64_t>(r);
  }
  ::close(fd);
  if (bytes) *bytes = total;
  return s.hex();
}

}  // namespace dlrun::ckpt::detail
