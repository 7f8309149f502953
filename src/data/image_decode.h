// Decoding JPEG (libjpeg-turbo's TurboJPEG API) and PNG (libpng's simplified API) files into
// 8-bit pixels, converted to the requested channel count (1 = gray, 3 = RGB).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dlrun::data {

struct DecodedImage {
  int height = 0, width = 0, channels = 0;
  std::vector<uint8_t> pixels;  ///< (H, W, C) interleaved
};

/// The channel count an image file has natively: 1 for gray (with or without alpha), 3 for
/// color. Reads only the header. Throws dlrun::Error (exit 2) naming the file if it is not a
/// readable JPEG or PNG.
int probe_channels(const std::string& path);

/// Decodes `path` (JPEG or PNG, recognised by content) into `channels` (1 or 3) channels.
/// Thread-safe. Throws dlrun::Error (exit 2) naming the file when it cannot be decoded.
DecodedImage decode_image(const std::string& path, int channels);

/// Decodes an in-memory file; `name` is used in error messages.
DecodedImage decode_image_bytes(const std::vector<uint8_t>& bytes, const std::string& name, int channels);

/// Whether a file name is one dlrun reads as an image: .jpg, .jpeg or .png, in any case.
bool is_image_name(const std::string& name);

/// The bytes of an image file; exit 2 naming it when it cannot be read.
std::vector<uint8_t> read_image_file(const std::string& path);

/// probe_channels of an in-memory file.
int probe_channels_bytes(const std::vector<uint8_t>& bytes, const std::string& name);

/// The pixel size of an in-memory JPEG or PNG from its header; exit 2 naming `name` when it is
/// neither or its header is broken.
void image_size_bytes(const std::vector<uint8_t>& bytes, const std::string& name, int64_t* height, int64_t* width);

/// The part of an image a sample's resampling reads: a box in the image's pixels (fractions
/// allowed) that becomes out_h x out_w pixels.
struct RegionRequest {
  double box_y = 0, box_x = 0, box_h = 0, box_w = 0;
  int64_t out_h = 0, out_w = 0;
};

/// A decoded part of an image: pixel (y, x) of `image` is the point ((y + y0) / scale_y,
/// (x + x0) / scale_x) of the full-resolution image.
struct DecodedRegion {
  DecodedImage image;
  double scale_y = 1, scale_x = 1;
  int64_t y0 = 0, x0 = 0;
  int scale_num = 8;  ///< the DCT scale used, in eighths (8: full resolution)
};

/// Decodes what `req` needs. A JPEG is decoded at the smallest DCT scale (1/8 .. 8/8) at which
/// the box still covers out_h x out_w pixels, and only over the rows and columns of the box
/// (with a margin for the resampling filter; libjpeg's jpeg_crop_scanline/jpeg_skip_scanlines).
/// PNGs and CMYK JPEGs are decoded whole (scale 1, offset 0). Thread-safe; exit 2 naming `name`
/// as decode_image_bytes.
DecodedRegion decode_region(const std::vector<uint8_t>& bytes, const std::string& name, int channels,
                            const RegionRequest& req);
/// The same into `out`, whose pixel buffer is reused (grown, never shrunk: it may be longer than
/// height x width x channels).
void decode_region(const std::vector<uint8_t>& bytes, const std::string& name, int channels, const RegionRequest& req,
                   DecodedRegion* out);

}  // namespace dlrun::data
