// Checking dlrun::Error the way a user meets it: the exit code, the dotted key, the
// file:line:column and the message (plus its hint).
#pragma once

#include <catch2/catch.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "config/loader.h"

namespace dlrun::testing {

/// What an error must say. line/column 0 means "no line/column in the location".
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

/// Runs fn; requires a dlrun::Error with `code` whose message (and hint) contains every part.
template <typename Fn>
void require_error(Fn&& fn, const std::vector<std::string>& parts, ExitCode code = ExitCode::kBadInput) {
  try {
    fn();
  } catch (const Error& e) {
    INFO("rendered: " << e.render());
    CHECK(e.code() == code);
    for (const auto& part : parts) CHECK_THAT(e.message() + "\n" + e.hint(), Catch::Matchers::Contains(part));
    return;
  }
  FAIL("expected a dlrun::Error mentioning " << (parts.empty() ? std::string() : parts[0]));
}

/// The smallest valid config, to prepend to a test's own sections.
inline const char* kMinimal = "model: {name: mlp}\ndata: {name: synthetic}\n";

}  // namespace dlrun::testing
