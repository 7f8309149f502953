// The two kinds of credential provider (see credentials.h): fixed keys, and credentials that a
// fetch hands out and that are fetched again ahead of their expiry. The sources' fetches are in
// web_identity.cpp and metadata_credentials.cpp; which source is used, in credential_chain.cpp.
#include "remote/credentials.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>

#include "base/clock.h"
#include "base/log.h"
#include "remote/s3_error.h"

namespace dlrun::remote {
namespace {

constexpr double kMaxEarly = 300;  // refresh at most 5 minutes before expiry ...
constexpr double kEarlyShare = 0.25;  // ... and at most a quarter of the lifetime before it

class Fixed : public CredentialProvider {
 public:
  Fixed(Credentials c, std::string source) : c_(std::move(c)), source_(std::move(source)) {}
  void expired(const Credentials&) override {}
  bool refreshable() const override { return false; }
  std::string source() const override { return source_; }

 protected:
  Credentials current(const std::atomic<bool>*) override { return c_; }

 private:
  Credentials c_;
  std::string source_;
};

class Refreshing : public CredentialProvider {
 public:
  Refreshing(CredentialFetch fetch, std::string source, std::function<double()> clock, double retry_s)
      : fetch_(std::move(fetch)), source_(std::move(source)), clock_(clock ? std::move(clock) : wall_now),
        retry_s_(retry_s) {}

  void expired(const Credentials& refused) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cur_ || cur_->access_key != refused.access_key || cur_->session_token != refused.session_token) return;
    cur_->expires = std::min(cur_->expires > 0 ? cur_->expires : 1.0, clock_());
    next_try_ = 0;
  }
  bool refreshable() const override { return true; }
  std::string source() const override { return source_; }

 protected:
  // The fetch runs outside the lock, so that a thread waiting for it can see its own cancel
  // flag, and one that holds valid credentials need not wait at all.
  Credentials current(const std::atomic<bool>* cancel) override {
    std::unique_lock<std::mutex> lock(mu_);
    double now = clock_();
    for (;; now = clock_()) {
      if (cur_ && !due(now)) return *cur_;
      // Being refreshed by another thread, or a refresh failed a moment ago: the current ones.
      if (usable(now) && (fetching_ || now < next_try_)) return *cur_;
      if (cancel && cancel->load())
        throw S3Error(fmt::format("credentials from {}: cancelled before they were fetched", source_), 0, kCancelled);
      if (!fetching_) break;
      done_.wait_for(lock, std::chrono::milliseconds(100));
    }
    fetching_ = true;
    lock.unlock();
    std::optional<Credentials> got;
    std::exception_ptr failed;
    try {
      got = fetch_(cancel);
    } catch (...) {
      failed = std::current_exception();
    }
    lock.lock();
    fetching_ = false;
    done_.notify_all();
    if (got) {
      cur_ = got;
      fetched_at_ = now;
      if (refreshes_++ > 0) log::debug("credentials from {} refreshed", source_);
      return *got;
    }
    try {
      std::rethrow_exception(failed);
    } catch (const S3Error& e) {
      // A cancelled fetch says nothing about the source: no retry delay, no warning.
      if (e.code() == kCancelled || !usable(clock_())) throw;
      next_try_ = clock_() + retry_s_;
      log::warn("cannot refresh the credentials from {} ({}); the current ones are used until they expire in {:.0f} s",
                source_, e.what(), cur_->expires - clock_());
      return *cur_;
    }
  }

 private:
  bool due(double now) const {
    if (cur_->expires <= 0) return false;
    const double early = std::min(kMaxEarly, kEarlyShare * std::max(0.0, cur_->expires - fetched_at_));
    return now >= cur_->expires - early;
  }
  bool usable(double now) const { return cur_ && (cur_->expires <= 0 || now < cur_->expires); }

  CredentialFetch fetch_;
  std::string source_;
  std::function<double()> clock_;
  double retry_s_;
  std::mutex mu_;
  std::condition_variable done_;  ///< a fetch ended
  bool fetching_ = false;         ///< a thread is fetching (outside the lock)
  std::optional<Credentials> cur_;
  double fetched_at_ = 0, next_try_ = 0;
  int refreshes_ = 0;
};

}  // namespace

std::shared_ptr<CredentialProvider> fixed_credentials(Credentials c, std::string source) {
  return std::make_shared<Fixed>(std::move(c), std::move(source));
}

std::shared_ptr<CredentialProvider> refreshing_credentials(CredentialFetch fetch, std::string source,
                                                           std::function<double()> clock, double retry_s) {
  return std::make_shared<Refreshing>(std::move(fetch), std::move(source), std::move(clock), retry_s);
}

}  // namespace dlrun::remote
