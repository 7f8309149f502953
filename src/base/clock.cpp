// Clocks (see clock.h).
#include "base/clock.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

namespace dlrun {

double wall_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

double mono_now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string utc_stamp() {
  const std::time_t t = static_cast<std::time_t>(wall_now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

namespace {
// Dynamic initialization of this namespace-scope constant runs before main(); it depends on
// nothing else, so its order among other static initializers does not matter.
const double g_process_start = wall_now();
}  // namespace

double process_start_wall() { return g_process_start; }

double process_exec_wall() {
  // /proc/self/stat's 22nd field: when the process started, in clock ticks after boot on the
  // clock CLOCK_BOOTTIME reads; its age now, subtracted from the wall clock now.
  std::ifstream stat("/proc/self/stat");
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return g_process_start;
  std::istringstream fields(line.substr(paren + 1));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i != 22) continue;
    const long ticks = ::sysconf(_SC_CLK_TCK);
    timespec boot{};
    if (ticks <= 0 || ::clock_gettime(CLOCK_BOOTTIME, &boot) != 0) break;
    const double age = static_cast<double>(boot.tv_sec) + 1e-9 * static_cast<double>(boot.tv_nsec) -
                       std::strtod(field.c_str(), nullptr) / static_cast<double>(ticks);
    const double t = wall_now() - age;
    return t <= g_process_start + 0.02 && t > g_process_start - 600 ? std::min(t, g_process_start) : g_process_start;
  }
  return g_process_start;
}

}  // namespace dlrun
