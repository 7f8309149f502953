// SHA-256 of the checkpoint manifests against the FIPS 180-4 / NIST example vectors.
#include <catch2/catch.hpp>

#include <string>

#include "checkpoint/sha256.h"
#include "core/checkpoint_test_util.h"

using dlrun::ckpt::detail::Sha256;
using dlrun::ckpt::detail::sha256_file;
using dlrun::ckpt::detail::sha256_hex;

TEST_CASE("sha256 matches the standard vectors", "[ckpt]") {
  CHECK(sha256_hex("abc", 3) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("", 0) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(sha256_hex(two_blocks.data(), two_blocks.size()) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  CHECK(sha256_hex(million.data(), million.size()) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("sha256 is the same fed in pieces of any size and from a file", "[ckpt]") {
  std::string data;
  for (int i = 0; i < 5000; ++i) data.push_back(static_cast<char>(i * 31 + 7));
  const std::string whole = sha256_hex(data.data(), data.size());
  for (size_t piece : {1, 3, 55, 56, 63, 64, 65, 1000}) {
    Sha256 s;
    for (size_t i = 0; i < data.size(); i += piece) s.update(data.data() + i, std::min(piece, data.size() - i));
    CHECK(s.hex() == whole);
  }
  dlrun::testing::TempDir tmp;
  dlrun::testing::write_text(tmp / "f.bin", data);
  uint64_t n = 0;
  CHECK(sha256_file(tmp / "f.bin", &n) == whole);
  CHECK(n == data.size());
  CHECK_THROWS(sha256_file(tmp / "missing.bin"));
}
