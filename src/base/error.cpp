// Formatting of dlrun::Error for the user.
#include "base/error.h"

namespace dlrun {

std::string SourceLoc::str() const {
  if (file.empty()) return {};
  if (line <= 0) return file;
  if (column <= 0) return fmt::format("{}:{}", file, line);
  return fmt::format("{}:{}:{}", file, line, column);
}

Error::Error(ExitCode code, std::string message, std::string hint)
    : std::runtime_error(message), code_(code), message_(std::move(message)), hint_(std::move(hint)) {}

Error::Error(ExitCode code, SourceLoc loc, std::string key, std::string message, std::string hint)
    : std::runtime_error(message),
      code_(code),
      loc_(std::move(loc)),
      key_(std::move(key)),
      message_(std::move(message)),
      hint_(std::move(hint)) {}

namespace {

/// Length of the valid UTF-8 sequence at s[i] (1-4), or 0 when it is not one.
size_t utf8_length(const std::string& s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return 0;
  return n;
}

}  // namespace

std::string printable(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_length(s, i);
    if (n == 0 || (n == 1 && c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
      continue;
    }
    out.append(s, i, n);
    i += n;
  }
  return out;
}

std::string Error::render() const {
  std::string out;
  std::string where = loc_.str();
  if (!where.empty()) out += where + ": ";
  if (!key_.empty()) out += key_ + ": ";
  out += message_;
  if (!hint_.empty()) out += "\n  hint: " + hint_;
  // Messages quote what they were given (a YAML parser's complaint about a byte, a file name):
  // binary garbage in a config must not reach the terminal or the log as raw bytes.
  return printable(out);
}

}  // namespace dlrun
