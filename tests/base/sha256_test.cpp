// SHA-256 (OpenSSL underneath) against the FIPS 180-4 / NIST example vectors: checkpoint
// manifests and params_sha256 depend on it being bit-exact, in one piece or many.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/sha256.h"
#include "support/files.h"
#include "support/scratch_dir.h"

using namespace dlrun;

TEST_CASE("sha256 of known vectors", "[base][sha256]") {
  CHECK(sha256_hex("", 0) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc", 3) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(sha256_hex(two_blocks.data(), two_blocks.size()) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  CHECK(sha256_hex(million.data(), million.size()) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("sha256 is the same fed in pieces of any size", "[base][sha256]") {
  std::string data;
  for (int i = 0; i < 5000; ++i) data.push_back(static_cast<char>(i * 31 + 7));
  const std::string whole = sha256_hex(data.data(), data.size());
  for (size_t piece : {1, 3, 55, 56, 63, 64, 65, 1000}) {
    Sha256 s;
    for (size_t i = 0; i < data.size(); i += piece) s.update(data.data() + i, std::min(piece, data.size() - i));
    CHECK(s.hex() == whole);
    CHECK(s.hex() == whole);  // a second call returns the same digest
    CHECK_THROWS_AS(s.update("x", 1), Error);
  }
}

TEST_CASE("sha256_file hashes a file, reports its size and names a missing one", "[base][sha256]") {
  dlrun::testing::ScratchDir tmp;
  const std::string data(3 << 20, 'q');  // more than one 1 MiB read
  const std::string path = tmp.write("f.bin", data);
  uint64_t n = 0;
  CHECK(sha256_file(path, &n) == sha256_hex(data.data(), data.size()));
  CHECK(n == data.size());
  try {
    sha256_file(tmp / "missing.bin");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kBadInput);
    CHECK(e.message().find("missing.bin") != std::string::npos);
  }
}

TEST_CASE("sha256_file_range hashes one byte range of a file, and refuses one past its end", "[base][sha256]") {
  dlrun::testing::ScratchDir tmp;
  std::string data;
  for (int i = 0; i < (5 << 19); ++i) data.push_back(static_cast<char>(i * 131 + (i >> 9)));  // 2.5 MiB
  const std::string path = tmp.write("f.bin", data);
  const uint64_t mib = 1 << 20;
  for (const auto& [off, len] : std::vector<std::pair<uint64_t, uint64_t>>{
           {0, data.size()}, {0, 1}, {7, mib}, {mib - 3, mib + 5}, {data.size() - 10, 10}, {100, 0}}) {
    INFO(off << "+" << len);
    CHECK(sha256_file_range(path, off, len) == sha256_hex(data.data() + off, len));
  }
  CHECK(sha256_file_range(path, 0, data.size()) == sha256_file(path));
  try {
    sha256_file_range(path, data.size() - 10, 11);  // the file changed under an upload: shorter
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.message().find("f.bin") != std::string::npos);
    CHECK(e.message().find("ends at byte") != std::string::npos);
  }
  CHECK_THROWS_AS(sha256_file_range(tmp / "missing.bin", 0, 1), Error);
}

TEST_CASE("bytes_hashed counts every byte hashed in the process", "[base][sha256]") {
  const uint64_t before = Sha256::bytes_hashed();
  const std::string data(12345, 'z');
  sha256_hex(data.data(), data.size());
  Sha256 h;
  h.update(data.data(), 100);
  CHECK(Sha256::bytes_hashed() - before == 12345 + 100);
}
