// Atomic JSON files (summary.json, manifests): write a temporary file next to the target,
// fsync it, rename it over the target and fsync the directory, so a reader sees either the
// old file or the whole new one, never a torn write.
#include "metrics/writers.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "base/error.h"

namespace dlrun::metrics {
namespace {

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // best effort: some filesystems refuse to open directories
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void write_json_atomic(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::string text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  text.push_back('\n');

  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_runtime("{}: cannot create: {}", tmp, std::strerror(errno));
  size_t off = 0;
  while (off < text.size()) {
    ssize_t w = ::write(fd, text.data() + off, text.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail_runtime("{}: write failed: {}", tmp, std::strerror(e));
    }
    off += size_t(w);
  }
  int rc = ::fsync(fd);
  int e = errno;
  if (::close(fd) != 0 && rc == 0) rc = -1, e = errno;
  if (rc != 0) {
    ::unlink(tmp.c_str());
    fail_runtime("{}: fsync failed: {}", tmp, std::strerror(e));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail_runtime("{}: cannot rename {} over it: {}", path, tmp, std::strerror(e));
  }
  fsync_dir(std::filesystem::path(path).parent_path().string());
}

}  // namespace dlrun::metrics
