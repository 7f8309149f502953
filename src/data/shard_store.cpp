// The fetching store (shard_store.h): shards fetched ahead in background threads, verified
// against the index, kept in a bounded cache, an unreachable service retried.
#include "data/shard_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "base/clock.h"
#include "base/error.h"
#include "base/fsutil.h"
#include "base/log.h"
#include "base/sha256.h"
#include "remote/s3_error.h"

namespace dlrun::data {

using fsutil::is_regular_file;
using fsutil::make_dirs;
using fsutil::rename_durable;

namespace {


uint64_t size_of(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<uint64_t>(n);
}

/// Reads n bytes at offset of an open descriptor; throws naming `shown`.
void pread_all(int fd, uint64_t offset, size_t n, char* buf, const std::string& shown) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, buf + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    DLRUN_CHECK_INPUT(r > 0, "shard {}: cannot read {} bytes at byte {} (the file is shorter, or unreadable)", shown,
                      n, offset + done);
    done += static_cast<size_t>(r);
  }
}

}  // namespace

// ---- ShardFile ----------------------------------------------------------------------------

ShardFile::~ShardFile() { ::close(fd_); }

std::vector<uint8_t> ShardFile::read(uint64_t offset, uint64_t n) const {
  std::vector<uint8_t> out(n);
  pread_all(fd_, offset, n, reinterpret_cast<char*>(out.data()), shown_);
  return out;
}

// ---- ShardStore ---------------------------------------------------------------------------

struct ShardStore::Impl {
  enum class State { kIdle, kQueued, kFetching, kReady, kFailed };
  struct Slot {
    State state = State::kIdle;
    std::shared_ptr<const ShardFile> file;
    std::exception_ptr error;
    uint64_t last_use = 0;
    bool cached_copy = false;  // a file in the cache (a remote shard's copy)
    bool verified = false;     // hashed against the index in this process
    int waiters = 0;           // open() calls waiting for it: not evicted meanwhile
  };
  std::unique_ptr<ShardSource> src;
  ShardIndex index;  // names, sizes and SHA-256s only
  StoreOptions opts;
  std::string root;  // where remote copies live
  bool remote = false;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<Slot> slots;
  std::deque<int> queue;
  std::set<int> protect;
  uint64_t clock = 0, cached = 0;
  bool warned_small = false;
  Counts counts;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;

  std::string shown(int i) const { return src->describe() + "/" + index.shards[static_cast<size_t>(i)].url; }
  std::string copy_path(int i) const { return root + "/" + index.shards[static_cast<size_t>(i)].url; }

  /// Verified local path of shard i (runs in a fetch thread, without the lock).
  std::string fetch(int i) {
    const ShardEntry& e = index.shards[static_cast<size_t>(i)];
    std::string local = src->local_path(e.url);
    if (!local.empty()) {
      uint64_t n = 0;
      const std::string sha = sha256_file(local, &n);
      DLRUN_CHECK_INPUT(sha == e.sha256 && n == e.filesize,
                        "shard {} does not match its index: {} bytes with SHA-256 {}, the index says {} bytes with {} "
                        "(rebuild the index: delete the cached index, or run `dlrun data verify`)",
                        local, n, sha.substr(0, 16), e.filesize, e.sha256.substr(0, 16));
      return local;
    }
    const std::string path = copy_path(i);
    if (is_regular_file(path)) {  // a copy from before: hashed once before it is trusted
      uint64_t n = 0;
      if (sha256_file(path, &n) == e.sha256 && n == e.filesize) {
        std::lock_guard<std::mutex> lock(mu);
        ++counts.cache_hits;
        return path;
      }
      std::remove(path.c_str());
    }
    make_dirs(fsutil::dir_part(path));
    const std::string part = fmt::format("{}.part.{}.{}", path, ::getpid(), i);
    for (int attempt = 0;; ++attempt) {
      const std::string sha = download_retrying(i, part);
      if (sha == e.sha256 && size_of(part) == e.filesize) break;
      std::remove(part.c_str());
      DLRUN_CHECK_INPUT(attempt == 0, "shard {} does not match its index after two downloads (SHA-256 {}, the index says {})",
                        shown(i), sha.substr(0, 16), e.sha256.substr(0, 16));
      log::warn("shard {} does not match its index (SHA-256 {}); fetching it again", shown(i), sha.substr(0, 16));
      std::lock_guard<std::mutex> lock(mu);
      ++counts.refetches;
    }
    rename_durable(part, path);
    std::lock_guard<std::mutex> lock(mu);
    ++counts.downloads;
    return path;
  }

