// Small text helpers (see strings.h).
#include "base/strings.h"

namespace dlrun {
namespace {

constexpr std::string_view kSpace = " \t\n\v\f\r";

}  // namespace

std::string trim(std::string_view s) {
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return std::string(s.substr(b, s.find_last_not_of(kSpace) - b + 1));
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

std::string strip_trailing(std::string s, char c) {
  while (!s.empty() && s.back() == c) s.pop_back();
  return s;
}

}  // namespace dlrun
