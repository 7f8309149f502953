// Preemption (docs/design.md, "Preemption"): signals and cloud notices set one flag; the
// training loop checks it at step boundaries and around evaluations and saves, saves, and
// exits 75.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "config/options.h"

namespace dlrun::preempt {

/// A second signal less than this many seconds after the first is the same request delivered
/// twice (systemd's KillMode=control-group, Slurm, a launcher that forwards what the worker got
/// too): it changes nothing.
constexpr double kSameRequestS = 1.0;

/// Where the stop stands, for a second signal: before the stop's checkpoint is written and while
/// it is, a later signal (kSameRequestS or more after the first) exits at once; once it is
/// committed, nothing changes any more: the exit is 75.
enum class StopPhase { kRunning = 0, kWriting = 1, kCommitted = 2 };
void set_stop_phase(StopPhase phase);
/// Signals that changed nothing (the same request again, or after the commit).
int signals_ignored();
/// When the first signal arrived (wall seconds; 0: none yet) -- also when a notice asked first:
/// a launcher's kill timer runs from its signal, not from the notice.
double signal_time();

/// Install SIGTERM, SIGUSR1 and SIGINT handlers (SA_RESTART). A first signal only sets the
/// flag (and records which signal and when) — even after a notice already asked to stop; a
/// second signal exits the process at once with _exit(128+signo), unless it came within
/// kSameRequestS of the first or after the commit (StopPhase). SIGINT is handled like
/// SIGTERM; stop_signal() lets the loop print a message for Ctrl-C.
void install_signal_handlers();
/// Restore default dispositions (tests).
void uninstall_signal_handlers();
/// The dlrun executable calls this before any shared library's initialisers run (an
/// .preinit_array entry, src/main.cpp): LibTorch takes about a second to load, and a SIGTERM
/// that arrives then must still mean "stop and exit 75", not death by the default action. It
/// also unblocks the three signals, in case the parent started dlrun with them blocked.
void install_early_signal_handlers();
/// For every command other than `dlrun train`, which never polls the flag: restore the default
/// dispositions and, if a signal already arrived while loading, re-raise it so that the process
/// ends by it as it would have without the early handlers.
void release_early_signal_handlers();

/// Under scripts/dlrun-launch (DLRUN_LAUNCHER_PID set to the launcher's pid): ask the kernel to
/// SIGKILL this process when its parent dies (PR_SET_PDEATHSIG), and end it now if the launcher
/// is already gone. A worker whose launcher was killed has nobody to forward a stop and nowhere
/// to write, and would hold the run directory's lock against the requeued job. A malformed value
/// is ignored. Returns whether the death signal was set.
bool die_with_launcher();

/// True once a signal or a notice asked the run to stop.
bool stop_requested();
/// Ask to stop (used by notice watchers and tests). `reason` like "aws spot notice".
/// `notice_time` (wall seconds, 0: now): when the notice was given, if earlier than now -- the
/// stop deadline counts from it (an AWS instance-action names when the VM is taken).
void request_stop(const std::string& reason, double notice_time = 0);
/// What asked to stop ("SIGTERM", "aws notice: ...") and when (seconds since epoch; 0 if not).
/// The first cause wins: later requests do not change the reason or the time.
std::string stop_reason();
double stop_time();
/// The signal number when a signal asked first (SIGTERM, SIGUSR1, SIGINT); 0 otherwise.
int stop_signal();
/// Clear the flag (tests).
void reset();

/// Polls a cloud notice source on a background thread while alive; on a notice it calls
/// request_stop("<watch> notice: <detail>") and stops polling. watch=none starts nothing.
/// Endpoints default to the providers' metadata URLs (AWS spot/instance-action with an
/// IMDSv2 token, GCP instance/preempted, Azure Scheduled Events "Preempt"), but only when
/// the user configured preemption.watch. Without libcurl, aws/gcp/azure are a bad-input
/// error (exit 2); `file` always works. file without a path or poll_s <= 0 are bad
/// input too, thrown by the constructor.
///
/// What preemption.endpoint means for each watch:
///   aws    the metadata service's base URL (default "http://169.254.169.254"); trailing
///          '/' are dropped and dlrun appends "/latest/api/token" (PUT, IMDSv2 token) and
///          "/latest/meta-data/spot/instance-action" (GET). E.g. "http://127.0.0.1:8080".
///          Notice: 200 with a JSON object holding "action"; 404: none. If the token PUT
///          fails, the GET goes without a token (IMDSv1).
///   gcp    the full URL (default ".../computeMetadata/v1/instance/preempted"), sent with
///          "Metadata-Flavor: Google"; notice: 200 and body "TRUE".
///   azure  the full URL (default ".../metadata/scheduledevents?api-version=2020-07-01"),
///          sent with "Metadata: true"; notice: an Events[] entry with EventType "Preempt".
///   file   a path; notice: the path exists and was modified after this process started
///          (within 1 s: timestamps are coarse; its first line is the detail). An older file
///          is ignored (and logged once): it was a notice for an earlier process, e.g. the run
///          before a requeue.
/// HTTP requests: connect timeout 1 s, total 2 s, no redirects followed, no proxy; a
/// network error is "no notice" (logged once) and polling goes on.
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

/// The checks NoticeWatcher's constructor makes, without starting anything: a file source
/// has a path, HTTP sources have libcurl, poll_s > 0. Throws dlrun::Error (exit 2).
void check_notice_source(const PreemptionOptions& opts);

/// One poll, synchronously: true when the source reports a pending preemption.
/// `detail` receives the notice text. Network errors count as "no notice".
bool poll_once(NoticeSource watch, const std::string& endpoint, std::string* detail = nullptr);
/// The default endpoint of a provider ("" for file/none); see NoticeWatcher for the rule.
std::string default_endpoint(NoticeSource watch);

}  // namespace dlrun::preempt
