// TensorBoard scalar event files without TensorFlow or protobuf: each record is TFRecord
// framed (length, masked CRC32C of the length, payload, masked CRC32C of the payload) and
// each payload is an `Event` protobuf encoded by hand. Only the fields dlrun writes:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
#include "metrics/tensorboard.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/clock.h"
#include "base/error.h"
#include "base/host.h"
#include "base/protobuf.h"

namespace dlrun::metrics {

std::string encode_scalar_event(const std::string& tag, float value, int64_t step, double wall_time) {
  proto::Writer v;  // Summary.Value
  v.bytes(1, tag);
  v.fixed32_float(2, value);
  proto::Writer summary;
  summary.message(1, v);
  proto::Writer event;
  event.fixed64_double(1, wall_time);
  event.varint(2, uint64_t(step));  // negative steps take 10 bytes, as protobuf does
  event.message(5, summary);
  return event.str();
}

std::string encode_file_version_event(double wall_time) {
  proto::Writer event;
  event.fixed64_double(1, wall_time);
  event.bytes(3, "brain.Event:2");
  return event.str();
}

std::string tfrecord_frame(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  proto::put_le(out, data.size(), 8);
  proto::put_le(out, masked_crc32c(out.data(), 8), 4);
  out += data;
  proto::put_le(out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const double now = wall_now();
  const std::string stem = fmt::format("{}/events.out.tfevents.{}.{}.{}", dir, int64_t(now),
                                       hostname("localhost"), ::getpid());
  // Two writers in one process within the same second get distinct files ("x": never clobber).
  for (int n = 0; n < 1000 && !f_; ++n) {
    path_ = n == 0 ? stem + ".dlrun" : fmt::format("{}.{}.dlrun", stem, n);
    f_ = std::fopen(path_.c_str(), "wbx");
    if (!f_ && errno != EEXIST) break;
  }
  if (!f_) fail_runtime("{}: cannot create TensorBoard event file: {}", path_, std::strerror(errno));
  write_record(encode_file_version_event(now));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (f_) std::fclose(f_);
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step, double wall_time) {
  write_record(encode_scalar_event(tag, float(value), step, wall_time > 0 ? wall_time : wall_now()));
}

void TensorBoardWriter::flush() {
  if (std::fflush(f_) != 0) fail_runtime("{}: write failed: {}", path_, std::strerror(errno));
}

void TensorBoardWriter::write_record(const std::string& data) {
  const std::string rec = tfrecord_frame(data);
  if (std::fwrite(rec.data(), 1, rec.size(), f_) != rec.size())
    fail_runtime("{}: write failed: {}", path_, std::strerror(errno));
}

}  // namespace dlrun::metrics
