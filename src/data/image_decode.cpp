// JPEG and PNG decoding. The format is recognised from the first bytes, not the extension.
// JPEG: TurboJPEG decodes straight to gray or RGB; CMYK/YCCK JPEGs (Adobe, inverted) are
// decoded to CMYK and converted here. PNG: the simplified libpng API handles palettes,
// 16-bit samples and alpha (composited on black) and converts gray <-> RGB.
#include "data/image_decode.h"

#include <png.h>
#include <turbojpeg.h>

#include <cstring>
#include <fstream>
#include <memory>

#include "base/error.h"

namespace dlrun::data {

namespace {

bool is_jpeg(const std::vector<uint8_t>& b) { return b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF; }
bool is_png(const std::vector<uint8_t>& b) {
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return b.size() >= 8 && std::memcmp(b.data(), sig, 8) == 0;
}

std::vector<uint8_t> read_all(const std::string& path, size_t max_bytes = 0) {
  std::ifstream in(path, std::ios::binary);
  DLRUN_CHECK_INPUT(in.good(), "cannot open image file {}", path);
  std::vector<uint8_t> b;
  if (max_bytes) {
    b.resize(max_bytes);
    in.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(max_bytes));
    b.resize(static_cast<size_t>(in.gcount()));
  } else {
    b.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return b;
}

/// One TurboJPEG decompressor per thread.
struct JpegHolder {
  tjhandle h = tjInitDecompress();
  ~JpegHolder() {
    if (h) tjDestroy(h);
  }
};
thread_local JpegHolder jpeg_holder;

tjhandle jpeg_handle() {
  DLRUN_CHECK(jpeg_holder.h != nullptr, ExitCode::kRuntime, "tjInitDecompress failed");
  return jpeg_holder.h;
}

/// A fresh decompressor for this thread: one whose header was read but whose image was not
/// decoded (an image refused on its header) is left mid-stream, and would fail on the next
/// file ("two SOI markers").
void reset_jpeg_handle() {
  if (jpeg_holder.h) tjDestroy(jpeg_holder.h);
  jpeg_holder.h = tjInitDecompress();
}

// Images larger than this are refused before anything is allocated: the header alone decides
// the allocation (a 100-byte JPEG may claim 65535 x 65535 pixels, 12 GiB), and no training
// image comes near it (16384 x 16384).
constexpr uint64_t kMaxPixels = uint64_t(1) << 28;
// A progressive JPEG may hold thousands of tiny scans that take minutes to decode; libjpeg-turbo
// stops at 500 with this flag.
constexpr int kJpegFlags = TJFLAG_LIMITSCANS;

void check_pixels(uint64_t w, uint64_t h, const char* kind, const std::string& name) {
  DLRUN_CHECK_INPUT(w * h <= kMaxPixels, "{} image {} is {} x {} pixels; at most {} pixels are accepted", kind, name,
                    w, h, kMaxPixels);
}

/// Bad input naming the image, with a fresh decompressor left for the next one.
[[noreturn]] void jpeg_fail(tjhandle h, const std::string& name) {
  const std::string why = tjGetErrorStr2(h);
  reset_jpeg_handle();
  fail_input("undecodable JPEG image {}: {}", name, why);
}

void jpeg_header(tjhandle h, const std::vector<uint8_t>& b, const std::string& name, int* w, int* ht, int* cs) {
  int subsamp = 0;
  if (tjDecompressHeader3(h, b.data(), static_cast<unsigned long>(b.size()), w, ht, &subsamp, cs) != 0 || *w <= 0 ||
      *ht <= 0)
    jpeg_fail(h, name);
}

DecodedImage decode_jpeg(const std::vector<uint8_t>& b, const std::string& name, int channels) {
  tjhandle h = jpeg_handle();
  int w = 0, ht = 0, cs = 0;
  unsigned long size = static_cast<unsigned long>(b.size());
  jpeg_header(h, b, name, &w, &ht, &cs);
  if (static_cast<uint64_t>(w) * static_cast<uint64_t>(ht) > kMaxPixels) {
    reset_jpeg_handle();
    check_pixels(static_cast<uint64_t>(w), static_cast<uint64_t>(ht), "JPEG", name);
  }
  DecodedImage img;
  img.height = ht;
  img.width = w;
  img.channels = channels;
  img.pixels.resize(static_cast<size_t>(w) * ht * channels);
  if (cs == TJCS_CMYK || cs == TJCS_YCCK) {
    std::vector<uint8_t> cmyk(static_cast<size_t>(w) * ht * 4);
    if (tjDecompress2(h, b.data(), size, cmyk.data(), w, 0, ht, TJPF_CMYK, kJpegFlags) != 0) jpeg_fail(h, name);
    for (size_t p = 0; p < static_cast<size_t>(w) * ht; ++p) {
      const uint8_t* q = &cmyk[p * 4];
      // Adobe CMYK JPEGs store inverted values: R = C * K / 255.
      int r = q[0] * q[3] / 255, g = q[1] * q[3] / 255, bl = q[2] * q[3] / 255;
      if (channels == 3) {
        img.pixels[p * 3] = static_cast<uint8_t>(r);
        img.pixels[p * 3 + 1] = static_cast<uint8_t>(g);
        img.pixels[p * 3 + 2] = static_cast<uint8_t>(bl);
      } else {
        img.pixels[p] = static_cast<uint8_t>((299 * r + 587 * g + 114 * bl) / 1000);
      }
    }
    return img;
  }
  int fmt = channels == 3 ? TJPF_RGB : TJPF_GRAY;
  int rc = tjDecompress2(h, b.data(), size, img.pixels.data(), w, 0, ht, fmt, kJpegFlags);
  // A warning (e.g. premature end of data) still yields an image; an error does not.
  if (rc != 0 && tjGetErrorCode(h) != TJERR_WARNING) jpeg_fail(h, name);
  return img;
}

DecodedImage decode_png(const std::vector<uint8_t>& b, const std::string& name, int channels) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  DLRUN_CHECK_INPUT(png_image_begin_read_from_memory(&image, b.data(), b.size()) != 0, "undecodable PNG image {}: {}",
                    name, image.message);
  if (uint64_t(image.width) * image.height > kMaxPixels) {
    png_image_free(&image);
    check_pixels(image.width, image.height, "PNG", name);
  }
  image.format = channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  DecodedImage img;
  img.height = static_cast<int>(image.height);
  img.width = static_cast<int>(image.width);
  img.channels = channels;
  img.pixels.resize(PNG_IMAGE_SIZE(image));
  png_color black{0, 0, 0};
  int ok = png_image_finish_read(&image, &black, img.pixels.data(), 0, nullptr);
  std::string msg = image.message;
  png_image_free(&image);
  DLRUN_CHECK_INPUT(ok != 0, "undecodable PNG image {}: {}", name, msg);
  return img;
}

}  // namespace