  std::string download_retrying(int i, const std::string& part) {
    double deadline = -1, wait = 0.5;
    while (true) {
      try {
        return src->download(index.shards[static_cast<size_t>(i)].url, part);
      } catch (const remote::S3Error& e) {
        if (stop) throw Error(ExitCode::kRuntime, "shard fetch cancelled");
        DLRUN_CHECK_INPUT(e.transient(), "shard {}: the store refused it: {}", shown(i), e.what());
        const double now = mono_now();
        if (deadline < 0) deadline = now + opts.retry_s;
        if (now >= deadline)
          throw StoreUnavailable(ExitCode::kRuntime,
                                 fmt::format("shard {}: the store was unreachable for {:.0f} s (data.retry_s): {}",
                                             shown(i), opts.retry_s, e.what()));
        if (wait == 0.5) log::warn("shard {}: {}; retrying for up to {:.0f} s", shown(i), e.what(), opts.retry_s);
        {
          std::lock_guard<std::mutex> lock(mu);
          ++counts.retries;
        }
        const double nap = std::min(wait, deadline - now);
        for (double slept = 0; slept < nap && !stop; slept += 0.05)
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        wait = std::min(wait * 2, 5.0);
      }
    }
  }

  void evict_locked() {
    if (!remote || opts.cache_limit_bytes == 0) return;
    while (cached > opts.cache_limit_bytes) {
      int victim = -1;
      for (size_t i = 0; i < slots.size(); ++i) {
        const Slot& s = slots[i];
        if (!s.cached_copy || (s.state != State::kReady && s.state != State::kIdle) || s.waiters > 0 ||
            protect.count(static_cast<int>(i)))
          continue;
        if (victim < 0 || s.last_use < slots[static_cast<size_t>(victim)].last_use) victim = static_cast<int>(i);
      }
      if (victim < 0) {
        if (!warned_small) {
          log::warn("data.cache_limit_gb ({:.1f} MB) is smaller than the shards in use ({:.1f} MB): the cache holds "
                    "them and no more",
                    opts.cache_limit_bytes / 1e6, cached / 1e6);
          warned_small = true;
        }
        return;
      }
      Slot& s = slots[static_cast<size_t>(victim)];
      std::remove(copy_path(victim).c_str());  // open readers keep their descriptor
      cached -= index.shards[static_cast<size_t>(victim)].filesize;
      s = Slot{};
    }
  }

  void worker() {
    while (true) {
      int i = -1;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || !queue.empty(); });
        if (stop) return;
        i = queue.front();
        queue.pop_front();
        Slot& slot = slots[static_cast<size_t>(i)];
        if (slot.state != State::kQueued) continue;
        slot.state = State::kFetching;
        if (remote && !slot.cached_copy) {  // room is made before the download, not after it
          cached += index.shards[static_cast<size_t>(i)].filesize;
          slot.cached_copy = true;
          evict_locked();
        }
      }
      std::string path;
      std::exception_ptr err;
      try {
        path = fetch(i);
      } catch (...) {
        err = std::current_exception();
      }
      std::shared_ptr<const ShardFile> file;
      if (!err) {
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
          err = std::make_exception_ptr(Error(ExitCode::kRuntime, fmt::format("cannot open shard {}", path)));
        } else {
          file = std::make_shared<ShardFile>(fd, shown(i));
        }
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        Slot& s = slots[static_cast<size_t>(i)];
        if (err) {
          s.state = State::kFailed;
          s.error = err;
          if (remote && s.cached_copy) {  // the room made for it is given back
            cached -= index.shards[static_cast<size_t>(i)].filesize;
            s.cached_copy = false;
          }
        } else {
          s.state = State::kReady;
          s.file = file;
          s.verified = true;
          s.last_use = ++clock;
          if (remote) counts.peak_cached_bytes = std::max(counts.peak_cached_bytes, cached);
        }
      }
      cv.notify_all();
    }
  }
};

