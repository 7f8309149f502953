// Helpers for the checkpoint unit tests: a temporary directory removed at scope exit and
// ways to damage files the way crashes and bad disks do. POSIX calls rather than
// std::filesystem: see src/checkpoint/fsutil.h for why (libtorch's exported copy).
#pragma once

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>

#include "checkpoint/fsutil.h"
#include "checkpoint/sample_snapshot.h"

namespace dlrun::testing {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/dlrun-ckpt-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    try {
      ckpt::detail::remove_tree(path_);
    } catch (...) {
    }
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

inline void flip_byte(const std::string& path, std::streamoff offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.get(c);
  f.seekp(offset);
  f.put(static_cast<char>(c ^ 0x01));
}

inline uint64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

inline void truncate_by(const std::string& path, uint64_t bytes) {
  if (::truncate(path.c_str(), static_cast<off_t>(file_size(path) - bytes)) != 0)
    throw std::runtime_error("truncate failed: " + path);
}

inline void remove_file(const std::string& path) { std::remove(path.c_str()); }

using ckpt::detail::is_directory;
using ckpt::detail::is_regular_file;
using ckpt::detail::make_dirs;
using ckpt::detail::path_exists;

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace dlrun::testing
