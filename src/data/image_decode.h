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

}  // namespace dlrun::data
