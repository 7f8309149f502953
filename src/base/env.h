// Reading the process environment. Every folder reads a few variables (AWS's, DLRUN_*); these
// are the one getter, so that "unset" and "set but empty" mean the same thing everywhere they
// should, and differ only where a caller asks for the difference.
#pragma once

#include <optional>
#include <string>

namespace dlrun {

/// The value of environment variable `name`; "" when it is unset or empty.
std::string env(const char* name);

/// The value of `name`, empty values included; nullopt only when it is unset.
std::optional<std::string> env_if_set(const char* name);

/// Where temporary files go: $TMPDIR, or /tmp when it is unset or empty.
std::string temp_dir();

}  // namespace dlrun
