// AWS's INI dialect, as Python's configparser reads it (see aws_ini.h).
#include "remote/aws_ini.h"

#include <deque>
#include <set>

#include "base/error.h"
#include "base/strings.h"

namespace dlrun::remote {
namespace {

constexpr std::string_view kSpace = " \t\n\v\f\r";
constexpr const char* kDefaultSection = "DEFAULT";  // configparser's: inherited by every section

/// `text`'s lines, split at \n, \r\n or \r (Python's universal newlines).
std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find_first_of("\r\n", at);
    if (end == std::string_view::npos) {
      out.push_back(text.substr(at));
      break;
    }
    out.push_back(text.substr(at, end - at));
    at = end + (text.compare(end, 2, "\r\n") == 0 ? 2 : 1);
  }
  return out;
}

}  // namespace

IniSections parse_aws_ini(std::string_view text, const std::string& path) {
  std::deque<std::pair<std::string, IniSection>> sections;  // a deque keeps `section` valid
  IniSection defaults;
  std::set<std::string> section_names, keys_seen;  // keys_seen: "section\nkey"
  IniSection* section = nullptr;
  std::string section_name;
  std::string* value = nullptr;  // the value a deeper-indented line continues
  size_t indent_level = 0;
  int lineno = 0;
  const auto refuse = [&](const std::string& what) {
    throw Error(ExitCode::kBadInput,
                fmt::format("{}:{}: {}; the AWS CLI refuses this file too", path, lineno, what),
                "see the AWS CLI's documentation of the shared config and credentials files");
  };
  for (const std::string_view line : lines_of(text)) {
    ++lineno;
    const std::string stripped = trim(line);
    if (!stripped.empty() && (stripped[0] == '#' || stripped[0] == ';')) continue;
    if (stripped.empty()) {
      if (value) *value += '\n';  // a blank line inside a value; trailing ones are dropped below
      continue;
    }
    const size_t indent = line.find_first_not_of(kSpace);
    if (value && indent > indent_level) {
      *value += '\n' + stripped;
      continue;
    }
    indent_level = indent;
    value = nullptr;
    const size_t close = stripped.rfind(']');
    if (stripped[0] == '[' && close != std::string::npos && close > 1) {
      section_name = stripped.substr(1, close - 1);
      if (section_name == kDefaultSection) {
        section = &defaults;
      } else {
        if (!section_names.insert(section_name).second) refuse(fmt::format("section [{}] appears twice", section_name));
        sections.emplace_back(section_name, IniSection());
        section = &sections.back().second;
      }
      continue;
    }
    if (!section) refuse("a line before the first [section]");
    const size_t divide = stripped.find_first_of("=:");
    if (divide == std::string::npos) refuse("neither a [section] nor a key = value");
    const std::string key = lower(trim(std::string_view(stripped).substr(0, divide)));
    if (key.empty()) refuse("a value without a key");
    if (!keys_seen.insert(section_name + '\n' + key).second)
      refuse(fmt::format("key {} appears twice in section [{}]", key, section_name));
    value = &((*section)[key] = trim(std::string_view(stripped).substr(divide + 1)));
  }
  IniSections out;
  for (auto& [name, keys] : sections) {
    for (const auto& [key, v] : defaults) keys.emplace(key, v);
    for (auto& [key, v] : keys) {
      v.erase(v.find_last_not_of(kSpace) + 1);  // botocore: rstrip() of the joined lines
      // A value on the lines below its key is a nested setting: each line "name = value".
      if (v.empty() || v[0] != '\n') continue;
      for (const std::string_view nested : lines_of(std::string_view(v).substr(1)))
        if (!trim(nested).empty() && nested.find('=') == std::string_view::npos)
          throw Error(ExitCode::kBadInput, fmt::format("{}: section [{}], key {}: a nested setting without '='; the AWS "
                                                       "CLI refuses this file too", path, name, key));
    }
    out.emplace_back(std::move(name), std::move(keys));
  }
  return out;
}

}  // namespace dlrun::remote
