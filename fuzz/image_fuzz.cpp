// Fuzz target: JPEG and PNG decoding as the image_folder loader calls it (channel probe on the
// file, then decode to 1 or 3 channels). Input: one byte choosing the channels, then the file.
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
  return 0;
}