ShardStore::ShardStore(std::unique_ptr<ShardSource> src, const ShardIndex& index, StoreOptions opts)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.src = std::move(src);
  for (const ShardEntry& e : index.shards) {  // what fetching needs: not the per-sample tables the dataset keeps
    ShardEntry shard;
    shard.url = e.url;
    shard.filesize = e.filesize;
    shard.sha256 = e.sha256;
    m.index.shards.push_back(std::move(shard));
  }
  m.opts = std::move(opts);
  m.slots.resize(index.shards.size());
  m.root = cache_root(m.opts.cache_dir, *m.src);
  m.remote = !index.shards.empty() && m.src->local_path(index.shards[0].url).empty();
  m.src->set_cancel(&m.stop);
  if (m.remote)  // copies left by an earlier run count against the limit from the start
    for (size_t i = 0; i < m.slots.size(); ++i)
      if (is_regular_file(m.copy_path(static_cast<int>(i)))) {
        m.slots[i].cached_copy = true;
        m.cached += size_of(m.copy_path(static_cast<int>(i)));
      }
  for (int t = 0; t < std::max(1, m.opts.threads); ++t) m.threads.emplace_back([&m] { m.worker(); });
}

ShardStore::~ShardStore() {
  Impl& m = *impl_;
  m.stop = true;
  m.cv.notify_all();
  for (auto& t : m.threads) t.join();
  if (m.remote && (m.counts.downloads > 0 || m.counts.cache_hits > 0))
    log::info("shards of {}: {} downloaded ({} again after failing verification, {} retried requests), {} reused "
              "from the cache; cache {:.1f} MB now, {:.1f} MB at most (limit {:.1f} MB)",
              m.src->describe(), m.counts.downloads, m.counts.refetches, m.counts.retries, m.counts.cache_hits,
              m.cached / 1e6, m.counts.peak_cached_bytes / 1e6, m.opts.cache_limit_bytes / 1e6);
}

std::shared_ptr<const ShardFile> ShardStore::open(int i) {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.mu);
  Impl::Slot& s = m.slots[static_cast<size_t>(i)];
  if (s.state == Impl::State::kQueued) {  // needed now: to the front
    m.queue.erase(std::remove(m.queue.begin(), m.queue.end(), i), m.queue.end());
    m.queue.push_front(i);
  }
  ++s.waiters;
  struct Leave {
    int& n;
    ~Leave() { --n; }
  } leave{s.waiters};
  while (s.state != Impl::State::kReady && s.state != Impl::State::kFailed) {
    if (s.state == Impl::State::kIdle) {  // never asked for, or evicted before this reader came
      s.state = Impl::State::kQueued;
      m.queue.push_front(i);
      m.cv.notify_all();
    }
    m.cv.wait_for(lock, std::chrono::milliseconds(100));
    if (m.opts.interrupted && m.opts.interrupted())
      throw StopWhileWaiting(ExitCode::kRuntime, fmt::format("stop requested while waiting for shard {}", m.shown(i)));
  }
  if (s.state == Impl::State::kFailed) std::rethrow_exception(s.error);
  s.last_use = ++m.clock;
  return s.file;
}

void ShardStore::want(const std::vector<int>& shards) {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.protect = std::set<int>(shards.begin(), shards.end());
    std::deque<int> q;
    for (int i : shards) {
      Impl::Slot& s = m.slots[static_cast<size_t>(i)];
      if (s.state == Impl::State::kIdle) s.state = Impl::State::kQueued;
      if (s.state == Impl::State::kQueued && std::find(q.begin(), q.end(), i) == q.end()) q.push_back(i);
    }
    for (int i : m.queue) {  // asked for earlier: kept (in front) while a reader waits for it, else dropped
      if (std::find(q.begin(), q.end(), i) != q.end()) continue;
      Impl::Slot& s = m.slots[static_cast<size_t>(i)];
      if (s.waiters > 0) {
        q.push_front(i);
      } else {
        s.state = Impl::State::kIdle;
      }
    }
    m.queue = std::move(q);
  }
  m.cv.notify_all();
}

uint64_t ShardStore::cached_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->cached;
}

ShardStore::Counts ShardStore::counts() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->counts;
}

}  // namespace dlrun::data
