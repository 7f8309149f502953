// Fuzz target: JPEG and PNG decoding as the loader calls it (channel probe on the file, decode
// to 1 or 3 channels, and the region decode of a crop: header size, then a DCT-scaled, cropped
// decode through libjpeg's API). Input: one byte choosing the channels and the crop, then the file.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"
#include "common.h"
#include "data/image_decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int channels = data[0] % 2 ? 3 : 1;
  const std::vector<uint8_t> bytes(data + 1, data + size);
  const std::string path = dlrun::fuzz::scratch() + "/image";
  dlrun::fuzz::write(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  try {
    dlrun::data::probe_channels(path);
  } catch (const dlrun::Error&) {
  }
  try {
    const auto img = dlrun::data::decode_image_bytes(bytes, "fuzz", channels);
    const size_t want = static_cast<size_t>(img.height) * img.width * img.channels;
    if (img.pixels.size() != want || img.channels != channels) __builtin_trap();
  } catch (const dlrun::Error&) {
  }
  try {
    int64_t h = 0, w = 0;
    dlrun::data::image_size_bytes(bytes, "fuzz", &h, &w);
    // A crop from the first byte: the whole image to a small output (a reduced DCT scale), or its
    // middle at full scale.
    const bool small = (data[0] >> 1) % 2;
    const dlrun::data::RegionRequest req = small ? dlrun::data::RegionRequest{0, 0, double(h), double(w), 8, 8}
                                                 : dlrun::data::RegionRequest{h / 4.0, w / 4.0, h / 2.0, w / 2.0,
                                                                              std::max<int64_t>(1, h / 2),
                                                                              std::max<int64_t>(1, w / 2)};
    const auto r = dlrun::data::decode_region(bytes, "fuzz", channels, req);
    const size_t want = static_cast<size_t>(r.image.height) * r.image.width * r.image.channels;
    if (r.image.pixels.size() != want || r.y0 < 0 || r.x0 < 0) __builtin_trap();
  } catch (const dlrun::Error&) {
  }
  return 0;
}
