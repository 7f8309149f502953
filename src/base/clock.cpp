// Clocks (see clock.h).
#include "base/clock.h"

#include <chrono>
#include <ctime>

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

}  // namespace dlrun
