// The test-support library (scratch_dir.h, files.h): plain POSIX and dlrun's own file
// primitives, no LibTorch, so both test executables link it.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "base/fsutil.h"
#include "files.h"
#include "scratch_dir.h"

namespace dlrun::testing {

ScratchDir::ScratchDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/dlrun-test-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
  path_ = tmpl;
}

ScratchDir::~ScratchDir() {
  try {
    fsutil::remove_tree(path_);
  } catch (...) {
  }
}

std::string ScratchDir::write(const std::string& rel, const std::string& text) const {
  const std::string p = path(rel);
  fsutil::make_dirs(fsutil::parent_of(p));
  write_text(p, text);
  return p;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  if (!f) throw std::runtime_error("cannot write " + path);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

uint64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

void flip_byte(const std::string& path, int64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.get(c);
  f.seekp(offset);
  f.put(static_cast<char>(c ^ 0x01));
  if (!f) throw std::runtime_error("cannot flip a byte of " + path);
}

void truncate_by(const std::string& path, uint64_t bytes) {
  if (::truncate(path.c_str(), static_cast<off_t>(file_size(path) - bytes)) != 0)
    throw std::runtime_error("truncate failed: " + path);
}

void remove_file(const std::string& path) { std::remove(path.c_str()); }

}  // namespace dlrun::testing
