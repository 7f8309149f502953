// The reader of metrics.jsonl (metrics_log.h): new bytes are read in chunks from where the last
// poll stopped, and each chunk's complete lines are parsed and handed out at once, so memory
// holds one chunk and the longest line, not the file.
#include "run/metrics_log.h"

#include <sys/stat.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <vector>

#include "base/json_limits.h"

namespace dlrun::train {
namespace {

constexpr int kMaxDepth = 32;        // a record nests three or four levels (fields, wall_clock)
constexpr size_t kChunk = 64 * 1024;

/// `text` as a record when it is a JSON object.
std::optional<MetricsRecord> parse_record(const std::string& text, uint64_t offset) {
  try {
    nlohmann::json j = parse_json_capped(text, kMaxDepth);
    if (!j.is_object()) return std::nullopt;
    return MetricsRecord{std::move(j), offset};
  } catch (const std::exception&) {  // not JSON, or nested too deep
    return std::nullopt;
  }
}

}  // namespace

bool MetricsRecord::is_step_line() const { return !json.contains("event"); }

std::string MetricsRecord::event() const {
  const auto it = json.find("event");
  return it != json.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::optional<int64_t> MetricsRecord::step() const {
  const auto it = json.find("step");
  return it == json.end() ? std::nullopt : json_int64(*it);
}

double MetricsRecord::time() const { return number("time").value_or(0); }

std::optional<double> MetricsRecord::number(const char* key) const {
  const auto it = json.find(key);
  if (it == json.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

MetricsLog::MetricsLog(std::string path, uint64_t offset) : path_(std::move(path)), read_(offset) {}

MetricsLog MetricsLog::from_end(std::string path) {
  struct stat st {};
  const uint64_t size = ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  return MetricsLog(std::move(path), size);
}

size_t MetricsLog::poll(const Each& each) {
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path_.c_str(), "rb"), &std::fclose);
  if (!f || ::fseeko(f.get(), static_cast<off_t>(read_), SEEK_SET) != 0) return 0;
  std::vector<char> buf(kChunk);
  size_t n = 0;
  for (size_t got; (got = std::fread(buf.data(), 1, buf.size(), f.get())) > 0;) {
    pending_.append(buf.data(), got);
    read_ += got;
    n += take_lines(each);
  }
  return n;
}

size_t MetricsLog::drain(const Each& each) {
  const size_t n = poll(each);
  if (pending_.empty()) return n;
  auto r = parse_record(pending_, offset());
  if (!r) return n;  // a torn line stays where it is
  pending_.clear();  // (offset() is now the file's end)
  each(*r);
  return n + 1;
}

size_t MetricsLog::take_lines(const Each& each) {
  const uint64_t base = offset();  // where pending_ begins in the file
  size_t n = 0, p = 0;
  try {
    for (size_t q; (q = pending_.find('\n', p)) != std::string::npos;) {
      const auto r = parse_record(pending_.substr(p, q - p), base + p);
      p = q + 1;
      if (r) {
        ++n;
        each(*r);
      }
    }
  } catch (...) {  // the lines after the one that threw are read again next time
    read_ = base + p;
    pending_.clear();
    throw;
  }
  pending_.erase(0, p);
  return n;
}

}  // namespace dlrun::train
