// image_folder: root/train/<class>/*.{jpg,jpeg,png} and root/val/<class>/... (the ImageNet
// layout), and optionally root/test/<class>/... (then val is the validation split, test the
// evaluation split). Classes are the sorted sub-folder names of root/train, so both splits agree on
// labels. Images are decoded lazily in get() (thread-safe: no shared mutable state).
//
// Channel rule: every image is converted to the channel count of the first training image
// (in sorted order): 1 if it is grayscale, else 3. Gray images in a color set become RGB
// (replicated), color images in a gray set become luma.
#include <algorithm>
#include <filesystem>

#include "base/error.h"
#include "base/log.h"
#include "data/image_decode.h"
#include "data/memory_dataset.h"

namespace dlrun::data {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> sorted_subdirs(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory()) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

struct Sample {
  std::string path;
  int64_t label;
};

class ImageFolderDataset : public Dataset {
 public:
  ImageFolderDataset(std::vector<Sample> samples, DatasetInfo info)
      : samples_(std::move(samples)), info_(std::move(info)) {}
  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  DatasetInfo info() const override { return info_; }

  bool encoded() const override { return true; }
  EncodedSample get_encoded(int64_t index) const override {
    DLRUN_CHECK(index >= 0 && index < size(), ExitCode::kRuntime, "sample index {} out of range [0, {})", index,
                size());
    const Sample& s = samples_[static_cast<size_t>(index)];
    return {read_image_file(s.path), s.path, s.label};
  }

  std::pair<torch::Tensor, int64_t> get(int64_t index) const override {
    DLRUN_CHECK(index >= 0 && index < size(), ExitCode::kRuntime, "sample index {} out of range [0, {})", index,
                size());
    const Sample& s = samples_[static_cast<size_t>(index)];
    DecodedImage img = decode_image(s.path, static_cast<int>(info_.channels));
    return {to_planar(img), s.label};
  }

  /// The decoder's interleaved (H, W, C) pixels as a (C, H, W) tensor, by a plain loop: this runs
  /// in the loader's threads, where an ATen copy (`permute().contiguous()`) is an OpenMP parallel
  /// region that gives every loader thread a team of its own, whose idle members spin after
  /// each image (perf on 2 cores: over half the samples in libgomp; images/s unchanged there,
  /// but those cycles belong to the training step).
  static torch::Tensor to_planar(const DecodedImage& img) {
    const int64_t h = img.height, w = img.width, c = img.channels, plane = h * w;
    torch::Tensor chw = torch::empty({c, h, w}, torch::kUInt8);
    uint8_t* dst = chw.data_ptr<uint8_t>();
    const uint8_t* src = img.pixels.data();
    if (c == 1) {
      std::copy(src, src + plane, dst);
    } else {
      for (int64_t i = 0; i < plane; ++i)
        for (int64_t ch = 0; ch < c; ++ch) dst[ch * plane + i] = src[i * c + ch];
    }
    return chw;
  }

 private:
  std::vector<Sample> samples_;
  DatasetInfo info_;
};

}  // namespace

bool image_folder_has_test(const std::string& root) {
  std::error_code ec;
  return fs::is_directory(fs::path(root) / "test", ec);
}

std::shared_ptr<Dataset> open_image_folder(const DataOptions& opts, Split split) {
  DLRUN_CHECK_INPUT(!opts.root.empty(), "data.name=image_folder needs data.root");
  std::error_code ec;
  fs::path train_dir = fs::path(opts.root) / "train";
  // Evaluation reads root/test where there is one (root/val is then the validation split).
  const char* sub = split == Split::kTrain ? "train"
                    : split == Split::kVal || !image_folder_has_test(opts.root) ? "val"
                                                                                 : "test";
  fs::path dir = fs::path(opts.root) / sub;
  DLRUN_CHECK_INPUT(fs::is_directory(train_dir, ec), "image folder not found: {} (expected root/train/<class>/...)",
                    train_dir.string());
  DLRUN_CHECK_INPUT(fs::is_directory(dir, ec), "image folder not found: {} (expected root/{}/<class>/...)",
                    dir.string(), sub);
  std::vector<std::string> classes = sorted_subdirs(train_dir);
  DLRUN_CHECK_INPUT(!classes.empty(), "no class folders in {} (expected {}/<class>/*.jpg)", train_dir.string(),
                    train_dir.string());

  std::vector<Sample> samples;
  for (const std::string& name : sorted_subdirs(dir)) {
    auto it = std::lower_bound(classes.begin(), classes.end(), name);
    DLRUN_CHECK_INPUT(it != classes.end() && *it == name, "class folder {} has no counterpart in {}",
                      (dir / name).string(), train_dir.string());
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(dir / name))
      if (e.is_regular_file() && is_image_name(e.path().string())) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    for (auto& f : files) samples.push_back({std::move(f), it - classes.begin()});
  }
  DLRUN_CHECK_INPUT(!samples.empty(), "no images (*.jpg, *.jpeg, *.png) in the class folders of {}", dir.string());

  // The channel count comes from the first training image (see the rule at the top).
  fs::path first;
  for (const std::string& name : classes) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(train_dir / name))
      if (e.is_regular_file() && is_image_name(e.path().string())) files.push_back(e.path());
    if (!files.empty()) {
      first = *std::min_element(files.begin(), files.end());
      break;
    }
  }
  DLRUN_CHECK_INPUT(!first.empty(), "no images in the class folders of {}", train_dir.string());

  DatasetInfo info;
  info.channels = probe_channels(first.string());
  info.num_classes = static_cast<int64_t>(classes.size());
  info.class_names = classes;
  set_photo_stats(info);
  int64_t limit = split == Split::kTrain ? opts.limit_train : opts.limit_eval;
  if (limit > 0 && limit < static_cast<int64_t>(samples.size())) samples.resize(static_cast<size_t>(limit));
  log0::info("image_folder {}: {} images, {} classes, {} channel(s)", dir.string(), samples.size(), classes.size(),
             info.channels);
  return std::make_shared<ImageFolderDataset>(std::move(samples), std::move(info));
}

}  // namespace dlrun::data
