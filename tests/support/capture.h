// Capture what a piece of code writes to stderr (dlrun's log lines), for tests that check a
// warning a user would read.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>

#include "support/files.h"
#include "support/scratch_dir.h"

namespace dlrun::testing {

inline std::string capture_stderr(const std::function<void()>& fn) {
  ScratchDir d;
  const std::string path = d / "stderr.txt";
  std::fflush(stderr);
  const int saved = ::dup(2);
  std::FILE* f = std::fopen(path.c_str(), "w");
  ::dup2(::fileno(f), 2);
  try {
    fn();
  } catch (...) {
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
    std::fclose(f);
    throw;
  }
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::fclose(f);
  return read_text(path);
}

}  // namespace dlrun::testing
