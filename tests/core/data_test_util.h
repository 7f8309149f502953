// Helpers shared by the data tests: temporary directories, raw/gzip file writers, and a
// check that a call fails with a bad-input error naming a file.
#pragma once

#include <catch2/catch.hpp>
#include <ftw.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"

namespace dlrun::testing::data {

namespace fs = std::filesystem;

/// Removes a directory tree with POSIX nftw. (std::filesystem::remove_all resolves to a
/// broken copy exported by libtorch.so and crashes in binaries linked with torch.)
inline void remove_tree(const fs::path& p) {
  ::nftw(
      p.string().c_str(), [](const char* f, const struct stat*, int, struct FTW*) { return std::remove(f); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

/// A fresh directory under the system temp dir, removed at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() / ("dlrun_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    remove_tree(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    remove_tree(path);
  }
  std::string str() const { return path.string(); }
};

inline void write_file(const fs::path& p, const std::vector<uint8_t>& bytes, bool gz = false) {
  fs::create_directories(p.parent_path());
  if (gz) {
    gzFile f = gzopen(p.string().c_str(), "wb");
    REQUIRE(f != nullptr);
    if (!bytes.empty()) REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
    gzclose(f);
    return;
  }
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<uint8_t> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// Runs fn; requires a dlrun::Error with exit code 2 whose message contains every part.
template <typename Fn>
void require_input_error(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    INFO("message: " << e.message());
    CHECK(e.code() == ExitCode::kBadInput);
    for (const auto& part : parts) CHECK(e.message().find(part) != std::string::npos);
    return;
  }
  FAIL("expected a bad-input error mentioning " << (parts.empty() ? std::string() : parts[0]));
}

}  // namespace dlrun::testing::data
