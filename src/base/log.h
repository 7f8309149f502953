// Rank-aware logging through fmt. log0 logs on rank 0 only; other ranks print warnings and
// errors only (everything with DLRUN_LOG_LEVEL=debug).
// Lines go to stderr ("dlrun: ..." on one process, "dlrun[r3]: ..." with several), so
// stdout stays clean for machine-readable output (`config show`, `ckpt list --json`).
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace dlrun::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

/// Set once at start-up (from the environment); used in the line prefix and by log0.
void set_rank(int rank, int world_size);
int rank();
/// Minimum level printed; DLRUN_LOG_LEVEL=debug|info|warn|error sets it at start-up.
void set_level(Level level);
void init_from_env();

void write(Level level, bool rank0_only, std::string_view message);

template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... a) { write(Level::kInfo, false, fmt::format(f, std::forward<Args>(a)...)); }
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... a) { write(Level::kWarn, false, fmt::format(f, std::forward<Args>(a)...)); }
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... a) { write(Level::kError, false, fmt::format(f, std::forward<Args>(a)...)); }
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... a) { write(Level::kDebug, false, fmt::format(f, std::forward<Args>(a)...)); }

}  // namespace dlrun::log

namespace dlrun::log0 {
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... a) { log::write(log::Level::kInfo, true, fmt::format(f, std::forward<Args>(a)...)); }
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... a) { log::write(log::Level::kWarn, true, fmt::format(f, std::forward<Args>(a)...)); }
}  // namespace dlrun::log0
