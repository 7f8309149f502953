// The run-directory writers: metrics.jsonl parses back line by line, TensorBoard event files
// have valid TFRecord framing with CRC32C checksums.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "metrics/jsonl.h"
#include "metrics/tensorboard.h"
#include "support/scratch_dir.h"

using namespace dlrun;
namespace fs = std::filesystem;

using dlrun::testing::ScratchDir;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

template <typename T>
T read_le(const std::string& s, size_t off) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= T(uint8_t(s[off + i])) << (8 * i);
  return v;
}

}  // namespace

TEST_CASE("JsonlWriter appends one parseable object per line", "[metrics][jsonl]") {
  ScratchDir d;
  const std::string path = d / "metrics.jsonl";
  {
    metrics::JsonlWriter w(path);
    w.write({{"step", 1}, {"loss", 2.5}});
    w.write({{"step", 2}, {"event", "eval"}, {"text", "line\nbreak"}});
  }
  {
    metrics::JsonlWriter w(path);  // a resumed run keeps appending
    w.write({{"step", 3}});
  }
  std::ifstream f(path);
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(f, line)) rows.push_back(nlohmann::json::parse(line));
  REQUIRE(rows.size() == 3);
  CHECK(rows[0]["loss"] == 2.5);
  CHECK(rows[1]["text"] == "line\nbreak");
  CHECK(rows[2]["step"] == 3);
}

TEST_CASE("JsonlWriter names the file it cannot open", "[metrics][jsonl]") {
  CHECK_THROWS_WITH(metrics::JsonlWriter("/nonexistent_dir/metrics.jsonl"),
                    Catch::Contains("/nonexistent_dir/metrics.jsonl"));
}

TEST_CASE("scalar events encode the protobuf fields TensorBoard reads", "[metrics][tensorboard]") {
  const std::string ev = metrics::encode_scalar_event("loss", 0.5f, 300, 1.0);
  // wall_time: field 1, fixed64 double 1.0
  REQUIRE(ev.size() > 11);
  CHECK(uint8_t(ev[0]) == 0x09);
  double wt;
  std::memcpy(&wt, ev.data() + 1, 8);
  CHECK(wt == 1.0);
  // step: field 2, varint 300 = 0xAC 0x02
  CHECK(uint8_t(ev[9]) == 0x10);
  CHECK(uint8_t(ev[10]) == 0xAC);
  CHECK(uint8_t(ev[11]) == 0x02);
  // summary: field 5 { value: field 1 { tag: field 1 "loss"; simple_value: field 2 float } }
  const std::string summary = ev.substr(12);
  const std::string expect_value = std::string("\x0a\x04loss\x15", 7) + std::string("\x00\x00\x00\x3f", 4);
  CHECK(summary == std::string("\x2a\x0d\x0a\x0b", 4) + expect_value);
  const std::string fv = metrics::encode_file_version_event(2.0);
  CHECK(fv.substr(9) == std::string("\x1a\x0d") + "brain.Event:2");
}

TEST_CASE("TensorBoardWriter frames records with masked CRC32C", "[metrics][tensorboard]") {
  ScratchDir d;
  std::string path;
  {
    metrics::TensorBoardWriter w(d.str());
    w.add_scalar("train/loss", 1.25, 10, 100.0);
    w.add_scalar("train/loss", 0.75, 20, 101.0);
    w.flush();
    path = w.path();
    metrics::TensorBoardWriter w2(d.str());  // same second: a distinct file
    CHECK(w2.path() != path);
  }
  CHECK(fs::path(path).filename().string().rfind("events.out.tfevents.", 0) == 0);
  const std::string s = slurp(path);
  std::vector<std::string> records;
  size_t off = 0;
  while (off < s.size()) {
    REQUIRE(off + 12 <= s.size());
    const uint64_t len = read_le<uint64_t>(s, off);
    CHECK(read_le<uint32_t>(s, off + 8) == metrics::masked_crc32c(s.data() + off, 8));
    REQUIRE(off + 12 + len + 4 <= s.size());
    const std::string data = s.substr(off + 12, len);
    CHECK(read_le<uint32_t>(s, off + 12 + len) == metrics::masked_crc32c(data.data(), data.size()));
    records.push_back(data);
    off += 12 + len + 4;
  }
  REQUIRE(records.size() == 3);
  CHECK(records[0].find("brain.Event:2") != std::string::npos);
  CHECK(records[1] == metrics::encode_scalar_event("train/loss", 1.25f, 10, 100.0));
  CHECK(records[2] == metrics::encode_scalar_event("train/loss", 0.75f, 20, 101.0));
}

TEST_CASE("crc32c of the check string and chaining", "[metrics][tensorboard]") {
  CHECK(metrics::crc32c("123456789", 9) == 0xE3069283u);
  CHECK(metrics::crc32c("", 0) == 0u);
  CHECK(metrics::crc32c("56789", 5, metrics::crc32c("1234", 4)) == 0xE3069283u);
  // 32 bytes of zeros: the iSCSI (RFC 3720 B.4) vector.
  const std::string zeros(32, '\0');
  CHECK(metrics::crc32c(zeros.data(), zeros.size()) == 0x8A9136AAu);
  const uint32_t c = 0xE3069283u;
  CHECK(metrics::masked_crc32c("123456789", 9) == uint32_t(((c >> 15) | (c << 17)) + 0xa282ead8u));
}
