// POSIX implementations of the durable writes used by the checkpoint commit protocol.
#include "checkpoint/fsutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "base/error.h"

namespace fs = std::filesystem;

namespace dlrun::ckpt::detail {
namespace {

std::string errstr(int err) { return std::strerror(err); }

}  // namespace

void write_file_durable(const std::string& path, std::string_view data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_runtime("{}: cannot create: {}", path, errstr(errno));
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t w = ::write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int err = errno;
      ::close(fd);
      fail_runtime("{}: write failed: {}", path, errstr(err));
    }
    p += w;
    left -= static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    fail_runtime("{}: fsync failed: {}", path, errstr(err));
  }
  if (::close(fd) != 0) fail_runtime("{}: close failed: {}", path, errstr(errno));
}

void write_file_atomic(const std::string& path, std::string_view data) {
  const std::string tmp = path + ".tmp";
  write_file_durable(tmp, data);
  rename_durable(tmp, path);
}

std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_input("{}: cannot open: {}", path, errstr(errno));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int err = errno;
      ::close(fd);
      fail_input("{}: read failed: {}", path, errstr(err));
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return out;
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail_runtime("{}: cannot open directory to fsync: {}", dir, errstr(errno));
  if (::fsync(fd) != 0 && errno != EINVAL) {  // EINVAL: the file system cannot sync directories
    int err = errno;
    ::close(fd);
    fail_runtime("{}: fsync of directory failed: {}", dir, errstr(err));
  }
  ::close(fd);
}

void rename_durable(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    fail_runtime("cannot rename {} to {}: {}", from, to, errstr(errno));
  fsync_dir(parent_of(to));
}

bool exchange_paths(const std::string& a, const std::string& b) {
#if defined(SYS_renameat2)
  constexpr unsigned kExchange = 2;  // RENAME_EXCHANGE from <linux/fs.h>
  if (::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), kExchange) == 0) return true;
  if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) return false;
  fail_runtime("cannot exchange {} and {}: {}", a, b, errstr(errno));
#else
  return false;
#endif
}

void make_dirs(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail_runtime("{}: cannot create directory: {}", dir, ec.message());
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) fail_runtime("{}: cannot remove: {}", path, ec.message());
}

std::string parent_of(const std::string& path) {
  fs::path p = fs::path(path);
  if (!p.has_filename()) p = p.parent_path();  // "a/b/" -> "a/b"
  fs::path parent = p.parent_path();
  return parent.empty() ? "." : parent.string();
}

std::string base_name(const std::string& path) {
  fs::path p = fs::path(path);
  if (!p.has_filename()) p = p.parent_path();
  return p.filename().string();
}

}  // namespace dlrun::ckpt::detail
