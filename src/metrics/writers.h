// Run-directory writers that need no LibTorch: metrics.jsonl, TensorBoard event files,
// summary.json, and SHA-256 hashing.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace dlrun::metrics {

/// Appends one JSON object per line; flushes each line (a crash loses at most the line
/// being written). Opens in append mode so a resumed run continues the same file.
class JsonlWriter {
 public:
  explicit JsonlWriter(const std::string& path);
  ~JsonlWriter();
  void write(const nlohmann::json& record);

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
};

/// TensorBoard scalar event file (TFRecord framing with masked CRC32C; Event/Summary
/// protobufs encoded by hand). TensorBoard and tensorboard's Python EventAccumulator read it.
/// File name: events.out.tfevents.<unix time>.<host>.<pid>.dlrun
class TensorBoardWriter {
 public:
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time = 0);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  std::FILE* f_ = nullptr;
  std::string path_;
};

/// Write JSON to `path` atomically (tmp file, fsync, rename).
void write_json_atomic(const std::string& path, const nlohmann::json& j);

/// CRC32C (Castagnoli), as TFRecord uses.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

/// Incremental SHA-256.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  std::string hex();  ///< finalizes; lower-case hex digest
 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
  bool done_ = false;
};
std::string sha256_hex(const void* data, size_t n);
std::string sha256_file(const std::string& path);  ///< throws dlrun::Error(1) if unreadable

/// Terminal progress: a redrawn bar on a TTY (step, epoch, loss, img/s, ETA) or plain
/// periodic lines otherwise. mode: auto | bar | lines | none.
class Progress {
 public:
  Progress(std::string mode, int64_t total_steps, int64_t every_steps);
  void update(int64_t step, int64_t epoch, double loss, double img_per_s, double lr);
  void message(const std::string& line);  ///< print a line without breaking the bar
  void finish();

 private:
  bool bar_ = false;
  bool enabled_ = true;
  int64_t total_ = 0, every_ = 1;
  double start_ = 0;
  bool drawn_ = false;
};

/// Seconds since the epoch (wall clock) and a monotonic clock.
double wall_now();
double mono_now();

}  // namespace dlrun::metrics
