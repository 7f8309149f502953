// One poll of a notice source, with the transport error kept for the watcher's log.
// Internal to src/preempt; the public entry point is poll_once() in preempt.h.
#pragma once

#include <string>

namespace dlrun::preempt {

struct PollResult {
  bool notice = false;  ///< a preemption is pending
  std::string detail;   ///< the notice ("action=terminate time=...") when notice
  std::string error;    ///< why the source could not be read ("" when it answered)
};

/// Checks, without I/O, that `watch` is known, that file has a path, and that HTTP
/// sources have libcurl; throws dlrun::Error(2) otherwise.
void check_source(const std::string& watch, const std::string& endpoint);

/// Polls `watch` (aws | gcp | azure | file) at `endpoint` ("" = default_endpoint(watch)).
/// Throws dlrun::Error(2) for an unknown watch, or an HTTP watch without libcurl.
PollResult poll_source(const std::string& watch, const std::string& endpoint);

}  // namespace dlrun::preempt
