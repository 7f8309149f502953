// Atomic JSON files (summary.json): written through fsutil::write_file_atomic (temporary file,
// fsync, rename over the target, fsync of the directory), so a reader sees either the old file
// or the whole new one, never a torn write.
#include "base/fsutil.h"
#include "metrics/writers.h"

namespace dlrun::metrics {

void write_json_atomic(const std::string& path, const nlohmann::json& j) {
  std::string text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  text.push_back('\n');
  fsutil::write_file_atomic(path, text);
}

}  // namespace dlrun::metrics
