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
tjhandle jpeg_handle() {
  struct Holder {
    tjhandle h = tjInitDecompress();
    ~Holder() {
      if (h) tjDestroy(h);
    }
  };
  thread_local Holder holder;
  DLRUN_CHECK(holder.h != nullptr, ExitCode::kRuntime, "tjInitDecompress failed");
  return holder.h;
}

DecodedImage decode_jpeg(const std::vector<uint8_t>& b, const std::string& name, int channels) {
  tjhandle h = jpeg_handle();
  int w = 0, ht = 0, subsamp = 0, cs = 0;
  unsigned long size = static_cast<unsigned long>(b.size());
  DLRUN_CHECK_INPUT(tjDecompressHeader3(h, b.data(), size, &w, &ht, &subsamp, &cs) == 0 && w > 0 && ht > 0,
                    "undecodable JPEG image {}: {}", name, tjGetErrorStr2(h));
  DecodedImage img;
  img.height = ht;
  img.width = w;
  img.channels = channels;
  img.pixels.resize(static_cast<size_t>(w) * ht * channels);
  if (cs == TJCS_CMYK || cs == TJCS_YCCK) {
    std::vector<uint8_t> cmyk(static_cast<size_t>(w) * ht * 4);
    DLRUN_CHECK_INPUT(tjDecompress2(h, b.data(), size, cmyk.data(), w, 0, ht, TJPF_CMYK, 0) == 0,
                      "undecodable JPEG image {}: {}", name, tjGetErrorStr2(h));
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
  int rc = tjDecompress2(h, b.data(), size, img.pixels.data(), w, 0, ht, fmt, 0);
  // A warning (e.g. premature end of data) still yields an image; an error does not.
  DLRUN_CHECK_INPUT(rc == 0 || tjGetErrorCode(h) == TJERR_WARNING, "undecodable JPEG image {}: {}", name,
                    tjGetErrorStr2(h));
  return img;
}

DecodedImage decode_png(const std::vector<uint8_t>& b, const std::string& name, int channels) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  DLRUN_CHECK_INPUT(png_image_begin_read_from_memory(&image, b.data(), b.size()) != 0, "undecodable PNG image {}: {}",
                    name, image.message);
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
    tjhandle h = jpeg_handle();
    int w = 0, ht = 0, subsamp = 0, cs = 0;
    DLRUN_CHECK_INPUT(tjDecompressHeader3(h, b.data(), static_cast<unsigned long>(b.size()), &w, &ht, &subsamp,
                                          &cs) == 0,
                      "undecodable JPEG image {}: {}", path, tjGetErrorStr2(h));
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
