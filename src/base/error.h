// The one error type of dlrun, and its exit codes (README.md, "Exit codes").
//
// Every failure that reaches main() is a dlrun::Error (or is wrapped into one there). It
// carries the exit code, a message, and — for bad input — where the input was wrong: the
// file, the dotted config key and the YAML line:column, plus an optional hint.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace dlrun {

/// `s` with control characters and bytes that are not valid UTF-8 written as \xNN, so that
/// what an error quotes from a binary file cannot garble a terminal or a log.
std::string printable(const std::string& s);

/// Process exit codes, documented in README.md.
enum class ExitCode : int {
  kOk = 0,            ///< finished
  kRuntime = 1,       ///< runtime failure: a bug, a CUDA error, a peer rank died
  kBadInput = 2,      ///< usage, config, data file, checkpoint that fails verification
  kInterrupted = 75,  ///< interrupted and a checkpoint was committed: safe to requeue
};

/// Where in an input a problem is. All fields optional; line/column are 1-based (0 = unknown).
struct SourceLoc {
  std::string file;  ///< path as the user gave it, or "<command line>"
  int line = 0;
  int column = 0;
  /// "file:line:col", "file:line", "file" or "" depending on what is known.
  std::string str() const;
};

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, std::string message, std::string hint = {});
  /// A bad-input error located in a config/data file: `key` is the dotted config key.
  Error(ExitCode code, SourceLoc loc, std::string key, std::string message, std::string hint = {});

  ExitCode code() const { return code_; }
  const SourceLoc& loc() const { return loc_; }
  const std::string& key() const { return key_; }
  const std::string& message() const { return message_; }
  const std::string& hint() const { return hint_; }

  /// The message as printed to the user: "file:line:col: key: message" plus "hint: ..." line,
  /// through printable().
  std::string render() const;

 private:
  ExitCode code_;
  SourceLoc loc_;
  std::string key_;
  std::string message_;
  std::string hint_;
};

/// Throw a bad-input (exit 2) error with a formatted message.
template <typename... Args>
[[noreturn]] void fail_input(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(ExitCode::kBadInput, fmt::format(f, std::forward<Args>(args)...));
}
/// Throw a runtime (exit 1) error with a formatted message.
template <typename... Args>
[[noreturn]] void fail_runtime(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(ExitCode::kRuntime, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace dlrun

/// The one check macro: DLRUN_CHECK(cond, ExitCode::kBadInput, "fmt {}", args...).
#define DLRUN_CHECK(cond, code, ...)                                       \
  do {                                                                     \
    if (!(cond)) throw ::dlrun::Error((code), ::fmt::format(__VA_ARGS__)); \
  } while (0)

/// Shorthand for input checks (exit code 2).
#define DLRUN_CHECK_INPUT(cond, ...) DLRUN_CHECK(cond, ::dlrun::ExitCode::kBadInput, __VA_ARGS__)
