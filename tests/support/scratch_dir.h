// The one scratch-directory helper of the tests: a fresh directory under $TMPDIR (or /tmp),
// removed with everything in it when the object goes out of scope.
#pragma once

#include <string>

namespace dlrun::testing {

class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& str() const { return path_; }
  /// `rel` inside the directory (not created).
  std::string path(const std::string& rel) const { return path_ + "/" + rel; }
  std::string operator/(const std::string& rel) const { return path(rel); }
  /// Write `text` to `rel` (creating its directories); returns the full path.
  std::string write(const std::string& rel, const std::string& text) const;

 private:
  std::string path_;
};

}  // namespace dlrun::testing
