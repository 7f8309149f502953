// The index of a set of WebDataset shards: per shard its name, byte size, SHA-256 and sample
// count, and per sample where its image lies in the tar and its label. Stored as a `wids`
// shard index (the JSON of Python's `wids`, "__kind__": "wids-shard-index-v1"), so Python's
// `wids.ShardListDataset` reads the same file; dlrun's per-sample tables ride in extra fields
// that wids ignores. Torch-free.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "data/tar.h"

namespace dlrun::data {

struct ShardEntry {
  std::string url;  ///< as the index lists it: a name relative to the index's location
  uint64_t filesize = 0;
  std::string sha256;
  std::vector<uint64_t> offsets, sizes;  ///< each sample's image member: data offset and bytes
  std::vector<int64_t> labels;
  int64_t listed = 0;  ///< the "nsamples" an index file states (a plain wids index has no tables)
  int64_t nsamples() const { return static_cast<int64_t>(labels.size()); }
};

struct ShardIndex {
  std::vector<ShardEntry> shards;
  int64_t num_classes = 0;  ///< largest label + 1
  int channels = 3;         ///< the first image's channel count (1 gray, 3 color)
  /// The class names of the dataset packed (image_folder's folder names, CIFAR's), label by label;
  /// empty when unknown (shards written by another tool). dlrun's "classes" in the index.
  std::vector<std::string> class_names;
  int64_t samples() const;
};

/// The samples of one tar, grouped by key as WebDataset groups them (consecutive members with
/// the same key): each sample needs an image (.jpg, .jpeg or .png) and a label (.cls: an
/// integer; .json: an integer, or an object with an integer "label" or "cls"). Other members
/// are ignored. A sample without an image or a label, or a label that is not a non-negative
/// integer, throws dlrun::Error (exit 2) naming the shard and the key.
ShardEntry index_tar(const ReadAt& read, uint64_t file_size, const std::string& url, const std::string& shown);

/// The wids JSON of an index (shard urls as given, relative to the index's location).
nlohmann::json index_to_json(const ShardIndex& index, const std::string& name);

/// Reads an index. `has_tables` is set false (and the shards come back with names, sizes and
/// `listed` counts only, no per-sample tables: nothing is allocated per stated sample) for a
/// plain wids index without dlrun's per-sample tables. A malformed document
/// throws dlrun::Error (exit 2) naming `file` and what is wrong.
ShardIndex index_from_json(const std::string& text, const std::string& file, bool* has_tables);

}  // namespace dlrun::data
