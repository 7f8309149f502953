// Protocol Buffers' wire format, written (see protobuf.h).
#include "base/protobuf.h"

#include <cstring>

namespace dlrun::proto {
namespace {
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;  // wire types
}  // namespace

void put_le(std::string& out, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void Writer::raw_varint(uint64_t v) {
  while (v >= 0x80) {
    out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out_.push_back(static_cast<char>(v));
}

void Writer::raw_le(uint64_t v, size_t n) { put_le(out_, v, n); }

void Writer::tag(int field, int wire_type) { raw_varint((static_cast<uint64_t>(field) << 3) | wire_type); }

void Writer::varint(int field, uint64_t v) {
  tag(field, kVarint);
  raw_varint(v);
}

void Writer::fixed32_float(int field, float v) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, 4);
  tag(field, kFixed32);
  raw_le(bits, 4);
}

void Writer::fixed64_double(int field, double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, 8);
  tag(field, kFixed64);
  raw_le(bits, 8);
}

void Writer::bytes(int field, const void* data, size_t n) {
  tag(field, kLengthDelimited);
  raw_varint(n);
  out_.append(static_cast<const char*>(data), n);
}

}  // namespace dlrun::proto
