// The shared files and their profile (see aws_profile.h).
#include "remote/aws_profile.h"

#include "base/env.h"
#include "base/error.h"
#include "base/fsutil.h"
#include "base/strings.h"

namespace dlrun::remote {
namespace {

using IniFile = std::map<std::string, IniSection>;

/// AWS's INI files: [section], key = value, comments from '#' or ';' at a line's start.
/// Indented lines continue a nested setting (s3 = ...) and are skipped.
IniFile read_ini(const std::string& path) {
  IniFile out;
  if (!fsutil::is_regular_file(path)) return out;
  std::string text;
  try {
    text = fsutil::read_file(path);
  } catch (const Error& e) {
    throw Error(ExitCode::kBadInput, fmt::format("{}: cannot read the AWS credentials file: {}", path, e.message()));
  }
  IniSection* cur = nullptr;
  size_t at = 0;
  while (at < text.size()) {
    const size_t nl = text.find('\n', at);
    std::string line = text.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    at = nl == std::string::npos ? text.size() : nl + 1;
    const bool indented = !line.empty() && (line[0] == ' ' || line[0] == '\t');
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';' || indented) continue;
    if (line.front() == '[' && line.back() == ']') {
      cur = &out[trim(line.substr(1, line.size() - 2))];
      continue;
    }
    const auto eq = line.find('=');
    if (eq == std::string::npos || !cur) continue;
    (*cur)[lower(trim(line.substr(0, eq)))] = trim(line.substr(eq + 1));
  }
  return out;
}

std::string home_file(const char* var, const char* rel) {
  std::string p = env(var);
  if (!p.empty()) return p;
  const std::string home = env("HOME");
  return home.empty() ? std::string() : home + "/" + rel;
}

}  // namespace

AwsProfile load_aws_profile() {
  AwsProfile p;
  p.name = env("AWS_PROFILE");
  p.named = !p.name.empty();
  if (p.name.empty()) p.name = "default";
  p.credentials_file = home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  p.config_file = home_file("AWS_CONFIG_FILE", ".aws/config");
  const IniFile creds = p.credentials_file.empty() ? IniFile() : read_ini(p.credentials_file);
  const IniFile config = p.config_file.empty() ? IniFile() : read_ini(p.config_file);
  if (auto it = creds.find(p.name); it != creds.end()) {
    p.in_credentials = true;
    p.credentials = it->second;
  }
  // The config file names its sections "profile NAME", except [default].
  for (const std::string& s : {"profile " + p.name, p.name}) {
    if (s == p.name && p.name != "default") continue;
    if (auto it = config.find(s); it != config.end()) {
      p.in_config = true;
      p.config = it->second;
      break;
    }
  }
  return p;
}

std::string ini_value(const IniSection& section, const std::string& key) {
  auto it = section.find(key);
  return it == section.end() ? std::string() : it->second;
}

std::string profile_region() { return ini_value(load_aws_profile().config, "region"); }

}  // namespace dlrun::remote
