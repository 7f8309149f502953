// One poll of a notice source, with the transport error kept for the watcher's log.
// Internal to src/preempt; the public entry point is poll_once() in preempt.h.
#pragma once

#include <string>

#include "config/options.h"

namespace dlrun::preempt {

struct PollResult {
  bool notice = false;  ///< a preemption is pending
  std::string detail;   ///< the notice ("action=terminate time=...") when notice
  std::string error;    ///< why the source could not be read ("" when it answered)
  std::string note;     ///< something the user should know that is not an error (a stale notice)
  /// When the provider takes the VM, as the notice says (wall seconds; 0: it does not say or
  /// could not be read): AWS instance-action "time", Azure's "NotBefore".
  double action_time = 0;
};

/// "2026-11-25T08:22:00Z" (ISO 8601, read by base/iso8601.h: a fraction or an offset allowed;
/// AWS) or "Wed, 25 Nov 2026 08:22:00 GMT" (RFC 1123; Azure) in seconds since the epoch; 0 when
/// it is neither, or names a time that does not exist (31 February, minute 60).
double parse_notice_time(const std::string& text);

/// Checks, without I/O, that `watch` is a source, that file has a path, and that HTTP
/// sources have libcurl; throws dlrun::Error(2) otherwise.
void check_source(NoticeSource watch, const std::string& endpoint);

/// What an HTTP source's answer (`status`, `body`, from `url`) says: a notice with its detail,
/// no notice, or an error. Pure: no I/O (what the notice fuzz target feeds).
PollResult parse_answer(NoticeSource watch, int status, const std::string& body, const std::string& url);

/// Polls `watch` (aws | gcp | azure | file) at `endpoint` ("" = default_endpoint(watch)).
/// Throws dlrun::Error(2) for watch none, or an HTTP watch without libcurl.
PollResult poll_source(NoticeSource watch, const std::string& endpoint);

}  // namespace dlrun::preempt
