// The environment getter (see env.h).
#include "base/env.h"

#include <cstdlib>

namespace dlrun {

std::string env(const char* name) { return env_if_set(name).value_or(std::string()); }

std::string temp_dir() {
  const std::string t = env("TMPDIR");
  return t.empty() ? "/tmp" : t;
}

std::optional<std::string> env_if_set(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

}  // namespace dlrun
