// Fuzz target: a WebDataset shard as dlrun meets it -- the tar member table (scan_tar), the
// samples grouped by key with their labels read (index_tar) -- and the same bytes as a shard
// index (the wids JSON with dlrun's tables, index_from_json).
#include <cstdint>
#include <cstring>
#include <string>

#include "base/error.h"
#include "data/shard_index.h"
#include "data/tar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  try {
    dlrun::data::scan_tar(in, "fuzz.tar");
  } catch (const dlrun::Error&) {
  }
  try {
    dlrun::data::index_tar([&](uint64_t off, size_t n, char* buf) { std::memcpy(buf, in.data() + off, n); },
                           in.size(), "fuzz.tar", "fuzz.tar");
  } catch (const dlrun::Error&) {
  }
  try {
    bool tables = false;
    dlrun::data::index_from_json(in, "fuzz.json", &tables);
  } catch (const dlrun::Error&) {
  }
  return 0;
}
