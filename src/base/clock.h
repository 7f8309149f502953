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
/// Wall time at which the kernel started this process (/proc: its start time after boot, plus
/// the boot time; 10 ms resolution): before the dynamic loader mapped LibTorch, which
/// process_start_wall() comes after. process_start_wall() where /proc cannot say.
double process_exec_wall();

}  // namespace dlrun
