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

namespace dlrun::metrics {
namespace {

// Protobuf wire types.
constexpr int kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}

void put_tag(std::string& out, int field, int wire_type) { put_varint(out, uint64_t(field) << 3 | wire_type); }

template <typename T>
void put_le(std::string& out, T v) {  // little-endian fixed-width integer
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(char(uint8_t(v >> (8 * i))));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_tag(out, field, kBytes);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_double(std::string& out, int field, double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, 8);
  put_tag(out, field, kFixed64);
  put_le(out, bits);
}

void put_float(std::string& out, int field, float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  put_tag(out, field, kFixed32);
  put_le(out, bits);
}

}  // namespace

std::string encode_scalar_event(const std::string& tag, float value, int64_t step, double wall_time) {
  std::string v;  // Summary.Value
  put_bytes(v, 1, tag);
  put_float(v, 2, value);
  std::string summary;
  put_bytes(summary, 1, v);
  std::string event;
  put_double(event, 1, wall_time);
  put_tag(event, 2, kVarint);
  put_varint(event, uint64_t(step));  // negative steps take 10 bytes, as protobuf does
  put_bytes(event, 5, summary);
  return event;
}

std::string encode_file_version_event(double wall_time) {
  std::string event;
  put_double(event, 1, wall_time);
  put_bytes(event, 3, "brain.Event:2");
  return event;
}

std::string tfrecord_frame(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  const uint64_t len = data.size();
  put_le(out, len);
  put_le(out, masked_crc32c(out.data(), 8));
  out += data;
  put_le(out, masked_crc32c(data.data(), data.size()));
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
