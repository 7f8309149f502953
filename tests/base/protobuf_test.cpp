// The one protobuf writer (base/protobuf.h) against the wire format's worked examples
// (protobuf.dev, "Encoding"); TensorBoard's reader (py:tensorboard_reader) and onnx.checker with
// onnxruntime (e2e:onnx) read whole files written through it.
#include <catch2/catch.hpp>

#include <string>

#include "base/protobuf.h"

using namespace dlrun;

TEST_CASE("protobuf: varints, fixed-width numbers and length-delimited fields as the wire format has them",
          "[base][protobuf]") {
  proto::Writer a;
  a.varint(1, 150);  // the guide's first example: 08 96 01
  CHECK(a.str() == std::string("\x08\x96\x01", 3));
  proto::Writer b;
  b.bytes(2, "testing");  // 12 07 74 65 73 74 69 6e 67
  CHECK(b.str() == std::string("\x12\x07testing", 9));
  proto::Writer c;
  c.message(3, a);  // an embedded message: its bytes, length-delimited
  CHECK(c.str() == std::string("\x1a\x03\x08\x96\x01", 5));
  proto::Writer d;
  d.varint(2, static_cast<uint64_t>(int64_t{-1}));  // a negative int64: ten bytes
  CHECK(d.str().size() == 11);
  CHECK(static_cast<unsigned char>(d.str()[10]) == 0x01);
  proto::Writer e;
  e.fixed32_float(2, 1.0f);  // tag 2 << 3 | 5, then 0x3f800000 little-endian
  CHECK(e.str() == std::string("\x15\x00\x00\x80\x3f", 5));
  proto::Writer f;
  f.fixed64_double(1, 1.0);  // tag 1 << 3 | 1, then 0x3ff0000000000000 little-endian
  CHECK(f.str() == std::string("\x09\x00\x00\x00\x00\x00\x00\xf0\x3f", 9));
  std::string out;
  proto::put_le(out, 0x0102030405060708ULL, 8);
  CHECK(out == std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8));
}