DecodedImage decode_image_bytes(const std::vector<uint8_t>& bytes, const std::string& name, int channels) {
  DLRUN_CHECK(channels == 1 || channels == 3, ExitCode::kRuntime, "decode_image: channels must be 1 or 3");
  if (is_jpeg(bytes)) return decode_jpeg(bytes, name, channels);
  if (is_png(bytes)) return decode_png(bytes, name, channels);
  fail_input("undecodable image {}: not a JPEG or PNG file", name);
}

DecodedImage decode_image(const std::string& path, int channels) {
  return decode_image_bytes(read_all(path), path, channels);
}

int probe_channels(const std::string& path) {
  std::vector<uint8_t> b = read_all(path);
  if (is_jpeg(b)) {
    int w = 0, ht = 0, cs = 0;
    jpeg_header(jpeg_handle(), b, path, &w, &ht, &cs);
    return cs == TJCS_GRAY ? 1 : 3;
  }
  if (is_png(b)) {
    png_image image;
    std::memset(&image, 0, sizeof(image));
    image.version = PNG_IMAGE_VERSION;
    DLRUN_CHECK_INPUT(png_image_begin_read_from_memory(&image, b.data(), b.size()) != 0,
                      "undecodable PNG image {}: {}", path, image.message);
    int ch = (image.format & PNG_FORMAT_FLAG_COLOR) ? 3 : 1;
    png_image_free(&image);
    return ch;
  }
  fail_input("undecodable image {}: not a JPEG or PNG file", path);
}

}  // namespace dlrun::data
