// JPEG and PNG decoding. The format is recognised from the first bytes, not the extension.
// JPEG: TurboJPEG decodes straight to gray or RGB; CMYK/YCCK JPEGs (Adobe, inverted) are
// decoded to CMYK and converted here. PNG: the simplified libpng API handles palettes,
// 16-bit samples and alpha (composited on black) and converts gray <-> RGB.
#include "data/image_decode.h"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cctype>
#include <csetjmp>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>

#include <jpeglib.h>
#include <jerror.h>

#include "base/error.h"
#include "base/strings.h"

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

/// libjpeg warnings that mean pixels were made up: the data ended early (the rest of the image
/// is filled in gray), a segment ended early, a bad Huffman code, a lost restart marker. Others
/// (extraneous bytes before a marker, an unknown JFIF revision) leave every pixel decoded.
bool damaging_warning(int msg_code) {
  return msg_code == JWRN_JPEG_EOF || msg_code == JWRN_HIT_MARKER || msg_code == JWRN_HUFF_BAD_CODE ||
         msg_code == JWRN_MUST_RESYNC;
}
bool damaging_warning_text(const std::string& text) {
  for (const char* start : {"Premature end of JPEG file", "Corrupt JPEG data: premature end of data segment",
                            "Corrupt JPEG data: bad Huffman code", "Corrupt JPEG data: found marker"})
    if (text.rfind(start, 0) == 0) return true;
  return false;
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
  // A warning still yields an image; one that made pixels up (a truncated or corrupt file) is a
  // damaged image, refused like an undecodable one.
  if (rc != 0 && (tjGetErrorCode(h) != TJERR_WARNING || damaging_warning_text(tjGetErrorStr2(h)))) jpeg_fail(h, name);
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

// ---- scaled, cropped JPEG decode (libjpeg API) ----------------------------------------------

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool damaged;  ///< a warning that made pixels up (damaging_warning); `message` says which
};

void jpeg_error_exit(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegError*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}
/// Trace messages are dropped; a damaging warning is kept and fails the decode when it ends.
void jpeg_quiet(j_common_ptr c, int level) {
  auto* e = reinterpret_cast<JpegError*>(c->err);
  if (level == -1 && !e->damaged && damaging_warning(c->err->msg_code)) {
    (*c->err->format_message)(c, e->message);
    e->damaged = true;
  }
}

/// TJFLAG_LIMITSCANS for the libjpeg API: a progressive JPEG of more than 500 scans is refused.
void jpeg_scan_limit(j_common_ptr c) {
  if (c->is_decompressor) {
    auto* d = reinterpret_cast<j_decompress_ptr>(c);
    if (d->input_scan_number > 500) {
      std::snprintf(reinterpret_cast<JpegError*>(c->err)->message, JMSG_LENGTH_MAX,
                    "progressive JPEG with more than 500 scans");
      std::longjmp(reinterpret_cast<JpegError*>(c->err)->jump, 1);
    }
  }
}

/// The smallest of the DCT scales at which the box still covers the output. Only 1/8, 2/8 and
/// 4/8 are candidates below full scale: libjpeg-turbo has SIMD inverse DCTs for those (and 8/8)
/// only; the others (3/8, 5/8 .. 7/8, and the 10x10 .. 14x14 transforms that upsample chroma at
/// those scales) run in plain C and cost more than they save (docs/benchmarks.md).
int pick_scale(const RegionRequest& r) {
  for (int num : {1, 2, 4})
    if (r.box_w * num / 8.0 >= static_cast<double>(r.out_w) && r.box_h * num / 8.0 >= static_cast<double>(r.out_h))
      return num;
  return 8;
}

