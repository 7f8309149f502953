// TensorBoard scalar event files without TensorFlow or protobuf, and the pieces they are
// made of (exposed for tests): TFRecord framing with masked CRC32C, and the Event protobuf
// encoded by hand.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace dlrun::metrics {

/// A TensorBoard event file. TensorBoard and tensorboard's Python EventAccumulator read it.
/// File name: events.out.tfevents.<unix time>.<host>.<pid>.dlrun (a second writer in the
/// same process and second gets ...<pid>.<n>.dlrun; an existing file is never overwritten).
/// `dir` is created if missing. Throws dlrun::Error(1) naming the file if it cannot write.
class TensorBoardWriter {
 public:
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  /// Buffered: call flush() once a step's scalars are added. wall_time 0 = now.
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time = 0);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  std::FILE* f_ = nullptr;
  std::string path_;
};

/// CRC32C (Castagnoli), as TFRecord uses. Chainable: crc32c(b, m, crc32c(a, n)) is the
/// CRC of a followed by b.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
/// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);

/// One TFRecord: uint64 length (LE), masked CRC of the length bytes, data, masked CRC of data.
std::string tfrecord_frame(const std::string& data);
/// Event{wall_time, step, summary{value{tag, simple_value}}} in protobuf wire format.
std::string encode_scalar_event(const std::string& tag, float value, int64_t step, double wall_time);
/// The first event of every file: Event{wall_time, file_version: "brain.Event:2"}.
std::string encode_file_version_event(double wall_time);

}  // namespace dlrun::metrics
