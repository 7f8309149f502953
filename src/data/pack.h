// `dlrun data pack|index|verify`: turning a dataset dlrun reads (an ImageFolder tree, CIFAR
// binaries, idx files) into WebDataset shards with their index, locally or on s3://; writing
// the index of existing shards beside them; checking shards against their index.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/options.h"
#include "data/dataset.h"

namespace dlrun::data {

struct PackSpec {
  DataOptions source;  ///< name and root of the dataset to read (image_folder, cifar10, ...)
  Split split = Split::kTrain;
  std::string dest;    ///< a directory or an s3:// prefix
  std::string prefix = "train";  ///< shard names: PREFIX-000000.tar, ...
  uint64_t shard_bytes = 256ull << 20;
  int64_t shard_samples = 0;  ///< also start a new shard after this many samples (0: no limit)
  /// An s3:// dest: how to reach the store and the server-side encryption of every object
  /// written (the remote_* settings, as checkpoint.remote takes them; config::s3_config).
  CheckpointOptions remote;
  /// Called after each sample: (samples done, samples in all, bytes written).
  std::function<void(int64_t, int64_t, uint64_t)> progress;
};

struct PackResult {
  int64_t samples = 0, shards = 0;
  uint64_t bytes = 0;
  double seconds = 0;
  std::string index;  ///< where the index was written
};

/// Writes the shards and DEST/shardindex.json. Image files go in unchanged (their bytes, their
/// format); images held in memory (CIFAR, idx) are written as PNG, losslessly. Samples keep the
/// dataset's order; each is KEY.jpg|png + KEY.cls, KEY the sample's number (9 digits).
PackResult pack_shards(const PackSpec& spec);

/// Indexes the shards `spec` names (data.shards forms) and writes shardindex.json beside them
/// (an s3:// store reached with `remote`'s settings). Returns its location.
std::string index_shards(const std::string& spec, const CheckpointOptions& remote = {});

struct VerifyResult {
  int64_t shards = 0, samples = 0;
  uint64_t bytes = 0;
  std::vector<std::string> problems;  ///< one line per shard with a problem (below)
  /// The problems by kind: shards that do not match their index (missing, size, SHA-256, sample
  /// tables), shards that match it but hold an image that does not decode, and shards in the
  /// folder that the index does not list.
  int64_t mismatched = 0, undecodable = 0, unlisted = 0;
  /// "2 of 8 shard(s) do not match their index, 1 holds an image that does not decode" (each
  /// kind apart, only those there are).
  std::string summary() const;
};

/// Every shard of `spec` read once and checked against its shardindex.json: size, SHA-256, and
/// the tar's members against the per-sample tables. Exit 2 when there is no index to check.
VerifyResult verify_shards(const std::string& spec, const std::function<void(int64_t, int64_t)>& progress,
                           const CheckpointOptions& remote = {});

}  // namespace dlrun::data
