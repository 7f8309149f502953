// Shell-like word splitting (see shell_words.h).
#include "base/shell_words.h"

namespace dlrun {

std::optional<std::vector<std::string>> split_shell_words(std::string_view s) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;  // a word has begun: even an empty one, when it began with a quote
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\\') {
      if (++i == s.size()) return std::nullopt;  // nothing left to escape
      word += s[i];
    } else if (c == '\'') {
      const size_t close = s.find('\'', i + 1);
      if (close == std::string_view::npos) return std::nullopt;
      word.append(s.substr(i + 1, close - i - 1));
      i = close;
    } else if (c == '"') {
      for (++i; i < s.size() && s[i] != '"'; ++i) {
        if (s[i] != '\\') {
          word += s[i];
          continue;
        }
        if (++i == s.size()) return std::nullopt;
        if (s[i] != '"' && s[i] != '\\') word += '\\';  // only \" and \\ are escapes in "..."
        word += s[i];
      }
      if (i == s.size()) return std::nullopt;  // no closing quote
    } else {
      word += c;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

}  // namespace dlrun
