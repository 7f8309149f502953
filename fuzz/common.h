// What every fuzz target shares: a scratch directory for the readers that take paths, and
// the one rule of the harnesses -- dlrun::Error (a clear bad-input message) is the expected
// answer to garbage; anything else that escapes (std::bad_alloc, std::out_of_range, a
// c10::Error, a crash, a sanitizer report) is a finding.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace dlrun::fuzz {

/// A directory under $TMPDIR made once per process (libFuzzer runs inputs in one process).
inline const std::string& scratch() {
  static const std::string dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/dlrun-fuzz-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    return tmpl;
  }();
  return dir;
}

/// Write `bytes` to `path` (truncating).
inline void write(const std::string& path, std::string_view bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  std::fclose(f);
}

/// Splits the input at the first occurrence of `sep`: (before, after). No separator: (all, "").
inline std::pair<std::string_view, std::string_view> split(std::string_view in, std::string_view sep) {
  const auto at = in.find(sep);
  if (at == std::string_view::npos) return {in, {}};
  return {in.substr(0, at), in.substr(at + sep.size())};
}

}  // namespace dlrun::fuzz
