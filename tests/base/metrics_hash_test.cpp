// SHA-256 and CRC32C against published test vectors: checkpoint manifests, params_sha256 and
// TensorBoard's record checksums all depend on these being bit-exact.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <string>

#include "base/error.h"
#include "metrics/writers.h"

using namespace dlrun;

TEST_CASE("sha256 of known vectors", "[metrics][sha256]") {
  CHECK(metrics::sha256_hex("", 0) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(metrics::sha256_hex("abc", 3) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(metrics::sha256_hex(two_blocks.data(), two_blocks.size()) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("sha256 of a million 'a' fed in uneven pieces", "[metrics][sha256]") {
  const std::string million(1000000, 'a');
  const char* expect = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  CHECK(metrics::sha256_hex(million.data(), million.size()) == expect);
  metrics::Sha256 h;
  size_t off = 0, piece = 1;
  while (off < million.size()) {  // pieces of 1, 2, ... 127 bytes cross every block boundary
    size_t n = std::min(piece, million.size() - off);
    h.update(million.data() + off, n);
    off += n;
    piece = piece % 127 + 1;
  }
  CHECK(h.hex() == expect);
}

TEST_CASE("sha256_file hashes a file and names a missing one", "[metrics][sha256]") {
  char path[] = "/tmp/dlrun_sha_XXXXXX";
  int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, "abc", 3) == 3);
  ::close(fd);
  CHECK(metrics::sha256_file(path) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::remove(path);
  try {
    metrics::sha256_file(path);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kRuntime);
    CHECK(e.message().find(path) != std::string::npos);
  }
}

TEST_CASE("crc32c of the check string and chaining", "[metrics][crc32c]") {
  CHECK(metrics::crc32c("123456789", 9) == 0xE3069283u);
  CHECK(metrics::crc32c("", 0) == 0u);
  CHECK(metrics::crc32c("56789", 5, metrics::crc32c("1234", 4)) == 0xE3069283u);
  // 32 bytes of zeros: the iSCSI (RFC 3720 B.4) vector.
  const std::string zeros(32, '\0');
  CHECK(metrics::crc32c(zeros.data(), zeros.size()) == 0x8A9136AAu);
  const uint32_t c = 0xE3069283u;
  CHECK(metrics::masked_crc32c("123456789", 9) == uint32_t(((c >> 15) | (c << 17)) + 0xa282ead8u));
}
