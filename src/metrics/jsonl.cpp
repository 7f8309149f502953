// metrics.jsonl: one JSON object per line, appended and flushed line by line so that a
// crash or a kill -9 loses at most the line being written, and a resumed run keeps
// appending to the same file.
#include "metrics/jsonl.h"

#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace dlrun::metrics {

JsonlWriter::JsonlWriter(const std::string& path) : path_(path) {
  f_ = std::fopen(path.c_str(), "a+b");
  if (!f_) fail_runtime("{}: cannot open for appending: {}", path, std::strerror(errno));
  // A process killed while writing its last line left it torn (no newline): that line ends
  // here, so this process's first record is a line of its own and the readers skip only the
  // torn one (run/metrics_log.h), instead of losing this one's "start" glued to it.
  const bool torn = std::fseek(f_, -1, SEEK_END) == 0 && std::fgetc(f_) != '\n';
  std::fseek(f_, 0, SEEK_END);  // (a read is followed by a positioning before a write)
  if (torn && (std::fputc('\n', f_) == EOF || std::fflush(f_) != 0))
    fail_runtime("{}: write failed: {}", path_, std::strerror(errno));
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
