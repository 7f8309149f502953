// webdataset: samples in WebDataset tar shards (local or s3://), read in place at the offsets
// of the shard index and decoded by the loader (Dataset::encoded). The order of an epoch is a
// function of (seed, epoch) and the index alone: the shards in a shuffled order, cut into blocks
// of data.shuffle_block shards, and the samples of each block shuffled together. The loader's
// global cursor walks that order, so a run resumed on another world size reads on from the same
// sample. Reading a block asks the store for that block and the data.fetch_ahead shards after it.
#include <algorithm>
#include <mutex>
#include <numeric>

#include "base/error.h"
#include "base/log.h"
#include "data/image_decode.h"
#include "data/memory_dataset.h"
#include "data/sample_rng.h"
#include "data/shard_store.h"
#include "preempt/preempt.h"
#include "world/world.h"

namespace dlrun::data {

namespace {

class WebDataset : public Dataset {
 public:
  WebDataset(ShardIndex index, std::unique_ptr<ShardStore> store, int64_t block, int64_t ahead)
      : index_(std::move(index)), store_(std::move(store)), block_(block), ahead_(ahead) {
    first_.push_back(0);
    for (const auto& s : index_.shards) first_.push_back(first_.back() + s.nsamples());
    info_.channels = index_.channels;
    info_.num_classes = index_.num_classes;
    info_.class_names = index_.class_names;
    set_photo_stats(info_);
    const int shards = static_cast<int>(index_.shards.size());
    seq_.resize(static_cast<size_t>(shards));
    std::iota(seq_.begin(), seq_.end(), 0);
    place_.assign(static_cast<size_t>(shards), 0);
    for (int q = 0; q < shards; ++q) place_[static_cast<size_t>(seq_[static_cast<size_t>(q)])] = q;
  }

  int64_t size() const override { return first_.back(); }
  DatasetInfo info() const override { return info_; }
  bool encoded() const override { return true; }

  EncodedSample get_encoded(int64_t index) const override {
    DLRUN_CHECK(index >= 0 && index < size(), ExitCode::kRuntime, "sample index {} out of range [0, {})", index,
                size());
    const int s = static_cast<int>(std::upper_bound(first_.begin(), first_.end(), index) - first_.begin()) - 1;
    const size_t j = static_cast<size_t>(index - first_[static_cast<size_t>(s)]);
    hint(s);
    std::shared_ptr<const ShardFile> f = store_->open(s);
    const ShardEntry& e = index_.shards[static_cast<size_t>(s)];
    EncodedSample out;
    out.bytes = f->read(e.offsets[j], e.sizes[j]);
    out.name = fmt::format("{} (sample {})", f->shown(), j);
    out.label = e.labels[j];
    return out;
  }

  std::pair<torch::Tensor, int64_t> get(int64_t index) const override {
    EncodedSample es = get_encoded(index);
    DecodedImage img = decode_image_bytes(es.bytes, es.name, static_cast<int>(info_.channels));
    torch::Tensor hwc = torch::from_blob(img.pixels.data(), {img.height, img.width, img.channels}, torch::kUInt8);
    return {hwc.permute({2, 0, 1}).contiguous(), es.label};
  }

