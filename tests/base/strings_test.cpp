// The small text helpers every folder shares (src/base/strings.h).
#include <catch2/catch.hpp>

#include "base/strings.h"

using namespace dlrun;

TEST_CASE("trim takes C's whitespace off both ends and nothing else", "[base][strings]") {
  CHECK(trim("  a b \t\r\n") == "a b");
  CHECK(trim("\v\fx\f\v") == "x");
  CHECK(trim(" \t\r\n") == "");
  CHECK(trim("") == "");
  CHECK(trim("x") == "x");
  CHECK(trim("\xc2\xa0x") == "\xc2\xa0x");  // a UTF-8 no-break space is not C's whitespace
}

TEST_CASE("lower changes ASCII letters only", "[base][strings]") {
  CHECK(lower("Content-Length") == "content-length");
  CHECK(lower("TRUE") == "true");
  CHECK(lower("J\xc3\x89PG") == "j\xc3\x89pg");  // UTF-8 bytes are left as they are
  CHECK(lower("") == "");
}

TEST_CASE("strip_trailing drops every trailing copy of one character", "[base][strings]") {
  CHECK(strip_trailing("http://host//", '/') == "http://host");
  CHECK(strip_trailing("///", '/') == "");
  CHECK(strip_trailing("a/b", '/') == "a/b");
}
