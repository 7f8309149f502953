// Packing, indexing and verifying shards (pack.h).
#include "data/pack.h"

#include <png.h>
#include <unistd.h>

#include <fmt/ranges.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
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
#include "data/shard_index.h"
#include "data/shard_store.h"
#include "remote/s3.h"

namespace dlrun::data {

using fsutil::is_regular_file;
using fsutil::make_dirs;
using fsutil::remove_tree;
using fsutil::write_file_atomic;

namespace {

/// A (C, H, W) uint8 image as PNG bytes.
std::vector<uint8_t> encode_png(const torch::Tensor& chw) {
  const torch::Tensor hwc = chw.permute({1, 2, 0}).contiguous();
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(hwc.size(1));
  image.height = static_cast<png_uint_32>(hwc.size(0));
  image.format = hwc.size(2) == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  png_alloc_size_t size = 0;
  DLRUN_CHECK(png_image_write_to_memory(&image, nullptr, &size, 0, hwc.data_ptr<uint8_t>(), 0, nullptr) != 0,
              ExitCode::kRuntime, "PNG encoding failed: {}", image.message);
  std::vector<uint8_t> out(size);
  DLRUN_CHECK(png_image_write_to_memory(&image, out.data(), &size, 0, hwc.data_ptr<uint8_t>(), 0, nullptr) != 0,
              ExitCode::kRuntime, "PNG encoding failed: {}", image.message);
  out.resize(size);
  return out;
}

bool is_jpeg(const std::vector<uint8_t>& b) { return b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF; }

/// One shard being written: to a file, hashed on the way, its sample table kept.
struct OpenShard {
  std::string path, url;
  std::ofstream out;
  Sha256 hash;
  ShardEntry entry;
  std::unique_ptr<TarWriter> tar;
};

}  // namespace

PackResult pack_shards(const PackSpec& spec) {
  const double t0 = mono_now();
  std::shared_ptr<Dataset> ds = open(spec.source, spec.split, 0);
  const DatasetInfo info = ds->info();
  const bool remote = remote::is_s3_url(spec.dest);
  std::string dir = spec.dest;
  std::unique_ptr<remote::S3Client> s3;
  remote::S3Url url;
  if (remote) {
    url = remote::parse_s3_url(spec.dest, "data pack --to");
    s3 = std::make_unique<remote::S3Client>(config::s3_config(spec.remote), url.bucket);
    dir = fmt::format("{}/dlrun-pack-{}", temp_dir(), ::getpid());
  }
  if (!remote && fsutil::is_directory(dir)) {  // a second pack would leave the first one's extra shards listed
    for (const std::string& n : fsutil::list_names(dir)) {
      if (!ends_with(n, ".tar")) continue;
      DLRUN_CHECK_INPUT(n.rfind(spec.prefix + "-", 0) != 0,
                        "{} already holds shards named {}-*.tar ({}): choose another --to or --prefix, or remove them",
                        dir, spec.prefix, n);
      throw Error(ExitCode::kBadInput,
                  fmt::format("{} already holds other shards ({}: another split?): a folder holds one split, and its "
                              "shardindex.json lists every shard in it; pack this one into a folder of its own (such "
                              "as --to {}-{})", dir, n, strip_trailing(dir, '/'), spec.prefix));
    }
    DLRUN_CHECK_INPUT(!fsutil::is_regular_file(dir + "/shardindex.json"),
                      "{} already holds a shardindex.json (another split's?): pack into a folder of its own", dir);
  }
  if (remote) {  // the same for a prefix in a bucket: its shardindex.json would be replaced
    std::unique_ptr<ShardSource> there = open_source(spec.dest, "data pack --to", spec.remote);
    std::optional<std::string> existing;
    try {
      existing = there->read_index();
    } catch (const remote::S3Error& e) {
      if (e.status() != 403) throw;  // a write-only policy (security.md) may not read: nothing to check then
      log0::info("data pack: {} cannot be read (403): whether it already holds another split's index is not checked",
                 spec.dest);
    }
    DLRUN_CHECK_INPUT(!existing.has_value(),
                      "{} already holds a shardindex.json (another split's?): a prefix holds one split; pack this one "
                      "under a prefix of its own (such as --to {}-{}/)", spec.dest, strip_trailing(spec.dest, '/'),
                      spec.prefix);
  }
  make_dirs(dir);
  ShardIndex index;
  index.channels = static_cast<int>(info.channels);
  PackResult r;
  std::unique_ptr<OpenShard> cur;
  auto close = [&] {
    if (!cur) return;
    cur->tar->finish();
    cur->out.close();
    DLRUN_CHECK(cur->out.good(), ExitCode::kRuntime, "cannot write shard {} (disk full?)", cur->path);
    cur->entry.filesize = cur->tar->bytes();
    cur->entry.sha256 = cur->hash.hex();
    if (remote) {
      s3->put_file(url.key(cur->url), cur->path, cur->entry.filesize, cur->entry.sha256);
      std::remove(cur->path.c_str());
    }
    r.bytes += cur->entry.filesize;
    index.shards.push_back(std::move(cur->entry));
    cur.reset();
  };
  const int64_t n = ds->size();
  for (int64_t i = 0; i < n; ++i) {
    if (!cur) {
      cur = std::make_unique<OpenShard>();
      cur->url = fmt::format("{}-{:06d}.tar", spec.prefix, index.shards.size());
      cur->path = dir + "/" + cur->url;
      cur->out.open(cur->path, std::ios::binary | std::ios::trunc);
      DLRUN_CHECK_INPUT(cur->out.good(), "cannot write shard {}", cur->path);
      cur->entry.url = cur->url;
      OpenShard* s = cur.get();
      cur->tar = std::make_unique<TarWriter>([s](const char* p, size_t k) {
        s->out.write(p, static_cast<std::streamsize>(k));
        s->hash.update(p, k);
      });
    }
    std::vector<uint8_t> bytes;
    int64_t label = 0;
    if (ds->encoded()) {
      EncodedSample es = ds->get_encoded(i);
      bytes = std::move(es.bytes);
      label = es.label;
    } else {
      auto [img, l] = ds->get(i);
      bytes = encode_png(img);
      label = l;
    }
    const std::string key = fmt::format("{:09d}", i);
    const std::string ext = is_jpeg(bytes) ? "jpg" : "png";
    cur->entry.offsets.push_back(cur->tar->bytes() + 512);
    cur->entry.sizes.push_back(bytes.size());
    cur->entry.labels.push_back(label);
    cur->tar->add(key + "." + ext, bytes.data(), bytes.size());
    const std::string cls = std::to_string(label);
    cur->tar->add(key + ".cls", cls.data(), cls.size());
    index.num_classes = std::max(index.num_classes, label + 1);
    if (cur->tar->bytes() >= spec.shard_bytes ||
        (spec.shard_samples > 0 && cur->entry.nsamples() >= spec.shard_samples))
      close();
    if (spec.progress) spec.progress(i + 1, n, r.bytes + (cur ? cur->tar->bytes() : 0));
  }
  close();
  index.num_classes = std::max<int64_t>(index.num_classes, info.num_classes);
  // The dataset's class names travel with the shards (predict names the classes of a run trained
  // on them): kept when there is one per label.
  if (static_cast<int64_t>(info.class_names.size()) == index.num_classes) index.class_names = info.class_names;
  const std::string text = index_to_json(index, spec.prefix).dump();
  if (remote) {
    s3->put_bytes(url.key("shardindex.json"), text, "application/json");
    remove_tree(dir);
    r.index = url.str("shardindex.json");
  } else {
    write_file_atomic(dir + "/shardindex.json", text);
    r.index = dir + "/shardindex.json";
  }
  r.samples = n;
  r.shards = static_cast<int64_t>(index.shards.size());
  r.seconds = mono_now() - t0;
  return r;
}

std::string index_shards(const std::string& spec, const CheckpointOptions& remote) {
  std::unique_ptr<ShardSource> src = open_source(spec, "shards", remote);
  const std::string tmp = fmt::format("{}/dlrun-index-{}", temp_dir(), ::getpid());
  // The class names of the index there (the tars do not hold them): kept when they still fit.
  std::vector<std::string> names;
  if (const auto text = src->read_index()) {
    try {
      bool tables = false;
      names = index_from_json(*text, src->describe() + "/shardindex.json", &tables).class_names;
    } catch (const Error&) {  // an index that does not read is being replaced: nothing to keep
    }
  }
  ShardIndex idx;
  try {
    idx = load_index(*src, tmp, "shards", /*reindex=*/true);
  } catch (...) {
    remove_tree(tmp);
    throw;
  }
  remove_tree(tmp);
  if (static_cast<int64_t>(names.size()) == idx.num_classes) idx.class_names = names;
  src->write_index(index_to_json(idx, "shards").dump());
  return src->describe() + "/shardindex.json";
}

VerifyResult verify_shards(const std::string& spec, const std::function<void(int64_t, int64_t)>& progress,
                           const CheckpointOptions& remote) {
  std::unique_ptr<ShardSource> src = open_source(spec, "shards", remote);
  const auto text = src->read_index();
  DLRUN_CHECK_INPUT(text.has_value(), "{} has no shardindex.json to verify against (`dlrun data index {}` writes one)",
                    src->describe(), spec);
  bool tables = false;
  const ShardIndex idx = index_from_json(*text, src->describe() + "/shardindex.json", &tables);
  DLRUN_CHECK_INPUT(tables, "{}/shardindex.json is a plain wids index without dlrun's sample tables; `dlrun data index "
                    "{}` rewrites it with them", src->describe(), spec);
  VerifyResult r;
  if (!ends_with(spec, ".json") && spec.find('{') == std::string::npos) {  // a folder or prefix: all of it
    std::set<std::string> listed;
    for (const auto& s : idx.shards) listed.insert(s.url);
    for (const auto& n : src->list())
      if (!listed.count(n)) {
        r.problems.push_back(fmt::format("{}/{}: not in the index (another split's shard? a folder holds one split, "
                                         "and training on the folder would refuse it)", src->describe(), n));
        ++r.unlisted;
      }
  }
  const std::string tmp = fmt::format("{}/dlrun-verify-{}.tar", temp_dir(), ::getpid());
  for (size_t i = 0; i < idx.shards.size(); ++i) {
    const ShardEntry& want = idx.shards[i];
    const std::string shown = src->describe() + "/" + want.url;
    std::string path = src->local_path(want.url), sha;
    try {
      if (path.empty()) {
        sha = src->download(want.url, tmp);
        path = tmp;
      } else {
        DLRUN_CHECK_INPUT(is_regular_file(path), "the shard is missing");
        sha = sha256_file(path);
      }
      std::ifstream in(path, std::ios::binary | std::ios::ate);
      const uint64_t size = static_cast<uint64_t>(in.tellg());
      std::string why;
      bool undecodable = false;
      if (size != want.filesize) {
        why = fmt::format("{} bytes, the index says {}", size, want.filesize);
      } else if (sha != want.sha256) {
        why = fmt::format("SHA-256 {}, the index says {}", sha.substr(0, 16), want.sha256.substr(0, 16));
      } else {
        std::ifstream f(path, std::ios::binary);
        ShardEntry got = index_tar(
            [&](uint64_t off, size_t k, char* buf) {
              f.seekg(static_cast<std::streamoff>(off));
              f.read(buf, static_cast<std::streamsize>(k));
              DLRUN_CHECK_INPUT(static_cast<size_t>(f.gcount()) == k, "shard {}: short read at byte {}", shown, off);
            },
            size, want.url, shown);
        if (got.offsets != want.offsets || got.sizes != want.sizes || got.labels != want.labels)
          why = "its samples differ from the index's tables";
        // Every image decodes whole, as training would decode it (a truncated JPEG is refused there).
        for (size_t k = 0; why.empty() && k < got.offsets.size(); ++k) {
          std::vector<uint8_t> bytes(got.sizes[k]);
          f.clear();
          f.seekg(static_cast<std::streamoff>(got.offsets[k]));
          f.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
          try {
            decode_image_bytes(bytes, fmt::format("of sample {} (byte {})", k, got.offsets[k]), idx.channels);
          } catch (const Error& e) {
            why = e.message();
            undecodable = true;
          }
        }
      }
      if (!why.empty()) {
        r.problems.push_back(fmt::format("{}: {}", shown, why));
        ++(undecodable ? r.undecodable : r.mismatched);
      }
      r.bytes += size;
    } catch (const Error& e) {
      r.problems.push_back(fmt::format("{}: {}", shown, e.message()));
      ++r.mismatched;
    } catch (const std::exception& e) {
      r.problems.push_back(fmt::format("{}: {}", shown, e.what()));
      ++r.mismatched;
    }
    r.shards += 1;
    r.samples += want.nsamples();
    if (progress) progress(static_cast<int64_t>(i + 1), static_cast<int64_t>(idx.shards.size()));
  }
  std::remove(tmp.c_str());
  return r;
}

std::string VerifyResult::summary() const {
  std::vector<std::string> parts;
  if (mismatched > 0) parts.push_back(fmt::format("{} of {} shard(s) do not match their index", mismatched, shards));
  if (undecodable > 0)
    parts.push_back(fmt::format("{} of {} shard(s) match their index but hold an image that does not decode",
                                undecodable, shards));
  if (unlisted > 0) parts.push_back(fmt::format("{} shard(s) in the folder are not in the index", unlisted));
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace dlrun::data
