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

std::string Error::render() const {
  std::string out;
  std::string where = loc_.str();
  if (!where.empty()) out += where + ": ";
  if (!key_.empty()) out += key_ + ": ";
  out += message_;
  if (!hint_.empty()) out += "\n  hint: " + hint_;
  return out;
}

}  // namespace dlrun
