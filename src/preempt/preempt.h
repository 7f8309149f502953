// Preemption (DESIGN.md §5): signals and cloud notices set one flag; the training loop
// checks it at step boundaries, saves, and exits 75.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "config/options.h"

namespace dlrun::preempt {

/// Install SIGTERM, SIGUSR1 and SIGINT handlers. A first signal only sets the flag (and
/// records which signal and when); a second one exits the process at once with 128+signo.
void install_signal_handlers();
/// Restore default dispositions (tests).
void uninstall_signal_handlers();

/// True once a signal or a notice asked the run to stop.
bool stop_requested();
/// Ask to stop (used by notice watchers and tests). `reason` like "aws spot notice".
void request_stop(const std::string& reason);
/// What asked to stop ("SIGTERM", "aws notice: ...") and when (seconds since epoch; 0 if not).
std::string stop_reason();
double stop_time();
/// Clear the flag (tests).
void reset();

/// Polls a cloud notice source on a background thread while alive; on a notice it calls
/// request_stop(). watch=none starts nothing. Endpoints default to the providers' metadata
/// URLs (AWS spot/instance-action with an IMDSv2 token, GCP instance/preempted, Azure
/// Scheduled Events "Preempt"), but only when the user configured preemption.watch.
/// Without libcurl, aws/gcp/azure are a bad-input error (exit 2); `file` always works.
class NoticeWatcher {
 public:
  explicit NoticeWatcher(const PreemptionOptions& opts);
  ~NoticeWatcher();  ///< stops and joins the thread
  /// The URL or path being watched ("" when none).
  std::string endpoint() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// One poll, synchronously: true when the source reports a pending preemption.
/// `detail` receives the notice text. Network errors count as "no notice".
bool poll_once(const std::string& watch, const std::string& endpoint, std::string* detail = nullptr);
/// The default endpoint of a provider ("" for file/none).
std::string default_endpoint(const std::string& watch);

}  // namespace dlrun::preempt
