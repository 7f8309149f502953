// The background uploader of committed checkpoints (see uploader.h).
#include "checkpoint/uploader.h"

#include <algorithm>
#include <chrono>

#include "base/clock.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/fsutil.h"
#include "base/log.h"

namespace dlrun::ckpt {

Uploader::Uploader(RemoteStore& store, CheckpointOptions opts) : store_(store), opts_(std::move(opts)) {
  thread_ = std::thread([this] { run(); });
}

Uploader::~Uploader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    store_.cancel(true);
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  store_.cancel(false);
}

void Uploader::supersede_older(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  // The older upload, or the remote retention after it: both can wait for the next upload.
  if (busy_ && uploading_step_ < step && pending_ && pending_->second == step) {
    superseded_ = true;
    store_.cancel(true);
  }
}

void Uploader::submit(const std::string& local_dir, int64_t step) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = std::make_pair(local_dir, step);  // a newer checkpoint replaces one still waiting
  }
  cv_.notify_all();
}

bool Uploader::wait(double deadline, bool retention) {
  std::unique_lock<std::mutex> lock(mu_);
  auto idle = [&] { return (!busy_ || (retaining_ && !retention)) && !pending_; };
  if (deadline <= 0) {
    cv_.wait(lock, idle);
    return true;
  }
  const double left = deadline - mono_now();
  return left > 0 ? cv_.wait_for(lock, std::chrono::duration<double>(left), idle) : idle();
}

std::vector<std::string> Uploader::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  if (!uploading_.empty()) out.push_back(uploading_);
  if (pending_) out.push_back(pending_->first);
  return out;
}

std::vector<Uploader::Result> Uploader::drain() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Result> out;
  out.swap(results_);
  return out;
}

Uploader::Totals Uploader::totals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return totals_;
}

void Uploader::keep_history(const std::string& run_dir, double every_s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    history_dir_ = run_dir;
    history_every_s_ = every_s;
    history_next_ = every_s > 0 ? mono_now() + every_s : 0;
  }
  cv_.notify_all();
}

bool Uploader::history_now(double deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (history_dir_.empty()) return true;
  const int64_t ticket = ++history_asked_;
  cv_.notify_all();
  auto done = [&] { return history_done_ >= ticket || stop_; };
  if (deadline <= 0) {
    cv_.wait(lock, done);
  } else {
    const double left = deadline - mono_now();
    if (left <= 0 || !cv_.wait_for(lock, std::chrono::duration<double>(left), done)) return false;
  }
  return history_done_ >= ticket && history_ok_;
}

void Uploader::upload_history(std::unique_lock<std::mutex>& lock) {
  const std::string dir = history_dir_;
  const int64_t asked = history_asked_;
  lock.unlock();
  bool ok = false;
  try {
    store_.put_history(dir);
    ok = true;
  } catch (const remote::S3Error& e) {
    if (e.code() != remote::kCancelled) log::warn("the run's history could not be uploaded to {}: {}", store_.url().str(), e.what());
  } catch (const std::exception& e) {
    log::warn("the run's history could not be uploaded to {}: {}", store_.url().str(), e.what());
  }
  lock.lock();
  history_done_ = std::max(history_done_, asked);
  history_ok_ = ok;
  if (history_every_s_ > 0) history_next_ = mono_now() + history_every_s_;
  cv_.notify_all();
}

void Uploader::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // Woken by a checkpoint, a stop, a history asked for, or the history's period.
    auto history_due = [&] {
      return !history_dir_.empty() &&
             (history_asked_ > history_done_ || (history_next_ > 0 && mono_now() >= history_next_));
    };
    auto ready = [&] { return stop_ || pending_.has_value() || history_due(); };
    if (history_next_ > 0)
      cv_.wait_for(lock, std::chrono::duration<double>(std::max(0.0, history_next_ - mono_now())), ready);
    else
      cv_.wait(lock, ready);
    if (stop_) return;
    if (!pending_) {
      if (history_due()) upload_history(lock);
      continue;
    }
    const auto [dir, step] = *pending_;
    pending_.reset();
    busy_ = true;
    uploading_ = dir;
    uploading_step_ = step;
    for (int attempt = 1; attempt <= kAttempts; ++attempt) {
      superseded_ = false;
      store_.cancel(false);  // under the lock: supersede_older() sets it only while we upload
      lock.unlock();
      Result r;
      r.step = step;
      r.url = store_.url().str(dir_name(step));
      r.attempt = attempt;
      bool transient = true;
      const double t0 = mono_now();
      try {
        r.bytes = store_.upload(dir);
        r.seconds = mono_now() - t0;
        r.ok = r.final = true;
      } catch (const remote::S3Error& e) {
        r.error = e.what();
        transient = e.transient();
      } catch (const std::exception& e) {
        r.error = e.what();
        transient = false;
      }
      r.wall_time = wall_now();
      lock.lock();
      if (r.ok) {
        ++totals_.uploaded;
        totals_.last_step = step;
        totals_.last_url = r.url;
        totals_.bytes += r.bytes;
        totals_.seconds += r.seconds;
        totals_.last_seconds = r.seconds;
        results_.push_back(r);
        retaining_ = true;  // the checkpoint is up: a stop waiting for it may go on
        cv_.notify_all();
        if (!history_dir_.empty()) upload_history(lock);  // the records up to this checkpoint, beside it
        lock.unlock();
        try {
          for (const auto& gone : store_.apply_retention(opts_.keep_last, opts_.keep_every, step))
            log::debug("remote retention: removed {}", store_.url().str(gone));
        } catch (const remote::S3Error& e) {
          if (e.code() != remote::kCancelled) log::warn("remote retention in {} failed: {}", store_.url().str(), e.what());
        } catch (const std::exception& e) {
          log::warn("remote retention in {} failed: {}", store_.url().str(), e.what());
        }
        lock.lock();
        retaining_ = false;
        break;
      }
      if (stop_) break;  // abandoned by the destructor: nothing to report any more
      if (superseded_) {  // a stop wants a newer checkpoint up first
        log::info("upload of step {} abandoned for the newer checkpoint", step);
        break;
      }
      ++totals_.failed_attempts;
      totals_.last_error = r.error;
      r.final = !transient || attempt == kAttempts;
      r.retry_in_s = r.final ? 0 : std::min(60.0, static_cast<double>(1 << (attempt - 1)));
      if (r.final) ++totals_.given_up;
      results_.push_back(r);
      if (r.final) break;
      // Back off; a stop or a newer checkpoint ends the wait (the newer one supersedes this).
      if (cv_.wait_for(lock, std::chrono::duration<double>(r.retry_in_s), [&] { return stop_ || pending_.has_value(); }))
        break;
    }
    busy_ = false;
    uploading_.clear();
    uploading_step_ = -1;
    cv_.notify_all();
  }
}

}  // namespace dlrun::ckpt
