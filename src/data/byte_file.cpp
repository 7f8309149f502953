// Whole-file reads through zlib's gz* API, which passes plain files through unchanged.
#include "data/byte_file.h"

#include <zlib.h>

#include <filesystem>

#include "base/error.h"

namespace dlrun::data {

namespace fs = std::filesystem;

std::vector<unsigned char> read_file_bytes(const std::string& path) {
  std::error_code ec;
  DLRUN_CHECK_INPUT(!fs::is_directory(path, ec), "{} is a directory, not a data file", path);
  DLRUN_CHECK_INPUT(fs::is_regular_file(path, ec), "data file not found: {}", path);
  gzFile f = gzopen(path.c_str(), "rb");
  DLRUN_CHECK_INPUT(f != nullptr, "cannot open data file {}", path);
  gzbuffer(f, 1 << 17);
  std::vector<unsigned char> out;
  std::vector<unsigned char> chunk(1 << 20);
  for (;;) {
    int n = gzread(f, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) break;
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
    if (n == 0) break;
  }
  int err = Z_OK;
  const char* msg = gzerror(f, &err);
  std::string what = msg ? msg : "";
  gzclose(f);
  DLRUN_CHECK_INPUT(err == Z_OK || err == Z_STREAM_END, "corrupt or truncated compressed data file {}: {}", path,
                    what);
  return out;
}

std::string find_data_file(const std::string& dir, const std::string& name) {
  std::error_code ec;
  fs::path gz = fs::path(dir) / (name + ".gz");
  if (fs::is_regular_file(gz, ec)) return gz.string();
  fs::path raw = fs::path(dir) / name;
  if (fs::is_regular_file(raw, ec)) return raw.string();
  for (const auto& p : {raw, gz})
    DLRUN_CHECK_INPUT(!fs::exists(p, ec), "{} is not a regular file (a directory?); expected the data file there",
                      p.string());
  fail_input("data file not found: {} (nor {})", raw.string(), gz.string());
}

}  // namespace dlrun::data