/// Returns false (with `why` set) on a libjpeg error. No C++ object with a destructor lives
/// between the setjmp and a longjmp: `out` is sized before, and filled through a raw pointer.
bool jpeg_region(const std::vector<uint8_t>& b, int channels, const RegionRequest& req, DecodedRegion* out,
                 std::string* why, bool* cmyk) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  jpeg_progress_mgr progress;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;
  err.mgr.emit_message = jpeg_quiet;
  err.message[0] = 0;
  err.damaged = false;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    *why = err.message;
    return false;
  }
  jpeg_create_decompress(&cinfo);
  progress.progress_monitor = jpeg_scan_limit;
  cinfo.progress = &progress;
  jpeg_mem_src(&cinfo, b.data(), static_cast<unsigned long>(b.size()));
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    *cmyk = true;
    return true;
  }
  if (static_cast<uint64_t>(cinfo.image_width) * cinfo.image_height > kMaxPixels) {
    std::snprintf(err.message, JMSG_LENGTH_MAX, "%u x %u pixels; at most %llu pixels are accepted", cinfo.image_width,
                  cinfo.image_height, static_cast<unsigned long long>(kMaxPixels));
    jpeg_destroy_decompress(&cinfo);
    *why = err.message;
    return false;
  }
  const int num = pick_scale(req);
  cinfo.scale_num = static_cast<unsigned>(num);
  cinfo.scale_denom = 8;
  cinfo.out_color_space = channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_start_decompress(&cinfo);
  // Each 8x8 block becomes num x num pixels: the scale is num/8 exactly (output_width / image_width
  // is off by the rounding up of the last block, which is most of a pixel at the far edge).
  const double sx = num / 8.0, sy = num / 8.0;
  // The filter of transforms.cpp reaches half an output pixel's footprint past the box, plus one.
  const double fx = req.box_w * sx / std::max<int64_t>(1, req.out_w), fy = req.box_h * sy / std::max<int64_t>(1, req.out_h);
  const int64_t mx = static_cast<int64_t>(std::ceil(fx / 2)) + 2, my = static_cast<int64_t>(std::ceil(fy / 2)) + 2;
  const int64_t W = cinfo.output_width, H = cinfo.output_height;
  int64_t x0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(req.box_x * sx)) - mx, 0, W - 1);
  int64_t x1 = std::clamp<int64_t>(static_cast<int64_t>(std::ceil((req.box_x + req.box_w) * sx)) + mx, x0 + 1, W);
  int64_t y0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(req.box_y * sy)) - my, 0, H - 1);
  int64_t y1 = std::clamp<int64_t>(static_cast<int64_t>(std::ceil((req.box_y + req.box_h) * sy)) + my, y0 + 1, H);
  JDIMENSION xoff = static_cast<JDIMENSION>(x0), width = static_cast<JDIMENSION>(x1 - x0);
  if (xoff > 0 || width < cinfo.output_width) jpeg_crop_scanline(&cinfo, &xoff, &width);  // widened to iMCU edges
  const int64_t rows = y1 - y0, cols = cinfo.output_width;
  uint8_t* px = out->image.pixels.data();  // sized by the caller for the worst case (the whole scaled image)
  if (y0 > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(y0));
  for (int64_t r = 0; r < rows;) {
    JSAMPROW row = px + r * cols * channels;
    r += jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_abort_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  if (err.damaged) {
    *why = err.message;
    return false;
  }
  out->image.height = static_cast<int>(rows);
  out->image.width = static_cast<int>(cols);
  out->image.channels = channels;
  out->scale_y = sy;
  out->scale_x = sx;
  out->y0 = y0;
  out->x0 = xoff;
  out->scale_num = num;
  return true;
}

}  // namespace

namespace {

/// A PNG's header: its size and whether it is in color. Exit 2 naming `name` when unreadable.
struct PngHeader {
  uint32_t width = 0, height = 0;
  bool color = false;
};
PngHeader png_header(const std::vector<uint8_t>& b, const std::string& name) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  DLRUN_CHECK_INPUT(png_image_begin_read_from_memory(&image, b.data(), b.size()) != 0, "undecodable PNG image {}: {}",
                    name, image.message);
  const PngHeader h{image.width, image.height, (image.format & PNG_FORMAT_FLAG_COLOR) != 0};
  png_image_free(&image);
  return h;
}

}  // namespace

