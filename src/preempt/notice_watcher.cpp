// NoticeWatcher: a background thread that polls one notice source every poll_s seconds
// and turns the first notice into request_stop(). The destructor wakes the thread through
// a condition variable, so shutting down never waits for a poll interval (at most for one
// HTTP request in flight, bounded by its 2 s timeout).
#include <algorithm>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <thread>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "preempt/preempt.h"
#include "preempt/providers.h"

namespace dlrun::preempt {

struct NoticeWatcher::Impl {
  NoticeSource watch = NoticeSource::kNone;
  std::string endpoint;
  double poll_s = 5.0;
  double lead_s = 0;  ///< how long before the action the provider gives notice (AWS 120 s, Azure 30 s)
  double last_quiet = 0;  ///< when the last poll that answered without a notice was sent
  std::mutex mutex;
  std::condition_variable cv;
  bool stopping = false;
  std::thread thread;

  /// When the notice was given, from the time it names for the VM to be taken: the provider's
  /// warning (lead_s) before it. preemption.deadline_s counts from there, not from when a poll
  /// saw the notice (up to poll_s and a request later).
  double notice_time(double action_time) const {
    if (action_time <= 0 || lead_s <= 0) return 0;
    // Not before a poll that saw no notice: a clock that disagrees with the provider's must not
    // spend the whole deadline before the stop begins.
    const double t = std::max(action_time - lead_s, last_quiet), late = wall_now() - t;
    if (late > 1.5)
      log::warn("the notice names {:+.1f} s from now for the VM to be taken: it was given {:.1f} s ago, and "
                "preemption.deadline_s counts from then",
                action_time - wall_now(), late);
    return t;
  }

  void run() {
    bool reported_error = false, reported_note = false;
    const std::string name = name_of(watch);
    for (;;) {
      PollResult r;
      const double asked = wall_now();
      try {
        r = poll_source(watch, endpoint);
      } catch (const std::exception& e) {  // checked in the constructor; keep the thread alive
        r.error = e.what();
      }
      if (r.notice) {
        log::warn("preemption notice from {} ({}): {}", name, endpoint, r.detail);
        request_stop(name + " notice: " + r.detail, notice_time(r.action_time));
        return;
      }
      if (r.error.empty()) last_quiet = asked;
      if (!r.error.empty() && !reported_error) {  // once: a misconfigured endpoint, not spam
        log::warn("preemption watch {}: {} (will keep polling every {}s)", name, r.error, poll_s);
        reported_error = true;
      }
      if (!r.note.empty() && !reported_note) {
        log::warn("preemption watch {}: {}", name, r.note);
        reported_note = true;
      }
      std::unique_lock<std::mutex> lock(mutex);
      if (cv.wait_for(lock, std::chrono::duration<double>(poll_s), [this] { return stopping; }))
        return;
    }
  }
};

void check_notice_source(const PreemptionOptions& opts) {
  if (opts.watch == NoticeSource::kNone) return;
  DLRUN_CHECK_INPUT(opts.poll_s > 0, "preemption.poll_s: must be > 0, got {}", opts.poll_s);
  check_source(opts.watch, opts.endpoint.empty() ? default_endpoint(opts.watch) : opts.endpoint);
}

NoticeWatcher::NoticeWatcher(const PreemptionOptions& opts) {
  if (opts.watch == NoticeSource::kNone) return;
  check_notice_source(opts);  // fails at start-up (exit 2), not inside the thread
  auto impl = std::make_unique<Impl>();
  impl->watch = opts.watch;
  impl->endpoint = opts.endpoint.empty() ? default_endpoint(opts.watch) : opts.endpoint;
  impl->poll_s = opts.poll_s;
  PreemptionOptions provider = opts;
  provider.deadline_s = std::numeric_limits<double>::quiet_NaN();  // auto: the provider's warning
  impl->lead_s = provider.deadline_or_default();
  log::info("watching for preemption notices: {} at {} every {}s", name_of(impl->watch), impl->endpoint,
            impl->poll_s);
  Impl* p = impl.get();
  impl->thread = std::thread([p] { p->run(); });
  impl_ = std::move(impl);
}

NoticeWatcher::~NoticeWatcher() {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::string NoticeWatcher::endpoint() const { return impl_ ? impl_->endpoint : std::string(); }

}  // namespace dlrun::preempt
