// Strict ISO 8601 / RFC 3339 times (src/base/iso8601.h): what the credential services and the
// cloud notices write is read exactly, and what a lenient reader would bend into another time
// (a negative minute, 31 February, a leap second, an offset of 25 hours) is refused.
#include <catch2/catch.hpp>

#include <ctime>

#include "base/iso8601.h"

using dlrun::parse_iso8601;
using dlrun::utc_seconds;

TEST_CASE("utc_seconds agrees with timegm on every valid day from 1970 to 2400", "[base][iso8601]") {
  int checked = 0;
  for (int y = 1970; y <= 2400; ++y)
    for (int m = 1; m <= 12; ++m)
      for (int d = 1; d <= 31; ++d) {
        std::tm tm{};
        tm.tm_year = y - 1900;
        tm.tm_mon = m - 1;
        tm.tm_mday = d;
        tm.tm_hour = 13;
        tm.tm_min = 7;
        tm.tm_sec = 59;
        const time_t t = timegm(&tm);
        const bool valid = tm.tm_mday == d;  // timegm moved a day past the month's end onwards
        const auto mine = utc_seconds(y, m, d, 13, 7, 59);
        if (valid != mine.has_value() || (valid && *mine != t)) FAIL(y << "-" << m << "-" << d);
        ++checked;
      }
  CHECK(checked == 431 * 12 * 31);
}

TEST_CASE("utc_seconds refuses each field out of its range", "[base][iso8601]") {
  CHECK(utc_seconds(2024, 2, 29, 0, 0, 0).has_value());        // a leap year
  CHECK_FALSE(utc_seconds(2025, 2, 29, 0, 0, 0).has_value());  // not one
  CHECK_FALSE(utc_seconds(2100, 2, 29, 0, 0, 0).has_value());  // a century, not a leap year
  CHECK(utc_seconds(2000, 2, 29, 0, 0, 0).has_value());        // every 400 years, a leap year
  CHECK_FALSE(utc_seconds(2026, 4, 31, 0, 0, 0).has_value());
  CHECK_FALSE(utc_seconds(2026, 0, 1, 0, 0, 0).has_value());
  CHECK_FALSE(utc_seconds(2026, 13, 1, 0, 0, 0).has_value());
  CHECK_FALSE(utc_seconds(2026, 1, 0, 0, 0, 0).has_value());
  CHECK_FALSE(utc_seconds(2026, 1, 1, 24, 0, 0).has_value());
  CHECK_FALSE(utc_seconds(2026, 1, 1, 0, -1, 0).has_value());
  CHECK_FALSE(utc_seconds(2026, 1, 1, 0, 60, 0).has_value());
  CHECK_FALSE(utc_seconds(2026, 1, 1, 0, 0, 60).has_value());
  CHECK_FALSE(utc_seconds(1969, 12, 31, 23, 59, 59).has_value());
  CHECK(utc_seconds(1970, 1, 1, 0, 0, 0) == 0);
  CHECK(utc_seconds(9999, 12, 31, 23, 59, 59) == 253402300799);
}

TEST_CASE("parse_iso8601 reads RFC 3339 times: Z, offsets, fractions", "[base][iso8601]") {
  CHECK(parse_iso8601("1970-01-01T00:00:00Z") == 0.0);
  CHECK(parse_iso8601("2026-11-25T20:00:00Z") == 1795636800.0);
  CHECK(parse_iso8601("2026-11-25T20:00:00.5Z") == 1795636800.5);
  CHECK(parse_iso8601("2026-11-25T20:00:00.500Z") == 1795636800.5);
  CHECK(parse_iso8601("2026-11-25T20:00:00.123456789Z") == Approx(1795636800.123456789));
  CHECK(parse_iso8601("2026-11-25T21:00:00+01:00") == 1795636800.0);
  CHECK(parse_iso8601("2026-11-25T15:30:00-04:30") == 1795636800.0);
  CHECK(parse_iso8601("2026-11-25T20:00:00-00:00") == 1795636800.0);
  CHECK(parse_iso8601("2026-11-25T20:00:00.25+00:00") == 1795636800.25);
  CHECK(parse_iso8601("2024-02-29T00:00:00Z") == 1709164800.0);
  CHECK(parse_iso8601("2026-11-26T00:30:00+23:59") == 1795636800.0 - 20 * 3600 + 31 * 60);  // 25 Nov, 00:31 UTC
}

TEST_CASE("parse_iso8601 refuses what a lenient reader would bend into another time", "[base][iso8601]") {
  for (const char* bad : {
           "2026-11-25T20:-1:00Z",        // a negative minute (sscanf's %2d reads "-1")
           "2026-02-31T00:00:00Z",        // 31 February (timegm makes it 3 March)
           "2026-04-31T00:00:00Z",        // 31 April
           "2025-02-29T00:00:00Z",        // 29 February of a common year
           "2100-02-29T00:00:00Z",        // nor of a century that is not a leap year
           "2026-11-25T24:00:00Z",        // hour 24
           "2026-11-25T20:60:00Z",        // minute 60
           "2026-11-25T20:00:60Z",        // a leap second
           "2026-13-25T20:00:00Z",        // month 13
           "2026-00-25T20:00:00Z",        // month 0
           "2026-11-00T20:00:00Z",        // day 0
           "1969-12-31T23:59:59Z",        // before the epoch
           "2026-11-25T20:00:00.Z",       // a point without digits
           "2026-11-25T20:00:00.1234567890Z",  // more than nanoseconds
           "2026-11-25T20:00:00+25:00",   // an offset of 25 hours
           "2026-11-25T20:00:00+01:60",   // an offset's minute 60
           "2026-11-25T20:00:00+0100",    // an offset without its colon
           "2026-11-25T20:00:00+01",      // an offset without minutes
           "2026-11-25T20:00:00",         // no zone at all
           "2026-11-25T20:00:00z",        // lower-case z
           "2026-11-25t20:00:00Z",        // lower-case t
           "2026-11-25 20:00:00Z",        // a space for the T
           "2026-11-25T20:00:00Zjunk",    // anything after the zone
           "2026-11-25T20:00:00Z ",
           " 2026-11-25T20:00:00Z",       // a space before (sscanf skips it)
           "+2026-11-25T20:00:00Z",
           "2026-1-25T20:00:00Z",         // a field short of its digits
           "2026-11-25T2:00:00Z",
           "2026-11-25T20:0:00Z",
           "26-11-25T20:00:00Z",
           "2026-11-25T20:00:0aZ",
           "2026/11/25T20:00:00Z",
           "",
           "Z",
       }) {
    INFO(bad);
    CHECK_FALSE(parse_iso8601(bad).has_value());
  }
}