int probe_channels_bytes(const std::vector<uint8_t>& b, const std::string& name) {
  if (is_jpeg(b)) {
    int w = 0, ht = 0, cs = 0;
    jpeg_header(jpeg_handle(), b, name, &w, &ht, &cs);
    return cs == TJCS_GRAY ? 1 : 3;
  }
  if (is_png(b)) return png_header(b, name).color ? 3 : 1;
  fail_input("undecodable image {}: not a JPEG or PNG file", name);
}

void image_size_bytes(const std::vector<uint8_t>& b, const std::string& name, int64_t* height, int64_t* width) {
  if (is_jpeg(b)) {
    int w = 0, ht = 0, cs = 0;
    jpeg_header(jpeg_handle(), b, name, &w, &ht, &cs);
    *height = ht;
    *width = w;
    return;
  }
  if (is_png(b)) {
    const PngHeader h = png_header(b, name);
    *height = h.height;
    *width = h.width;
    return;
  }
  fail_input("undecodable image {}: not a JPEG or PNG file", name);
}

void decode_region(const std::vector<uint8_t>& bytes, const std::string& name, int channels, const RegionRequest& req,
                   DecodedRegion* out) {
  DLRUN_CHECK(channels == 1 || channels == 3, ExitCode::kRuntime, "decode_region: channels must be 1 or 3");
  if (is_jpeg(bytes)) {
    int64_t h = 0, w = 0;
    image_size_bytes(bytes, name, &h, &w);
    check_pixels(static_cast<uint64_t>(w), static_cast<uint64_t>(h), "JPEG", name);
    // Room for the worst case: the whole image at the chosen scale, rounded up. A buffer reused
    // from image to image only grows (fresh pages for every image cost more than the decode).
    const int num = pick_scale(req);
    const size_t sw = static_cast<size_t>((w * num + 7) / 8), sh = static_cast<size_t>((h * num + 7) / 8);
    if (out->image.pixels.size() < sw * sh * static_cast<size_t>(channels))
      out->image.pixels.resize(sw * sh * static_cast<size_t>(channels));
    std::string why;
    bool cmyk = false;
    if (!jpeg_region(bytes, channels, req, out, &why, &cmyk)) fail_input("undecodable JPEG image {}: {}", name, why);
    if (!cmyk) return;
  }
  *out = DecodedRegion{};
  out->image = decode_image_bytes(bytes, name, channels);
}

DecodedRegion decode_region(const std::vector<uint8_t>& bytes, const std::string& name, int channels,
                            const RegionRequest& req) {
  DecodedRegion out;
  decode_region(bytes, name, channels, req, &out);
  out.image.pixels.resize(static_cast<size_t>(out.image.height) * out.image.width * channels);
  return out;
}

DecodedImage decode_image_bytes(const std::vector<uint8_t>& bytes, const std::string& name, int channels) {
  DLRUN_CHECK(channels == 1 || channels == 3, ExitCode::kRuntime, "decode_image: channels must be 1 or 3");
  if (is_jpeg(bytes)) return decode_jpeg(bytes, name, channels);
  if (is_png(bytes)) return decode_png(bytes, name, channels);
  fail_input("undecodable image {}: not a JPEG or PNG file", name);
}

DecodedImage decode_image(const std::string& path, int channels) {
  return decode_image_bytes(read_all(path), path, channels);
}

bool is_image_name(const std::string& name) {
  const std::string base = name.substr(name.rfind('/') + 1);  // (npos + 1 == 0: no folder)
  const auto dot = base.rfind('.');
  if (dot == std::string::npos || dot == 0) return false;  // as std::filesystem: ".jpg" has no extension
  const std::string ext = lower(base.substr(dot));
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

std::vector<uint8_t> read_image_file(const std::string& path) { return read_all(path); }

int probe_channels(const std::string& path) { return probe_channels_bytes(read_all(path), path); }

}  // namespace dlrun::data
