// metrics.jsonl read back: the one reader of the run's own record. A resume asks how far the
// interrupted process got (RunDir::furthest_logged_step), the wall-clock account splits the file
// into the processes that wrote it (train/observe/goodput.h), and check-resume reads each step's loss
// and follows a running segment's steps as they are written. They all read it the same way
// here: from a byte offset on, a complete line at a time (a line still being written waits for
// its newline), lines that are not JSON objects skipped, a float never taken for a step. No
// LibTorch.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace dlrun::train {

/// One record of metrics.jsonl: a JSON object on a line of its own.
struct MetricsRecord {
  nlohmann::json json;  ///< the object as written
  uint64_t offset = 0;  ///< the byte in the file where its line begins

  /// A step's metrics line: a "train" event, which the jsonl sink writes without an "event" key.
  bool is_step_line() const;
  /// The "event" key, the event's kind ("start", "checkpoint", "preempt", "end", ...); "" on a
  /// step's metrics line, or when it is not a string.
  std::string event() const;
  /// "step" when it is an integer that fits int64_t, else nullopt: a float such as 7.0 or 4e74
  /// is never converted (json_int64).
  std::optional<int64_t> step() const;
  /// "time", the wall time it was reported at, when a number; else 0.
  double time() const;
  /// `key` when it is a number (a loss written as null, as a NaN is, is none).
  std::optional<double> number(const char* key) const;
};

/// Reads metrics.jsonl incrementally: it remembers where it stopped and the line it found
/// unfinished, so each poll() reads only the bytes written since the last.
class MetricsLog {
 public:
  using Each = std::function<void(const MetricsRecord&)>;

  /// From byte `offset` of `path` on (0: the whole file). Reads nothing yet.
  explicit MetricsLog(std::string path, uint64_t offset = 0);
  /// From where `path` ends now (its start when it does not exist): only the records written
  /// after this call.
  static MetricsLog from_end(std::string path);

  /// Hands `each` every record whose line was completed since the last call, in file order;
  /// returns how many. A last line without its newline waits for the next call; a line that is
  /// not a JSON object (a torn line, a blank one, JSON nested past 32 levels) is skipped; a
  /// missing file has none. A record whose `each` throws counts as read.
  size_t poll(const Each& each);
  /// poll(), then the last line too when it lacks only its newline (it is a whole JSON object):
  /// for a file whose writer has ended, where nothing more will complete it.
  size_t drain(const Each& each);

  /// Where the next poll() starts: the end of the last line handed out or skipped.
  uint64_t offset() const { return read_ - pending_.size(); }
  const std::string& path() const { return path_; }

 private:
  size_t take_lines(const Each& each);

  std::string path_;
  uint64_t read_ = 0;     ///< bytes of the file read so far
  std::string pending_;   ///< the read bytes after the last complete line
};

}  // namespace dlrun::train
