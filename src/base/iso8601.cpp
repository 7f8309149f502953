// Strict ISO 8601 / RFC 3339 times (see iso8601.h).
#include "base/iso8601.h"

namespace dlrun {
namespace {

bool leap(int year) { return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0; }

int days_in_month(int year, int month) {
  static constexpr int kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month == 2 && leap(year) ? 29 : kDays[month - 1];
}

/// Leap years among 1 .. year.
int64_t leaps_through(int64_t year) { return year / 4 - year / 100 + year / 400; }

/// The `n` characters at `s[at]` as a number; -1 unless all of them are digits.
int digits(std::string_view s, size_t at, size_t n) {
  if (at + n > s.size()) return -1;
  int v = 0;
  for (size_t i = at; i < at + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

}  // namespace

std::optional<int64_t> utc_seconds(int year, int month, int day, int hour, int minute, int second) {
  if (year < 1970 || year > 9999 || month < 1 || month > 12 || day < 1 || day > days_in_month(year, month) ||
      hour < 0 || hour > 23 || minute < 0 || minute > 59 || second < 0 || second > 59)
    return std::nullopt;
  int64_t days = 365 * int64_t(year - 1970) + leaps_through(year - 1) - leaps_through(1969);
  for (int m = 1; m < month; ++m) days += days_in_month(year, m);
  days += day - 1;
  return days * 86400 + hour * 3600 + minute * 60 + second;
}

std::optional<double> parse_iso8601(std::string_view s) {
  // YYYY-MM-DDTHH:MM:SS: fixed positions, fixed widths.
  const int year = digits(s, 0, 4), month = digits(s, 5, 2), day = digits(s, 8, 2);
  const int hour = digits(s, 11, 2), minute = digits(s, 14, 2), second = digits(s, 17, 2);
  if (s.size() < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' || year < 0 ||
      month < 0 || day < 0 || hour < 0 || minute < 0 || second < 0)
    return std::nullopt;
  const auto base = utc_seconds(year, month, day, hour, minute, second);
  if (!base) return std::nullopt;
  size_t at = 19;
  double fraction = 0;
  if (s[at] == '.') {
    const size_t first = ++at;
    for (double scale = 0.1; at < s.size() && s[at] >= '0' && s[at] <= '9'; ++at, scale /= 10)
      fraction += (s[at] - '0') * scale;
    if (at == first || at - first > 9) return std::nullopt;
  }
  if (at < s.size() && s[at] == 'Z') return at + 1 == s.size() ? std::optional<double>(*base + fraction) : std::nullopt;
  if (at + 6 != s.size() || (s[at] != '+' && s[at] != '-') || s[at + 3] != ':') return std::nullopt;
  const int off_h = digits(s, at + 1, 2), off_m = digits(s, at + 4, 2);
  if (off_h < 0 || off_h > 23 || off_m < 0 || off_m > 59) return std::nullopt;
  const int64_t offset = (s[at] == '+' ? 1 : -1) * (off_h * 3600 + off_m * 60);
  return static_cast<double>(*base - offset) + fraction;
}

}  // namespace dlrun
