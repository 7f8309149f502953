// Small text helpers that several folders need: surrounding whitespace off, ASCII lower case,
// a trailing character off. One definition each, so that "what counts as whitespace" or "how a
// header name is compared" does not differ from one file to the next.
#pragma once

#include <string>
#include <string_view>

namespace dlrun {

/// `s` without leading and trailing whitespace (space, \t, \n, \v, \f, \r: C's isspace).
std::string trim(std::string_view s);

/// `s` with ASCII letters in lower case; other bytes (UTF-8 included) unchanged.
std::string lower(std::string s);

/// Whether `s` ends with `suffix`.
bool ends_with(std::string_view s, std::string_view suffix);

/// `s` without every trailing `c` ("http://host//" and '/' give "http://host").
std::string strip_trailing(std::string s, char c);

}  // namespace dlrun
