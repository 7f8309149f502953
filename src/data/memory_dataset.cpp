// MemoryDataset: random access into a contiguous in-memory tensor (read-only, thread-safe).
#include "data/memory_dataset.h"

#include "base/error.h"

namespace dlrun::data {

MemoryDataset::MemoryDataset(torch::Tensor images, torch::Tensor labels, DatasetInfo info)
    : images_(images.contiguous()), labels_(labels.to(torch::kLong).contiguous()), info_(std::move(info)) {
  DLRUN_CHECK(images_.dim() == 4 && images_.scalar_type() == torch::kUInt8, ExitCode::kRuntime,
              "MemoryDataset needs (N, C, H, W) uint8 images");
  DLRUN_CHECK(labels_.dim() == 1 && labels_.size(0) == images_.size(0), ExitCode::kRuntime,
              "MemoryDataset: {} labels for {} images", labels_.size(0), images_.size(0));
  info_.channels = images_.size(1);
  info_.height = images_.size(2);
  info_.width = images_.size(3);
  label_ptr_ = labels_.data_ptr<int64_t>();
}

std::pair<torch::Tensor, int64_t> MemoryDataset::get(int64_t index) const {
  DLRUN_CHECK(index >= 0 && index < size(), ExitCode::kRuntime, "sample index {} out of range [0, {})", index,
              size());
  return {images_[index], label_ptr_[index]};
}

void MemoryDataset::limit(int64_t n) {
  if (n <= 0 || n >= size()) return;
  images_ = images_.narrow(0, 0, n);
  labels_ = labels_.narrow(0, 0, n);
  label_ptr_ = labels_.data_ptr<int64_t>();
}

}  // namespace dlrun::data
