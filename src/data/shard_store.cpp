// Shard sources, the index's resolution and the fetching store (shard_store.h).
#include "data/shard_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "base/clock.h"
#include "base/error.h"
#include "base/fsutil.h"
#include "base/log.h"
#include "base/sha256.h"
#include "config/remote_options.h"
#include "data/image_decode.h"
#include "remote/s3.h"

namespace dlrun::data {

using namespace fsutil;

namespace {

constexpr int64_t kMaxBraceExpansion = 10'000'000;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string file_part(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}
std::string dir_part(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
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

uint64_t file_size(const std::string& path) {
  std::error_code ec;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  DLRUN_CHECK_INPUT(in.good(), "cannot open shard {}", path);
  return static_cast<uint64_t>(in.tellg());
}

class LocalSource : public ShardSource {
 public:
  LocalSource(std::string dir, std::vector<std::string> urls, std::string index_file, std::string what)
      : dir_(std::move(dir)), urls_(std::move(urls)), index_file_(std::move(index_file)), what_(std::move(what)) {}
  std::string describe() const override { return dir_; }
  std::vector<std::string> list() override {
    if (urls_.empty() && !index_file_.empty()) {  // an index names the shards
      bool tables = false;
      for (const auto& s : index_from_json(read_file(index_file_), index_file_, &tables).shards) urls_.push_back(s.url);
    }
    for (const auto& u : urls_)
      DLRUN_CHECK_INPUT(is_regular_file(local_path(u)), "{}: shard {} does not exist", what_, local_path(u));
    DLRUN_CHECK_INPUT(!urls_.empty(), "{}: no shards (*.tar) in {}", what_, dir_);
    return urls_;
  }
  std::optional<std::string> read_index() override {
    const std::string f = index_file_.empty() ? dir_ + "/shardindex.json" : index_file_;
    if (!is_regular_file(f)) return std::nullopt;
    return read_file(f);
  }
  std::string local_path(const std::string& url) const override { return url[0] == '/' ? url : dir_ + "/" + url; }
  std::string download(const std::string&, const std::string&) override {
    throw Error(ExitCode::kRuntime, "download() of a local shard");
  }
  void write_index(const std::string& text) override {
    write_file_atomic(index_file_.empty() ? dir_ + "/shardindex.json" : index_file_, text);
  }

 private:
  std::string dir_;
  std::vector<std::string> urls_;
  std::string index_file_, what_;
};

class S3Source : public ShardSource {
 public:
  S3Source(remote::S3Url dir, std::vector<std::string> pattern_urls, std::string index_key, std::string what)
      : dir_(std::move(dir)), urls_(std::move(pattern_urls)), index_key_(std::move(index_key)), what_(std::move(what)) {
    config_ = config::s3_config(CheckpointOptions{});  // the environment's endpoint, region and credentials
  }
  std::string describe() const override { return dir_.str(); }
  std::vector<std::string> list() override {
    remote::S3Client c = client();
    if (!urls_.empty()) return urls_;
    if (!index_key_.empty()) {
      bool tables = false;
      const std::string text = c.get_bytes(index_key_);
      for (const auto& s : index_from_json(text, dir_.str(file_part(index_key_)), &tables).shards)
        urls_.push_back(s.url);
      return urls_;
    }
    for (const auto& o : c.list(dir_.dir(), "/").objects)
      if (ends_with(o.key, ".tar")) urls_.push_back(o.key.substr(dir_.dir().size()));
    std::sort(urls_.begin(), urls_.end());
    DLRUN_CHECK_INPUT(!urls_.empty(), "{}: no shards (*.tar) under {}", what_, dir_.str());
    return urls_;
  }
  std::optional<std::string> read_index() override {
    try {
      return client().get_bytes(index_key_.empty() ? dir_.key("shardindex.json") : index_key_);
    } catch (const remote::S3Error& e) {
      if (e.status() == 404) return std::nullopt;
      throw;
    }
  }
  std::string local_path(const std::string&) const override { return {}; }
  std::string download(const std::string& url, const std::string& path) override {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    DLRUN_CHECK(out.good(), ExitCode::kRuntime, "cannot write {} (the shard cache)", path);
    Sha256 h;
    client().get(dir_.key(url), [&](const char* p, size_t n) {
      out.write(p, static_cast<std::streamsize>(n));
      h.update(p, n);
    });
    out.close();
    DLRUN_CHECK(out.good(), ExitCode::kRuntime, "cannot write {} (the shard cache: disk full?)", path);
    return h.hex();
  }
  void write_index(const std::string& text) override {
    client().put_bytes(index_key_.empty() ? dir_.key("shardindex.json") : index_key_, text, "application/json");
  }
  void set_cancel(const std::atomic<bool>* flag) { cancel_ = flag; }

 private:
  remote::S3Client client() const {
    remote::S3Client c(config_, dir_.bucket);
    if (cancel_) c.set_cancel(cancel_);
    return c;
  }
  remote::S3Url dir_;
  std::vector<std::string> urls_;
  std::string index_key_, what_;
  remote::S3Config config_;
  const std::atomic<bool>* cancel_ = nullptr;
};

std::string cache_root_for(const std::string& cache_dir, const ShardSource& src) {
  std::string d = src.describe();
  if (d.rfind("s3://", 0) == 0) d = "s3/" + d.substr(5);
  while (!d.empty() && d.back() == '/') d.pop_back();
  return cache_dir + "/" + d;
}

std::string hex_prefix(const std::string& text) { return sha256_hex(text.data(), text.size()).substr(0, 16); }

}  // namespace

std::vector<std::string> brace_expand(const std::string& pattern, const std::string& what) {
  const size_t open = pattern.find('{');
  if (open == std::string::npos) {
    DLRUN_CHECK_INPUT(pattern.find('}') == std::string::npos, "{}: unbalanced '}}' in '{}'", what, pattern);
    return {pattern};
  }
  const size_t close = pattern.find('}', open);
  DLRUN_CHECK_INPUT(close != std::string::npos, "{}: unbalanced '{{' in '{}'", what, pattern);
  const std::string body = pattern.substr(open + 1, close - open - 1), head = pattern.substr(0, open);
  std::vector<std::string> choices;
  if (const size_t dots = body.find(".."); dots != std::string::npos) {
    const std::string lo = body.substr(0, dots), hi = body.substr(dots + 2);
    auto digits = [](const std::string& s) {
      return !s.empty() && s.size() <= 12 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    DLRUN_CHECK_INPUT(digits(lo) && digits(hi), "{}: '{{{}}}' in '{}' is not a range of numbers", what, body, pattern);
    const int64_t a = std::stoll(lo), b = std::stoll(hi);
    DLRUN_CHECK_INPUT(a <= b && b - a < kMaxBraceExpansion, "{}: the range '{{{}}}' in '{}' is empty or too large",
                      what, body, pattern);
    const int width = static_cast<int>(lo.size());
    for (int64_t v = a; v <= b; ++v) choices.push_back(fmt::format("{:0{}d}", v, width));
  } else {
    size_t start = 0;
    while (true) {
      const size_t comma = body.find(',', start);
      choices.push_back(body.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  std::vector<std::string> out;
  for (const auto& rest : brace_expand(pattern.substr(close + 1), what))
    for (const auto& c : choices) {
      DLRUN_CHECK_INPUT(static_cast<int64_t>(out.size()) < kMaxBraceExpansion, "{}: '{}' expands to too many names",
                        what, pattern);
      out.push_back(head + c + rest);
    }
  std::sort(out.begin(), out.end());
  return out;
}

std::unique_ptr<ShardSource> open_source(const std::string& spec, const std::string& what) {
  DLRUN_CHECK_INPUT(!spec.empty(), "data.name=webdataset needs {}", what);
  if (remote::is_s3_url(spec)) {
    const bool pattern = spec.find('{') != std::string::npos || ends_with(spec, ".tar");
    const bool index = ends_with(spec, ".json");
    remote::S3Url url = remote::parse_s3_url(pattern || index ? dir_part(spec) : spec, what);
    std::vector<std::string> urls;
    if (pattern) urls = brace_expand(file_part(spec), what);
    return std::make_unique<S3Source>(url, urls, index ? url.key(file_part(spec)) : "", what);
  }
  if (ends_with(spec, ".json")) {
    DLRUN_CHECK_INPUT(is_regular_file(spec), "{}: shard index {} does not exist", what, spec);
    return std::make_unique<LocalSource>(dir_part(spec).empty() ? "." : dir_part(spec), std::vector<std::string>{},
                                         spec, what);
  }
  if (spec.find('{') != std::string::npos || ends_with(spec, ".tar")) {
    const std::string dir = dir_part(spec).empty() ? "." : dir_part(spec);
    DLRUN_CHECK_INPUT(dir.find('{') == std::string::npos, "{}: braces are accepted in the file name only: '{}'", what,
                      spec);
    return std::make_unique<LocalSource>(dir, brace_expand(file_part(spec), what), "", what);
  }
  DLRUN_CHECK_INPUT(is_directory(spec), "{}: {} is not a directory, a brace pattern, a .json index or an s3:// prefix",
                    what, spec);
  std::vector<std::string> urls;
  for (const auto& n : list_names(spec))
    if (ends_with(n, ".tar") && is_regular_file(spec + "/" + n)) urls.push_back(n);
  std::sort(urls.begin(), urls.end());
  std::string dir = spec;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return std::make_unique<LocalSource>(dir, urls, "", what);
}

std::string default_cache_dir(const DataOptions& o) {
  if (!o.cache_dir.empty()) return o.cache_dir;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/dlrun/shards";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/dlrun/shards";
}

ShardIndex load_index(ShardSource& src, const std::string& cache_dir, const std::string& what) {
  const std::vector<std::string> urls = src.list();
  auto usable = [&](const ShardIndex& idx) {
    if (idx.shards.size() != urls.size()) return false;
    for (size_t i = 0; i < urls.size(); ++i)
      if (idx.shards[i].url != urls[i]) return false;
    return true;
  };
  if (auto text = src.read_index()) {
    bool tables = false;
    ShardIndex idx = index_from_json(*text, src.describe() + "/shardindex.json", &tables);
    if (tables && usable(idx)) return idx;
    log0::info("{}: {} has no dlrun sample tables or lists other shards; indexing the shards", what,
               src.describe() + "/shardindex.json");
  }
  std::string key = src.describe();
  for (const auto& u : urls) key += "\n" + u;
  const std::string cached = cache_dir + "/index-" + hex_prefix(key) + ".json";
  if (is_regular_file(cached)) {
    bool tables = false;
    try {
      ShardIndex idx = index_from_json(read_file(cached), cached, &tables);
      bool same = tables && usable(idx);
      for (size_t i = 0; same && i < urls.size(); ++i)  // a local shard rewritten since: index again
        if (!src.local_path(urls[i]).empty()) same = file_size(src.local_path(urls[i])) == idx.shards[i].filesize;
      if (same) return idx;
    } catch (const Error& e) {
      log0::warn("{}: the cached index {} is unusable ({}); indexing again", what, cached, e.message());
    }
  }
  // Build: every shard read once (remote ones land in the cache, where the store finds them).
  log0::info("{}: indexing {} shard(s) of {}", what, urls.size(), src.describe());
  const double t0 = mono_now();
  ShardIndex idx;
  const std::string root = cache_root_for(cache_dir, src);
  for (size_t i = 0; i < urls.size(); ++i) {
    std::string path = src.local_path(urls[i]);
    std::string sha;
    if (path.empty()) {
      path = root + "/" + urls[i];
      make_dirs(dir_part(path));
      sha = src.download(urls[i], path + ".part");
      rename_durable(path + ".part", path);
    } else {
      sha = sha256_file(path);
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    DLRUN_CHECK_INPUT(fd >= 0, "cannot open shard {}", path);
    ShardFile f(fd, path);
    const std::string shown = src.describe() + "/" + urls[i];
    ShardEntry e = index_tar([&](uint64_t off, size_t n, char* buf) { pread_all(fd, off, n, buf, shown); },
                             file_size(path), urls[i], shown);
    e.sha256 = sha;
    if (idx.shards.empty() || idx.samples() == 0) {
      if (e.nsamples() > 0) {
        std::vector<uint8_t> first = f.read(e.offsets[0], e.sizes[0]);
        idx.channels = probe_channels_bytes(first, shown);
      }
    }
    for (int64_t l : e.labels) idx.num_classes = std::max(idx.num_classes, l + 1);
    idx.shards.push_back(std::move(e));
  }
  DLRUN_CHECK_INPUT(idx.samples() > 0, "{}: the shards of {} hold no samples", what, src.describe());
  try {
    make_dirs(cache_dir);
    write_file_atomic(cached, index_to_json(idx, file_part(src.describe())).dump());
  } catch (const std::exception& e) {
    log0::warn("{}: the index could not be cached in {}: {}", what, cached, e.what());
  }
  log0::info("{}: indexed {} samples in {} shard(s) in {:.1f} s (cached as {})", what, idx.samples(),
             idx.shards.size(), mono_now() - t0, cached);
  return idx;
}

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
  ShardIndex index;
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
    make_dirs(dir_part(path));
    const std::string part = fmt::format("{}.part.{}.{}", path, ::getpid(), i);
    for (int attempt = 0;; ++attempt) {
      const std::string sha = download_retrying(i, part);
      if (sha == e.sha256 && file_size(part) == e.filesize) break;
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
        if (slots[static_cast<size_t>(i)].state != State::kQueued) continue;
        slots[static_cast<size_t>(i)].state = State::kFetching;
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
        } else {
          s.state = State::kReady;
          s.file = file;
          s.verified = true;
          s.last_use = ++clock;
          if (remote) {
            if (!s.cached_copy) cached += index.shards[static_cast<size_t>(i)].filesize;
            s.cached_copy = true;
            counts.peak_cached_bytes = std::max(counts.peak_cached_bytes, cached);
            evict_locked();
          }
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
  m.index = index;
  m.opts = std::move(opts);
  m.slots.resize(index.shards.size());
  m.root = cache_root_for(m.opts.cache_dir, *m.src);
  m.remote = !index.shards.empty() && m.src->local_path(index.shards[0].url).empty();
  if (auto* s3 = dynamic_cast<S3Source*>(m.src.get())) s3->set_cancel(&m.stop);
  if (m.remote)  // copies left by an earlier run count against the limit from the start
    for (size_t i = 0; i < m.slots.size(); ++i)
      if (is_regular_file(m.copy_path(static_cast<int>(i)))) {
        m.slots[i].cached_copy = true;
        m.cached += file_size(m.copy_path(static_cast<int>(i)));
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
