// The two clocks dlrun records: wall time (timestamps in metrics.jsonl, TensorBoard events,
// checkpoint manifests) and a monotonic clock (durations, throughput, ETA, save intervals).
#pragma once

#include <string>

namespace dlrun {

/// Seconds since the Unix epoch (system clock).
double wall_now();
/// Seconds on a monotonic clock (only differences mean anything).
double mono_now();
/// "20261123T101500Z": the current UTC time, sortable, for the names of things set aside.
std::string utc_stamp();
/// Wall time at which this process started (captured before main runs).
double process_start_wall();

}  // namespace dlrun
