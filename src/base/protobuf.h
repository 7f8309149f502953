// Protocol Buffers messages written field by field, from the wire format: varints, fixed-width
// little-endian numbers and length-delimited fields (https://protobuf.dev/programming-guides/encoding/).
// dlrun writes two kinds of protobuf files and reads neither -- TensorBoard's Event records
// (metrics/tensorboard.cpp) and ONNX models (export/onnx_proto.cpp) -- so the few messages they
// need are encoded here rather than by a protobuf library: LibTorch carries its own protobuf
// inside libtorch_cpu, and a second one linked into dlrun would clash with it symbol for symbol
// (docs/design.md, "Writing ONNX"). No LibTorch here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dlrun::proto {

/// One message being written, field by field, in the order the calls come.
class Writer {
 public:
  /// An integer field (int32/int64/uint64/enum/bool): a varint. A negative int64 takes 10
  /// bytes, as protobuf writes it.
  void varint(int field, uint64_t v);
  /// A `float` field: fixed32, little-endian.
  void fixed32_float(int field, float v);
  /// A `double` field: fixed64, little-endian.
  void fixed64_double(int field, double v);
  /// A `string`, `bytes` or embedded message field: its length, then the bytes.
  void bytes(int field, const void* data, size_t n);
  void bytes(int field, const std::string& s) { bytes(field, s.data(), s.size()); }
  /// An embedded message field.
  void message(int field, const Writer& m) { bytes(field, m.out_); }
  /// The message's bytes so far.
  const std::string& str() const { return out_; }

 private:
  void tag(int field, int wire_type);
  void raw_varint(uint64_t v);
  void raw_le(uint64_t v, size_t n);
  std::string out_;
};

/// `v`'s low `n` bytes appended to `out`, least significant first (TFRecord's framing, the
/// fixed-width fields above).
void put_le(std::string& out, uint64_t v, size_t n);

}  // namespace dlrun::proto
