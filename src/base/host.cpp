// This machine's name (see host.h).
#include "base/host.h"

#include <unistd.h>

namespace dlrun {

std::string hostname(const std::string& unknown) {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return unknown;
  return buf;
}

}  // namespace dlrun
