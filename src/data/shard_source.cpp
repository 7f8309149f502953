// Shard sources (a local directory, a brace pattern of files, a shard index, an s3:// prefix)
// and the resolution of a source's index (shard_store.h).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "base/clock.h"
#include "base/env.h"
#include "base/error.h"
#include "base/fsutil.h"
#include "base/log.h"
#include "base/sha256.h"
#include "base/strings.h"
#include "config/remote_options.h"
#include "data/image_decode.h"
#include "data/shard_store.h"
#include "remote/s3.h"

namespace dlrun::data {

using fsutil::is_directory;
using fsutil::is_regular_file;
using fsutil::list_names;
using fsutil::make_dirs;
using fsutil::read_file;
using fsutil::rename_durable;
using fsutil::write_file_atomic;

namespace {

constexpr int64_t kMaxBraceExpansion = 10'000'000;

std::string file_part(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

uint64_t file_size(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  DLRUN_CHECK_INPUT(!ec, "cannot read the size of shard {}: {}", path, ec.message());
  return static_cast<uint64_t>(n);
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
  S3Source(remote::S3Url dir, std::vector<std::string> pattern_urls, std::string index_key, std::string what,
           const CheckpointOptions& remote)
      : dir_(std::move(dir)), urls_(std::move(pattern_urls)), index_key_(std::move(index_key)), what_(std::move(what)) {
    config_ = config::s3_config(remote);
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
  void set_cancel(const std::atomic<bool>* flag) override { cancel_ = flag; }

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

std::string hex_prefix(const std::string& text) { return sha256_hex(text.data(), text.size()).substr(0, 16); }

}  // namespace

std::string cache_root(const std::string& cache_dir, const ShardSource& src) {
  std::string d = src.describe();
  if (d.rfind("s3://", 0) == 0) d = "s3/" + d.substr(5);
  return cache_dir + "/" + strip_trailing(d, '/');
}


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

std::unique_ptr<ShardSource> open_source(const std::string& spec, const std::string& what,
                                         const CheckpointOptions& remote) {
  DLRUN_CHECK_INPUT(!spec.empty(), "data.name=webdataset needs {}", what);
  // A shell glob reaches dlrun unexpanded from a config; say what is taken instead of "does not exist".
  DLRUN_CHECK_INPUT(spec.find_first_of("*?[") == std::string::npos,
                    "{}: '{}' is a glob pattern, which dlrun does not expand: give the directory (every *.tar in it), "
                    "a brace pattern such as dir/train-{{000000..000127}}.tar, a shardindex.json, or an s3:// prefix",
                    what, spec);
  if (remote::is_s3_url(spec)) {
    const bool pattern = spec.find('{') != std::string::npos || ends_with(spec, ".tar");
    const bool index = ends_with(spec, ".json");
    remote::S3Url url = remote::parse_s3_url(pattern || index ? fsutil::dir_part(spec) : spec, what);
    std::vector<std::string> urls;
    if (pattern) urls = brace_expand(file_part(spec), what);
    return std::make_unique<S3Source>(url, urls, index ? url.key(file_part(spec)) : "", what, remote);
  }
  if (ends_with(spec, ".json")) {
    DLRUN_CHECK_INPUT(is_regular_file(spec), "{}: shard index {} does not exist", what, spec);
    return std::make_unique<LocalSource>(fsutil::dir_part(spec).empty() ? "." : fsutil::dir_part(spec), std::vector<std::string>{},
                                         spec, what);
  }
  if (spec.find('{') != std::string::npos || ends_with(spec, ".tar")) {
    const std::string dir = fsutil::dir_part(spec).empty() ? "." : fsutil::dir_part(spec);
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
  if (const std::string x = env("XDG_CACHE_HOME"); !x.empty()) return x + "/dlrun/shards";
  const std::string home = env("HOME");
  return (home.empty() ? "/tmp" : home) + "/.cache/dlrun/shards";
}

ShardIndex load_index(ShardSource& src, const std::string& cache_dir, const std::string& what, bool reindex) {
  const std::vector<std::string> urls = src.list();
  auto usable = [&](const ShardIndex& idx) {
    if (idx.shards.size() != urls.size()) return false;
    for (size_t i = 0; i < urls.size(); ++i)
      if (idx.shards[i].url != urls[i]) return false;
    return true;
  };
  if (auto text = reindex ? std::nullopt : src.read_index()) {
    bool tables = false;
    ShardIndex idx = index_from_json(*text, src.describe() + "/shardindex.json", &tables);
    if (tables && usable(idx)) return idx;
    // An index that lists some of the folder's shards and not others: the others are most likely
    // another split's (packed into the same folder). Indexing them all would mix the splits.
    std::set<std::string> here(urls.begin(), urls.end());
    std::vector<std::string> extra;
    bool all_here = !idx.shards.empty();
    for (const auto& s : idx.shards) all_here = all_here && here.erase(s.url) > 0;
    if (all_here && !here.empty())
      throw Error(ExitCode::kBadInput,
                  fmt::format("{}: {} lists {} shard(s), but {} also holds {} other(s) ({}{}): another split's shards? "
                              "A folder holds one split; move them to a folder of their own, or name this split's "
                              "shards with a brace pattern or its index file", what, src.describe() + "/shardindex.json",
                              idx.shards.size(), src.describe(), here.size(), *here.begin(),
                              here.size() > 1 ? ", ..." : ""));
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
  const std::string root = cache_root(cache_dir, src);
  for (size_t i = 0; i < urls.size(); ++i) {
    std::string path = src.local_path(urls[i]);
    std::string sha;
    if (path.empty()) {
      path = root + "/" + urls[i];
      make_dirs(fsutil::dir_part(path));
      const std::string part = fmt::format("{}.part.{}", path, ::getpid());  // ranks sharing the cache
      sha = src.download(urls[i], part);
      rename_durable(part, path);
    } else {
      sha = sha256_file(path);
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    DLRUN_CHECK_INPUT(fd >= 0, "cannot open shard {}", path);
    const std::string shown = src.describe() + "/" + urls[i];
    ShardFile f(fd, shown);
    ShardEntry e = index_tar(
        [&](uint64_t off, size_t n, char* buf) {
          const std::vector<uint8_t> b = f.read(off, n);
          std::memcpy(buf, b.data(), n);
        },
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
  if (reindex) {  // `dlrun data index`: the caller writes shardindex.json; no cache copy to mention
    log0::info("{}: indexed {} samples in {} shard(s) in {:.1f} s", what, idx.samples(), idx.shards.size(),
               mono_now() - t0);
    return idx;
  }
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

}  // namespace dlrun::data
