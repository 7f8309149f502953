// POSIX implementations of the durable writes used by the checkpoint commit protocol.
#include "base/fsutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/fault.h"

namespace dlrun::fsutil {
namespace fs = std::filesystem;
namespace {

std::string errstr(int err) { return std::strerror(err); }

}  // namespace

void write_file_durable(const std::string& path, std::string_view data) {
  // DLRUN_FAULT=disk_error: fail like a full or broken disk (docs/testing.md).
  const int injected = fault::write_error(path);
  if (injected == EROFS) fail_runtime("{}: cannot create: {}", path, errstr(EROFS));
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_runtime("{}: cannot create: {}", path, errstr(errno));
  const char* p = data.data();
  size_t left = data.size();
  const size_t fail_below = injected ? data.size() - data.size() / 2 : 0;  // half written, then the error
  while (left > 0) {
    ssize_t w = left <= fail_below ? (errno = injected, -1) : ::write(fd, p, left - fail_below);
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

void write_json_atomic(const std::string& path, const nlohmann::json& j) {
  std::string text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  text.push_back('\n');
  write_file_atomic(path, text);
}

namespace {
// Reads straight into the output buffer, sized from fstat and grown if the file is longer.
template <typename Out>
Out read_whole(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_input("{}: cannot open: {}", path, errstr(errno));
  Out out;
  struct stat st {};
  size_t cap = ::fstat(fd, &st) == 0 && st.st_size > 0 ? static_cast<size_t>(st.st_size) : 0;
  out.resize(cap + 1);  // one spare byte: reaching it means the file grew
  size_t len = 0;
  for (;;) {
    if (len == out.size()) out.resize(out.size() * 2);
    ssize_t r = ::read(fd, &out[len], out.size() - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int err = errno;
      ::close(fd);
      fail_input("{}: read failed: {}", path, errstr(err));
    }
    if (r == 0) break;
    len += static_cast<size_t>(r);
  }
  ::close(fd);
  out.resize(len);
  return out;
}
}  // namespace

std::string read_file(const std::string& path) { return read_whole<std::string>(path); }
std::vector<char> read_bytes(const std::string& path) { return read_whole<std::vector<char>>(path); }

std::string read_head(const std::string& path, size_t n, uint64_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_input("{}: cannot open: {}", path, errstr(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail_input("{}: cannot stat: {}", path, errstr(err));
  }
  *size = st.st_size > 0 ? static_cast<uint64_t>(st.st_size) : 0;
  std::string out(n, '\0');
  size_t len = 0;
  while (len < n) {
    const ssize_t r = ::read(fd, &out[len], n - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      fail_input("{}: read failed: {}", path, errstr(err));
    }
    if (r == 0) break;
    len += static_cast<size_t>(r);
  }
  ::close(fd);
  out.resize(len);
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

// The path helpers: std::filesystem, but for removal (below).

bool path_exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(path, ec));  // a dangling link exists too (lstat)
}

bool is_directory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

bool is_regular_file(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

std::vector<std::string> list_names(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    out.push_back(it->path().filename().string());
  return out;
}

void make_dirs(const std::string& dir) {
  std::error_code ec;
  if (dir.empty() || fs::create_directories(dir, ec) || !ec) return;
  // Name the component that could not be made: the deepest one that is not a directory.
  fs::path failed = dir;
  while (failed.has_parent_path() && failed.parent_path() != failed && !is_directory(failed.parent_path().string()))
    failed = failed.parent_path();
  fail_runtime("{}: cannot create directory ({}: {})", dir, failed.string(), ec.message());
}

// Plain POSIX, not std::filesystem::remove_all: in a process that loads libtorch.so the dynamic
// linker binds remove_all to the copy libtorch exports, which jumped to a null address in the
// checkpoint writer's thread (docs/development.md, "std::filesystem").
void remove_tree(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    fail_runtime("{}: cannot remove: {}", path, errstr(errno));
  }
  if (S_ISDIR(st.st_mode)) {
    for (const auto& name : list_names(path)) remove_tree(path + "/" + name);
    if (::rmdir(path.c_str()) != 0 && errno != ENOENT) fail_runtime("{}: cannot remove: {}", path, errstr(errno));
  } else if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    fail_runtime("{}: cannot remove: {}", path, errstr(errno));
  }
}

namespace {
std::string without_trailing_slashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}
}  // namespace

std::string parent_of(const std::string& path) {
  const fs::path parent = fs::path(without_trailing_slashes(path)).parent_path();
  return parent.empty() ? "." : parent.string();
}

std::string dir_part(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  const std::string p = without_trailing_slashes(path);
  return p == "/" ? p : fs::path(p).filename().string();
}

}  // namespace dlrun::fsutil
