// metrics.jsonl: one JSON object per line, appended and flushed line by line so that a
// crash or a kill -9 loses at most the line being written, and a resumed run keeps
// appending to the same file.
#include "metrics/jsonl.h"

#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace dlrun::metrics {

JsonlWriter::JsonlWriter(const std::string& path) : path_(path) {
  f_ = std::fopen(path.c_str(), "ab");
  if (!f_) fail_runtime("{}: cannot open for appending: {}", path, std::strerror(errno));
}

JsonlWriter::~JsonlWriter() {
  if (f_) std::fclose(f_);
}

void JsonlWriter::write(const nlohmann::json& record) {
  // Invalid UTF-8 in a string (e.g. a path) is replaced rather than aborting the run.
  std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line.push_back('\n');
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0)
    fail_runtime("{}: write failed: {}", path_, std::strerror(errno));
}

}  // namespace dlrun::metrics
