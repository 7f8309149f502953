// A dataset held in memory as one uint8 tensor (N, C, H, W) plus int64 labels (N). The idx,
// CIFAR and synthetic sets load into it; the device-resident loader mode reads all().
#pragma once

#include <memory>

#include "data/dataset.h"

namespace dlrun::data {

class MemoryDataset : public Dataset {
 public:
  /// images (N, C, H, W) uint8, labels (N) int64; info's channels/height/width are filled in.
  MemoryDataset(torch::Tensor images, torch::Tensor labels, DatasetInfo info);
  int64_t size() const override { return labels_.size(0); }
  std::pair<torch::Tensor, int64_t> get(int64_t index) const override;
  DatasetInfo info() const override { return info_; }
  std::pair<torch::Tensor, torch::Tensor> all() const override { return {images_, labels_}; }
  /// Keep only the first n samples (n <= 0 or n >= size: unchanged).
  void limit(int64_t n);

 private:
  torch::Tensor images_;  // (N, C, H, W) uint8, contiguous
  torch::Tensor labels_;  // (N) int64
  const int64_t* label_ptr_ = nullptr;
  DatasetInfo info_;
};

/// The private constructors of each dataset kind, used by the registry (registry.cpp).
std::shared_ptr<Dataset> open_idx(const DataOptions& opts, Split split, const std::string& kind);
std::shared_ptr<Dataset> open_cifar(const DataOptions& opts, Split split, int classes);
std::shared_ptr<Dataset> open_synthetic(const DataOptions& opts, Split split, uint64_t seed);
std::shared_ptr<Dataset> open_image_folder(const DataOptions& opts, Split split);
/// The normalization defaults of photographs by info.channels: ImageNet's per-channel mean and
/// std for color, their luma for gray (image_folder, webdataset).
void set_photo_stats(DatasetInfo& info);
/// WebDataset tar shards (webdataset.cpp, docs/data.md "Sharded datasets").
std::shared_ptr<Dataset> open_webdataset(const DataOptions& opts, Split split);

}  // namespace dlrun::data
