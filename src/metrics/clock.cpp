// The two clocks the run directory records: wall time (timestamps in metrics.jsonl and
// TensorBoard events) and a monotonic clock (durations, throughput, ETA).
#include "metrics/writers.h"

#include <chrono>

namespace dlrun::metrics {

double wall_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

double mono_now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace dlrun::metrics
