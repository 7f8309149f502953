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
/// File name: events.out.tfevents.<unix time>.<host>.<pid>.dlrun (a second writer in the
/// same process and second gets ...<pid>.<n>.dlrun; an existing file is never overwritten).
/// `dir` is created if missing. Throws dlrun::Error(1) naming the file if it cannot write.
class TensorBoardWriter {
 public:
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  /// Buffered: call flush() once a step's scalars are added. wall_time 0 = now.
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

/// CRC32C (Castagnoli), as TFRecord uses. Chainable: crc32c(b, m, crc32c(a, n)) is the
/// CRC of a followed by b.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
/// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);

/// Building blocks of the event file, exposed for tests.
/// One TFRecord: uint64 length (LE), masked CRC of the length bytes, data, masked CRC of data.
std::string tfrecord_frame(const std::string& data);
/// Event{wall_time, step, summary{value{tag, simple_value}}} in protobuf wire format.
std::string encode_scalar_event(const std::string& tag, float value, int64_t step, double wall_time);
/// The first event of every file: Event{wall_time, file_version: "brain.Event:2"}.
std::string encode_file_version_event(double wall_time);

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

/// One progress line: "step 120/1000 (12%) | epoch 1 | loss 0.4321 | 1234.5 img/s | lr 0.1
/// | ETA 1m23s". total <= 0: unknown (no percentage, no ETA); eta_s < 0: no ETA.
std::string format_progress(int64_t step, int64_t total, int64_t epoch, double loss,
                            double img_per_s, double lr, double eta_s);
/// "45s", "3m07s", "2h05m"; "?" for a negative or non-finite value.
std::string format_duration(double seconds);

/// Terminal progress: a redrawn bar on a TTY (step, epoch, loss, img/s, lr, ETA) or plain
/// periodic lines otherwise. mode: auto (bar when `out` is a TTY) | bar | lines (a line when
/// step % every_steps == 0 and at the last step) | none (prints nothing at all, messages
/// included). An unknown mode is a bad-input error. The ETA is measured from the first
/// update, so a resumed run's speed is not skewed by the steps it skipped.
class Progress {
 public:
  Progress(std::string mode, int64_t total_steps, int64_t every_steps, std::FILE* out = stderr);
  void update(int64_t step, int64_t epoch, double loss, double img_per_s, double lr);
  void message(const std::string& line);  ///< print a line without breaking the bar
  void finish();                          ///< end the bar's line (call once at the end)

 private:
  bool bar_ = false;
  bool enabled_ = true;
  int64_t total_ = 0, every_ = 1;
  double start_ = 0;
  bool drawn_ = false;
  std::FILE* out_ = stderr;
  int64_t first_step_ = -1;  ///< step of the first update (ETA baseline)
  double last_draw_ = 0;     ///< mono_now() of the last bar redraw (redraws are rate-limited)
  std::string last_;         ///< the bar as last drawn, redrawn after message()
};

/// Seconds since the epoch (wall clock) and a monotonic clock.
double wall_now();
double mono_now();

}  // namespace dlrun::metrics