  std::vector<int64_t> epoch_order(uint64_t seed, int64_t epoch, bool shuffle) const override {
    const int shards = static_cast<int>(index_.shards.size());
    std::vector<int> seq(static_cast<size_t>(shards));
    std::iota(seq.begin(), seq.end(), 0);
    if (shuffle) {
      SampleRng rng(sample_key(seed, epoch, -1, kStreamShardOrder));
      for (int i = shards - 1; i > 0; --i)
        std::swap(seq[static_cast<size_t>(i)], seq[static_cast<size_t>(rng.next() % static_cast<uint64_t>(i + 1))]);
    }
    std::vector<int64_t> order;
    order.reserve(static_cast<size_t>(size()));
    for (int64_t b = 0; b * block_ < shards; ++b) {
      const size_t start = order.size();
      for (int64_t q = b * block_; q < std::min<int64_t>(shards, (b + 1) * block_); ++q) {
        const int s = seq[static_cast<size_t>(q)];
        for (int64_t i = first_[static_cast<size_t>(s)]; i < first_[static_cast<size_t>(s) + 1]; ++i) order.push_back(i);
      }
      if (shuffle) {
        SampleRng rng(sample_key(seed, epoch, b, kStreamShardBlock));
        for (size_t i = order.size() - start; i > 1; --i)
          std::swap(order[start + i - 1], order[start + rng.next() % static_cast<uint64_t>(i)]);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    seq_ = std::move(seq);
    for (int q = 0; q < shards; ++q) place_[static_cast<size_t>(seq_[static_cast<size_t>(q)])] = q;
    block_at_ = -1;
    return order;
  }

 private:
  /// Reading shard s of block b: wanted (fetched in this order, kept from eviction) are block b,
  /// the block before it (other loader threads may still be finishing it) and the `ahead`
  /// shards after it; asked once per block, as the epoch's reading moves forward.
  void hint(int s) const {
    std::vector<int> want;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const int64_t b = place_[static_cast<size_t>(s)] / block_;
      if (b <= block_at_) return;
      block_at_ = b;
      const int64_t end = std::min<int64_t>(static_cast<int64_t>(seq_.size()), (b + 1) * block_ + ahead_);
      for (int64_t q = b * block_; q < end; ++q) want.push_back(seq_[static_cast<size_t>(q)]);
      for (int64_t q = std::max<int64_t>(0, (b - 1) * block_); q < b * block_; ++q)
        want.push_back(seq_[static_cast<size_t>(q)]);
    }
    store_->want(want);
  }

  ShardIndex index_;
  std::unique_ptr<ShardStore> store_;
  int64_t block_, ahead_;
  std::vector<int64_t> first_;  // first dataset index of each shard, and the total at the end
  DatasetInfo info_;
  mutable std::mutex mu_;
  mutable std::vector<int> seq_;    // this epoch's shard order
  mutable std::vector<int> place_;  // shard -> its place in seq_
  mutable int64_t block_at_ = -1;   // the block last asked for
};

/// The first `limit` samples (0: all), cutting the index's tables.
void apply_limit(ShardIndex& idx, int64_t limit) {
  if (limit <= 0) return;
  int64_t left = limit;
  size_t keep = 0;
  for (; keep < idx.shards.size() && left > 0; ++keep) {
    ShardEntry& e = idx.shards[keep];
    if (e.nsamples() > left) {
      e.offsets.resize(static_cast<size_t>(left));
      e.sizes.resize(static_cast<size_t>(left));
      e.labels.resize(static_cast<size_t>(left));
    }
    left -= e.nsamples();
  }
  idx.shards.resize(keep);
}

}  // namespace

std::shared_ptr<Dataset> open_webdataset(const DataOptions& opts, Split split) {
  const bool train = split == Split::kTrain;
  const std::string what = train ? "data.shards" : "data.eval_shards";
  const std::string spec = train ? opts.shards : opts.eval_shards;
  DLRUN_CHECK_INPUT(train || !spec.empty(),
                    "data.name=webdataset needs data.eval_shards for evaluation (the shards of the evaluation set)");
  const std::string cache = default_cache_dir(opts);
  CheckpointOptions remote;  // s3:// shards: the environment's endpoint, CAs and credentials
  remote.remote_allow_unencrypted_http = opts.allow_unencrypted_http;
  std::unique_ptr<ShardSource> src = open_source(spec, what, remote);
  ShardIndex index = load_index(*src, cache, what);
  apply_limit(index, train ? opts.limit_train : opts.limit_eval);
  StoreOptions so;
  so.cache_dir = cache;
  so.cache_limit_bytes = static_cast<uint64_t>(opts.cache_limit_gb * 1e9);
  so.threads = static_cast<int>(opts.fetch_threads);
  so.retry_s = opts.retry_s;
  // One process saves at once on a stop request that comes during a wait for a shard. With
  // several, the others may be inside a collective: the wait ends first (data.retry_s at most).
  if (dist::world_from_env({}, false).size == 1) so.interrupted = [] { return preempt::stop_requested(); };
  const int64_t ahead = opts.fetch_ahead > 0 ? opts.fetch_ahead : opts.shuffle_block;
  log0::info("webdataset {}: {} samples in {} shard(s), {} classes, {} channel(s); shuffle blocks of {} shard(s), {} "
             "fetched ahead",
             src->describe(), index.samples(), index.shards.size(), index.num_classes, index.channels,
             opts.shuffle_block, ahead);
  auto store = std::make_unique<ShardStore>(std::move(src), index, so);
  return std::make_shared<WebDataset>(std::move(index), std::move(store), opts.shuffle_block, ahead);
}

}  // namespace dlrun::data
