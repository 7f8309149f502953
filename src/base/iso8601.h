// Times in text, read strictly. Credential services write their expiry as ISO 8601 (RFC 3339:
// "2026-11-25T20:00:00Z") and cloud notices their deadline the same way (or in RFC 1123). A
// lenient reader (sscanf, strptime, timegm) turns "T20:-1:00Z" or 31 February into some other
// time, and a credential would then be trusted past its real expiry or refreshed in a loop;
// this reader refuses them, as the AWS SDKs' strict parsers do (Go's time.RFC3339, Java's
// Instant.parse).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dlrun {

/// Unix seconds of a UTC calendar time; nullopt when a field is out of its range: year
/// 1970-9999, month 1-12, day within its month (29 February in leap years only), hour 0-23,
/// minute 0-59, second 0-59 (a leap second, 60, is refused as Go's parser does).
std::optional<int64_t> utc_seconds(int year, int month, int day, int hour, int minute, int second);

/// RFC 3339's date-time, exactly: "YYYY-MM-DDTHH:MM:SS", an optional fraction of 1 to 9 digits
/// (".5", ".123456789"), then "Z" or an offset "+HH:MM" / "-HH:MM" (hours 00-23, minutes
/// 00-59), and nothing after. Upper-case T and Z only; no spaces, signs or missing digits in
/// the fields. Unix seconds (the fraction kept), or nullopt when `s` is not such a time.
std::optional<double> parse_iso8601(std::string_view s);

}  // namespace dlrun
