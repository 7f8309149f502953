// The checkpoint writer: training hands over a host snapshot and goes on while a background
// thread serializes, hashes and commits it, then applies retention. One write at a time:
// save() first waits for the previous one (that wait is what training pays; it is measured).
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "base/log.h"
#include "checkpoint/checkpoint.h"

namespace dlrun::ckpt {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

struct Writer::Impl {
  std::string dir;
  CheckpointOptions opts;
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Snapshot> pending;  ///< handed over, not yet picked up by the thread
  double pending_wait_s = 0;
  bool busy = false;                ///< the thread is writing
  bool stop = false;
  std::exception_ptr error;         ///< failure of the last background write
  Stats last;
  std::function<void(const Stats&)> on_commit;
  std::function<std::vector<std::string>()> in_use;
  std::thread thread;

  /// Write, commit, retain; returns the stats (throws on failure).
  Stats write(const Snapshot& snap, double wait_s) {
    const auto t0 = std::chrono::steady_clock::now();
    Stats s;
    s.path = commit(snap, dir);
    s.step = snap.step;
    s.wait_s = wait_s;
    if (on_commit) on_commit(s);
    try {
      apply_retention(dir, opts.keep_last, opts.keep_every, s.path, in_use ? in_use() : std::vector<std::string>{});
    } catch (const std::exception& e) {
      log::warn("checkpoint retention in {} failed: {}", dir, e.what());
    }
    s.write_s = seconds_since(t0);
    return s;
  }

  void run() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || pending.has_value(); });
      if (!pending) return;  // stop requested and nothing left
      Snapshot snap = std::move(*pending);
      pending.reset();
      const double wait_s = pending_wait_s;
      busy = true;
      lock.unlock();
      std::exception_ptr err;
      Stats s;
      try {
        s = write(snap, wait_s);
      } catch (...) {
        err = std::current_exception();
      }
      lock.lock();
      busy = false;
      if (err) error = err;
      else last = s;
      cv.notify_all();
    }
  }

  /// With `lock` held: block until nothing is pending or being written.
  void wait_idle(std::unique_lock<std::mutex>& lock) {
    cv.wait(lock, [&] { return !busy && !pending.has_value(); });
  }

  /// With `mu` held: rethrow (once) the failure of the last background write.
  void rethrow() {
    if (!error) return;
    auto e = error;
    error = nullptr;
    std::rethrow_exception(e);
  }
};

Writer::Writer(std::string checkpoints_dir, CheckpointOptions opts) : impl_(std::make_unique<Impl>()) {
  impl_->dir = std::move(checkpoints_dir);
  impl_->opts = std::move(opts);
}

Writer::~Writer() {
  try {
    wait();
  } catch (const std::exception& e) {
    log::error("checkpoint write failed: {}", e.what());
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

void Writer::save(Snapshot snap) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->wait_idle(lock);
  const double wait_s = seconds_since(t0);
  if (!impl_->opts.async) {
    lock.unlock();
    Stats s = impl_->write(snap, wait_s);
    lock.lock();
    impl_->last = s;
    return;
  }
  // The snapshot is queued even when the previous background write failed: that failure is
  // rethrown after, and the caller decides whether it ends the run (checkpoint.on_error).
  std::exception_ptr earlier = impl_->error;
  impl_->error = nullptr;
  if (!impl_->thread.joinable()) impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
  impl_->pending = std::move(snap);
  impl_->pending_wait_s = wait_s;
  impl_->cv.notify_all();
  if (earlier) std::rethrow_exception(earlier);
}

void Writer::wait() {
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->wait_idle(lock);
  impl_->rethrow();
}

void Writer::on_commit(std::function<void(const Stats&)> callback) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->on_commit = std::move(callback);
}

void Writer::in_use(std::function<std::vector<std::string>()> callback) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->in_use = std::move(callback);
}

Writer::Stats Writer::last() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->last;
}

}  // namespace dlrun::ckpt
