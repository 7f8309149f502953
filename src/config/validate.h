// Cross-field checks that run after loading and before anything is allocated.
#pragma once

#include <string>
#include <vector>

#include "config/options.h"

namespace dlrun::config {

/// What validation needs to know about the launch.
struct LaunchContext {
  int world_size = 1;  ///< processes in the job (WORLD_SIZE)
};

/// Throws dlrun::Error (exit 2, with file/key/line) on the first violated rule. Returns
/// warnings for settings that are legal but probably not what the user meant.
std::vector<std::string> validate(const Config& cfg, const LaunchContext& ctx = {});

}  // namespace dlrun::config
