// Where WebDataset shards come from and how they reach the loader: a source (a local directory,
// a brace pattern of files, or an s3:// prefix) and a store that fetches shards ahead of need in
// background threads, verifies each against the index's SHA-256, keeps remote shards in a
// bounded local cache that a restart on the same machine reuses, and retries an unreachable
// service for data.retry_s before giving up. Torch-free.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "config/options.h"
#include "data/shard_index.h"

namespace dlrun::data {

/// The store stayed unreachable for data.retry_s (exit 1): the trainer commits the steps it has
/// trained before the run fails.
class StoreUnavailable : public Error {
 public:
  using Error::Error;
};

/// A stop request (a signal, a cloud notice) came while the loader waited for a shard; thrown
/// only where StoreOptions::interrupted allows it (a run of one process), so that the trainer
/// saves at once instead of after the wait.
class StopWhileWaiting : public Error {
 public:
  using Error::Error;
};

/// Shard bytes from somewhere.
class ShardSource {
 public:
  virtual ~ShardSource() = default;
  /// "s3://bucket/prefix" or the local directory, for messages and the cache's layout.
  virtual std::string describe() const = 0;
  /// The shard names (urls relative to the source) the spec selects, sorted.
  virtual std::vector<std::string> list() = 0;
  /// The text of the source's shardindex.json, if it has one.
  virtual std::optional<std::string> read_index() = 0;
  /// A local path to read `url` in place, or "" when the shard must be downloaded.
  virtual std::string local_path(const std::string& url) const = 0;
  /// Downloads `url` to `path`, hashing it on the way; returns its SHA-256. Throws
  /// remote::S3Error for a failed request.
  virtual std::string download(const std::string& url, const std::string& path) = 0;
  /// Writes `text` as the source's shardindex.json (dlrun data pack).
  virtual void write_index(const std::string& text) = 0;
  /// While `*flag` is set, a download under way is abandoned (remote sources; the flag outlives
  /// the source's use).
  virtual void set_cancel(const std::atomic<bool>* flag) { (void)flag; }
};

/// The source data.shards names: an s3:// prefix (or brace pattern of keys), a brace pattern of
/// files, a directory of *.tar, or a shard index (.json) whose urls are relative to its folder.
/// `what` names the key in messages (data.shards / data.eval_shards). An s3:// source reaches
/// the store with `remote`'s settings (config::s3_config: the environment's endpoint, region and
/// credentials unless they say otherwise; TLS; the encryption of the index it writes).
std::unique_ptr<ShardSource> open_source(const std::string& spec, const std::string& what,
                                         const CheckpointOptions& remote = {});

/// Expands "{000..012}" ranges (zero-padded to the width written) and "{a,b}" lists; throws
/// dlrun::Error (exit 2) naming `what` when a brace is unbalanced or a range is empty or huge.
std::vector<std::string> brace_expand(const std::string& pattern, const std::string& what);

/// The index of a source: its shardindex.json when that has dlrun's tables and lists the shards
/// the spec selects, else a copy cached in `cache_dir` from an earlier run (when the shards'
/// sizes still match), else built by reading every shard once (and then cached). A folder whose
/// shardindex.json lists some of its shards and not the others is refused (exit 2: another
/// split's shards would be mixed in), unless `reindex` (`dlrun data index`: every shard there
/// is indexed, the existing index ignored).
ShardIndex load_index(ShardSource& src, const std::string& cache_dir, const std::string& what, bool reindex = false);

/// Where the cache keeps copies of `src`'s shards: CACHE_DIR/s3/BUCKET/PREFIX for s3://BUCKET/PREFIX.
std::string cache_root(const std::string& cache_dir, const ShardSource& src);

/// data.cache_dir, or ~/.cache/dlrun/shards ($XDG_CACHE_HOME/dlrun/shards).
std::string default_cache_dir(const DataOptions& o);

/// An open, verified shard: read members at their offsets (thread-safe).
class ShardFile {
 public:
  ShardFile(int fd, std::string shown) : fd_(fd), shown_(std::move(shown)) {}
  ~ShardFile();
  std::vector<uint8_t> read(uint64_t offset, uint64_t n) const;
  const std::string& shown() const { return shown_; }

 private:
  int fd_;
  std::string shown_;
};

struct StoreOptions {
  std::string cache_dir;
  uint64_t cache_limit_bytes = 0;
  int threads = 4;
  double retry_s = 120;
  /// Asked while open() waits: true ends the wait with StopWhileWaiting (empty: never).
  std::function<bool()> interrupted;
};

/// Fetches and verifies shards of an index in background threads.
class ShardStore {
 public:
  ShardStore(std::unique_ptr<ShardSource> src, const ShardIndex& index, StoreOptions opts);
  ~ShardStore();
  /// The verified shard `i`, fetched now if no fetch is under way; waits for it. Throws
  /// dlrun::Error: exit 2 for a shard that fails verification twice or a refused request, exit 1
  /// when the service stayed unreachable for retry_s.
  std::shared_ptr<const ShardFile> open(int i);
  /// The shards to fetch next, in order of need: queued behind nothing else, and kept from
  /// eviction until the next call.
  void want(const std::vector<int>& shards);
  /// Bytes of remote shards held in the cache now (what data.cache_limit_gb bounds).
  uint64_t cached_bytes() const;
  /// Shards downloaded, re-downloaded after failing verification, and requests retried.
  struct Counts {
    int64_t downloads = 0, refetches = 0, retries = 0, cache_hits = 0;
    uint64_t peak_cached_bytes = 0;  ///< the most the cache held at once
  };
  Counts counts() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dlrun::data
