// Fuzz target: a weights file as `dlrun eval --checkpoint FILE`, `dlrun predict` and model.init
// meet it -- the kind read from the bytes (sniff_kind), the safetensors reader (header length,
// JSON header, dtypes, shapes, byte ranges) and the whole read_weights path on a file (either
// reader, or the refusal naming what the file is).
#include <cstdint>
#include <string>

#include "base/error.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/weights_file.h"
#include "common.h"

namespace ckpt = dlrun::ckpt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  (void)ckpt::sniff_kind(in.substr(0, 512));
  try {
    std::map<std::string, std::string> meta;
    ckpt::safetensors_from_bytes(in, "fuzz.safetensors", &meta);
  } catch (const dlrun::Error&) {
  }
  const std::string path = dlrun::fuzz::scratch() + "/weights.bin";
  dlrun::fuzz::write(path, in);
  try {
    ckpt::read_weights(path);
  } catch (const dlrun::Error&) {
  }
  return 0;
}
