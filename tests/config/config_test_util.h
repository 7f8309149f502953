// Helpers shared by the config tests: catch a config dlrun::Error and check every part a
// user sees (exit code, dotted key, file:line:column, message), and a scratch directory
// for `base:` files.
#pragma once

#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <unistd.h>

#include "base/error.h"
#include "config/loader.h"

namespace dlrun::testing {

/// What a config error must say. line/column 0 means "no line/column in the location".
struct Expect {
  std::string key;        ///< Error::key()
  std::string file;       ///< Error::loc().file
  int line = 0;           ///< Error::loc().line
  int column = -1;        ///< Error::loc().column (-1: not checked)
  std::string fragment;   ///< must occur in message() + "\n" + hint()
};

/// Run `fn`, which must throw a bad-input dlrun::Error matching `e`; returns it.
inline std::optional<Error> expect_error(const std::function<void()>& fn, const Expect& e) {
  try {
    fn();
  } catch (const Error& err) {
    INFO("rendered: " << err.render());
    CHECK(err.code() == ExitCode::kBadInput);
    CHECK(static_cast<int>(err.code()) == 2);
    CHECK(err.key() == e.key);
    CHECK(err.loc().file == e.file);
    CHECK(err.loc().line == e.line);
    if (e.column >= 0) CHECK(err.loc().column == e.column);
    CHECK_THAT(err.message() + "\n" + err.hint(), Catch::Matchers::Contains(e.fragment));
    return err;
  }
  FAIL("no dlrun::Error was thrown; expected one at key '" << e.key << "'");
  return std::nullopt;
}

/// load_text(yaml, "mem.yaml", overrides) must fail as `e` describes (file defaults to mem.yaml).
inline std::optional<Error> expect_load_error(const std::string& yaml, Expect e,
                                              const std::vector<std::string>& overrides = {}) {
  if (e.file.empty()) e.file = "mem.yaml";
  INFO("yaml:\n" << yaml);
  return expect_error([&] { config::load_text(yaml, "mem.yaml", overrides); }, e);
}

/// The smallest valid config, to prepend to a test's own sections.
inline const char* kMinimal = "model: {name: mlp}\ndata: {name: synthetic}\n";

/// A fresh directory under the system temp dir, removed with the object.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("dlrun-cfgtest-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  /// Write `text` to `rel` (creating directories) and return its full path.
  std::string write(const std::string& rel, const std::string& text) const {
    auto p = path_ / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  std::string path(const std::string& rel) const { return (path_ / rel).string(); }

 private:
  std::filesystem::path path_;
};

/// Set an environment variable for one scope, restoring the old value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace dlrun::testing
