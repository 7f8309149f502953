// Implementation of the rank-aware logger (see log.h).
#include "base/log.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "base/env.h"

namespace dlrun::log {
namespace {
int g_rank = 0;
int g_world = 1;
Level g_level = Level::kInfo;
std::mutex g_mutex;
}  // namespace

void set_rank(int rank, int world_size) { g_rank = rank; g_world = world_size; }
int rank() { return g_rank; }
void set_level(Level level) { g_level = level; }

void init_from_env() {
  if (const std::string s = env("DLRUN_LOG_LEVEL"); !s.empty()) {
    if (s == "debug") g_level = Level::kDebug;
    else if (s == "info") g_level = Level::kInfo;
    else if (s == "warn") g_level = Level::kWarn;
    else if (s == "error") g_level = Level::kError;
  }
}

void write(Level level, bool rank0_only, std::string_view message) {
  if (level < g_level) return;
  if (rank0_only && g_rank != 0) return;
  // Other ranks say only what is wrong (their info lines would repeat rank 0's), unless
  // DLRUN_LOG_LEVEL=debug asks for everything.
  if (g_rank != 0 && level < Level::kWarn && g_level != Level::kDebug) return;
  const char* tag = level == Level::kWarn ? "warning: " : level == Level::kError ? "error: " : "";
  // dlrun-launch prefixes every line with "[rank N] " already: no second rank in the prefix.
  static const bool launcher_names_rank = std::getenv("DLRUN_LAUNCHER_PID") != nullptr;
  std::string prefix =
      g_world > 1 && !launcher_names_rank ? fmt::format("dlrun[r{}]: ", g_rank) : std::string("dlrun: ");
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fputs(fmt::format("{}{}{}\n", prefix, tag, message).c_str(), stderr);
  std::fflush(stderr);
}

}  // namespace dlrun::log
