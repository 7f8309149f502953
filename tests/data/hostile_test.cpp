// Data files written to break the readers: idx headers whose dimensions overflow 64 bits or
// are zero, images whose headers claim gigapixels, directories where files belong, empty
// files. Each is a bad-input error naming the file, before anything large is allocated.
// The idx overflow was undefined behaviour (signed overflow) found while writing the fuzz
// targets (fuzz/idx_fuzz.cpp), as were the image limits (fuzz/image_fuzz.cpp).
#include <png.h>
#include <turbojpeg.h>
#include <zlib.h>

#include <cstring>

#include "data/data_files.h"
#include "data/dataset.h"
#include "data/image_decode.h"
#include "support/errors.h"
#include "support/scratch_dir.h"

using namespace dlrun;
using namespace dlrun::testing::data;
using dlrun::testing::require_error;
using dlrun::testing::ScratchDir;

namespace {

std::vector<uint8_t> header(uint32_t magic, std::vector<uint32_t> dims) {
  std::vector<uint8_t> b;
  be32(b, magic);
  for (auto d : dims) be32(b, d);
  return b;
}

/// A small real JPEG, in memory.
std::vector<uint8_t> jpeg(int w, int h) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3, 128);
  tjhandle t = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  REQUIRE(tjCompress2(t, px.data(), w, 0, h, TJPF_RGB, &out, &size, TJSAMP_444, 90, 0) == 0);
  std::vector<uint8_t> bytes(out, out + size);
  tjFree(out);
  tjDestroy(t);
  return bytes;
}

/// A small real PNG, in memory.
std::vector<uint8_t> png(int w, int h) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h, 77);
  png_image img;
  std::memset(&img, 0, sizeof(img));
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(w);
  img.height = static_cast<png_uint_32>(h);
  img.format = PNG_FORMAT_GRAY;
  png_alloc_size_t size = 0;
  REQUIRE(png_image_write_to_memory(&img, nullptr, &size, 0, px.data(), 0, nullptr) != 0);
  std::vector<uint8_t> bytes(size);
  REQUIRE(png_image_write_to_memory(&img, bytes.data(), &size, 0, px.data(), 0, nullptr) != 0);
  bytes.resize(size);
  return bytes;
}

void put_be16(std::vector<uint8_t>& b, size_t at, uint16_t v) {
  b[at] = static_cast<uint8_t>(v >> 8);
  b[at + 1] = static_cast<uint8_t>(v);
}

void put_be32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

}  // namespace

TEST_CASE("idx headers whose dimensions overflow or are zero are refused by name", "[data][hostile]") {
  ScratchDir d;
  write_file(d / "t10k-labels-idx1-ubyte", header(0x801, {4}));
  SECTION("2^31 x 2^31 x 4 wraps 64 bits to 0: the 16-byte file must not pass as complete") {
    write_file(d / "t10k-images-idx3-ubyte", header(0x803, {4, 0x80000000u, 0x80000000u}));
    require_error([&] { data::open(idx_opts(d), data::Split::kEval, 0); }, {"t10k-images-idx3-ubyte", "truncated"});
  }
  SECTION("huge counts with a tiny file") {
    auto b = header(0x803, {0xffffffffu, 0xffffffffu, 0xffffffffu});
    b.resize(b.size() + 64, 1);
    write_file(d / "t10k-images-idx3-ubyte", b);
    require_error([&] { data::open(idx_opts(d), data::Split::kEval, 0); }, {"t10k-images-idx3-ubyte", "promises more data"});
  }
  SECTION("a zero dimension") {
    write_file(d / "t10k-images-idx3-ubyte", header(0x803, {4, 0, 28}));
    require_error([&] { data::open(idx_opts(d), data::Split::kEval, 0); }, {"t10k-images-idx3-ubyte", "is 0"});
  }
}

TEST_CASE("a directory where a data file belongs is named as such", "[data][hostile]") {
  ScratchDir d;
  fs::create_directories(d / "t10k-images-idx3-ubyte");
  write_file(d / "t10k-labels-idx1-ubyte", header(0x801, {0}));
  require_error([&] { data::open(idx_opts(d), data::Split::kEval, 0); },
                {"t10k-images-idx3-ubyte", "not a regular file"});
}

TEST_CASE("an empty CIFAR file is refused by name", "[data][hostile]") {
  ScratchDir d;
  write_file(d / "test_batch.bin", {});
  DataOptions o;
  o.name = "cifar10";
  o.root = d.str();
  require_error([&] { data::open(o, data::Split::kEval, 0); }, {"test_batch.bin", "not a whole number"});
}

TEST_CASE("images whose headers claim gigapixels are refused before decoding", "[data][hostile]") {
  SECTION("JPEG: SOF0 patched to 60000 x 60000 (libjpeg's own limit is 65500)") {
    auto b = jpeg(8, 8);
    size_t sof = 0;
    for (size_t i = 0; i + 8 < b.size(); ++i)
      if (b[i] == 0xFF && b[i + 1] == 0xC0) sof = i;
    REQUIRE(sof > 0);
    put_be16(b, sof + 5, 60000);  // height
    put_be16(b, sof + 7, 60000);  // width
    require_error([&] { data::decode_image_bytes(b, "big.jpg", 3); }, {"big.jpg", "60000 x 60000", "at most"});
    // The thread's decompressor is still good for the next image.
    CHECK(data::decode_image_bytes(jpeg(8, 8), "a.jpg", 3).pixels.size() == 8 * 8 * 3);
  }
  SECTION("PNG: IHDR patched to 100000 x 100000, its CRC recomputed") {
    auto b = png(8, 8);
    // Signature (8), IHDR length (4), "IHDR" (4), width at 16, height at 20, CRC at 29.
    put_be32(b, 16, 100000);
    put_be32(b, 20, 100000);
    put_be32(b, 29, static_cast<uint32_t>(crc32(0, b.data() + 12, 17)));
    require_error([&] { data::decode_image_bytes(b, "big.png", 1); }, {"big.png", "100000 x 100000", "at most"});
  }
  SECTION("an image libjpeg itself refuses leaves the thread's decompressor usable") {
    auto b = jpeg(8, 8);
    for (size_t i = 0; i + 8 < b.size(); ++i)
      if (b[i] == 0xFF && b[i + 1] == 0xC0) put_be16(b, i + 5, 65535);  // over libjpeg's 65500
    require_error([&] { data::decode_image_bytes(b, "huge.jpg", 3); }, {"huge.jpg", "undecodable"});
    CHECK(data::decode_image_bytes(jpeg(8, 8), "a.jpg", 3).pixels.size() == 8 * 8 * 3);
  }
  SECTION("the unpatched images still decode") {
    CHECK(data::decode_image_bytes(jpeg(8, 8), "a.jpg", 3).pixels.size() == 8 * 8 * 3);
    CHECK(data::decode_image_bytes(png(8, 8), "a.png", 1).pixels.size() == 8 * 8);
  }
}
