// metrics.jsonl: one JSON object per line, appended and flushed line by line.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

namespace dlrun::metrics {

/// Appends one JSON object per line; flushes each line (a crash loses at most the line
/// being written). Opens in append mode so a resumed run continues the same file.
class JsonlWriter {
 public:
  explicit JsonlWriter(const std::string& path);
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;
  void write(const nlohmann::json& record);

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
};

}  // namespace dlrun::metrics
