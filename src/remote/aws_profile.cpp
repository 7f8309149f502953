// The shared files and their profile (see aws_profile.h).
#include "remote/aws_profile.h"

#include "base/env.h"
#include "base/error.h"
#include "base/fsutil.h"
#include "base/shell_words.h"
#include "base/strings.h"

namespace dlrun::remote {
namespace {

/// The file at `path` as sections; none when it is absent (botocore: ConfigNotFound).
IniSections read_ini(const std::string& path) {
  if (path.empty() || !fsutil::is_regular_file(path)) return {};
  std::string text;
  try {
    text = fsutil::read_file(path);
  } catch (const Error& e) {
    throw Error(ExitCode::kBadInput, fmt::format("{}: cannot read the AWS credentials file: {}", path, e.message()));
  }
  return parse_aws_ini(text, path);
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
  for (auto& [name, keys] : read_ini(p.credentials_file)) {
    if (name != p.name) continue;
    p.in_credentials = true;
    p.credentials = std::move(keys);
  }
  for (auto& [name, keys] : read_ini(p.config_file)) {
    const auto words = name.rfind("profile", 0) == 0 ? split_shell_words(name) : std::nullopt;
    const bool is_profile = words ? words->size() == 2 && (*words)[1] == p.name : name == "default" && p.name == name;
    if (!is_profile) continue;  // a later section of the same profile replaces an earlier one
    p.in_config = true;
    p.config = std::move(keys);
  }
  return p;
}

std::string ini_value(const IniSection& section, const std::string& key) {
  auto it = section.find(key);
  return it == section.end() ? std::string() : it->second;
}

std::string profile_region() { return ini_value(load_aws_profile().config, "region"); }

}  // namespace dlrun::remote
