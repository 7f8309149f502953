// The durable-file primitives: atomic replacement, whole-file reads.
#include <catch2/catch.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/fsutil.h"
#include "support/env.h"
#include "support/errors.h"
#include "support/files.h"
#include "support/scratch_dir.h"

using namespace dlrun;
using dlrun::testing::ScratchDir;
namespace fs = std::filesystem;

namespace {
std::string slurp(const fs::path& p) { return dlrun::testing::read_text(p.string()); }
}  // namespace

TEST_CASE("write_json_atomic replaces the file and leaves no temporary", "[base][fsutil]") {
  ScratchDir d;
  const fs::path path = d / "summary.json";
  fsutil::write_json_atomic(path.string(), {{"status", "interrupted"}});
  fsutil::write_json_atomic(path.string(), {{"status", "completed"}, {"steps", 10}});
  auto j = nlohmann::json::parse(slurp(path));
  CHECK(j["status"] == "completed");
  CHECK(j["steps"] == 10);
  int files = 0;
  for (const auto& e : fs::directory_iterator(d.str())) {
    ++files;
    CHECK(e.path().filename() == "summary.json");
  }
  CHECK(files == 1);
  CHECK_THROWS_WITH(fsutil::write_json_atomic("/nonexistent_dir/s.json", {}),
                    Catch::Contains("/nonexistent_dir/s.json"));
}

TEST_CASE("read_file and read_bytes return the whole file and name a missing one", "[base][fsutil]") {
  ScratchDir d;
  std::string big(3 * 65536 + 17, 'x');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  const std::string p = d.write("f.bin", big);
  CHECK(fsutil::read_file(p) == big);
  const auto bytes = fsutil::read_bytes(p);
  CHECK(std::string(bytes.begin(), bytes.end()) == big);
  CHECK(fsutil::read_file(d.write("empty", "")).empty());
  try {
    fsutil::read_file(d / "missing");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kBadInput);
    CHECK(e.message().find("missing") != std::string::npos);
  }
}

TEST_CASE("an injected disk error fails a durable write as the disk would", "[base][fsutil]") {
  ScratchDir d;
  fs::create_directories(d / "step-00000020.tmp");
  const std::string path = d / "step-00000020.tmp/model.pt";
  const std::string data(1000, 'x');
  SECTION("ENOSPC: half the bytes reach the file, then the error naming it") {
    dlrun::testing::ScopedEnv e("DLRUN_FAULT", "disk_error:ENOSPC");
    dlrun::testing::require_error([&] { fsutil::write_file_durable(path, data); },
                                  {path, "write failed", std::strerror(ENOSPC)}, ExitCode::kRuntime);
    CHECK(fs::file_size(path) == 500);
  }
  SECTION("EROFS: the file is never created") {
    dlrun::testing::ScopedEnv e("DLRUN_FAULT", "disk_error:EROFS");
    dlrun::testing::require_error([&] { fsutil::write_file_durable(path, data); },
                                  {path, "cannot create", std::strerror(EROFS)}, ExitCode::kRuntime);
    CHECK_FALSE(fs::exists(path));
  }
  SECTION("other files are written normally") {
    dlrun::testing::ScopedEnv e("DLRUN_FAULT", "disk_error:EIO");
    fsutil::write_file_durable(d / "summary.json", data);
    CHECK(fs::file_size(d / "summary.json") == 1000);
  }
}
