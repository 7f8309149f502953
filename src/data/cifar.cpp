// CIFAR-10 and CIFAR-100 in their binary formats. CIFAR-10: data_batch_1..5.bin (train) and
// test_batch.bin (eval), records of 1 label byte + 3072 pixel bytes (R, G, B planes of
// 32x32). CIFAR-100: train.bin / test.bin, records of coarse + fine label bytes + 3072
// pixels; the fine label (100 classes) is used. Files live in root, or in
// root/cifar-10-batches-bin / root/cifar-100-binary (the archives' folder names).
#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "data/byte_file.h"
#include "data/memory_dataset.h"

namespace dlrun::data {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kPixels = 3 * 32 * 32;

std::string cifar_dir(const std::string& root, const std::string& sub, const std::string& probe) {
  std::error_code ec;
  if (fs::is_regular_file(fs::path(root) / probe, ec)) return root;
  if (fs::is_regular_file(fs::path(root) / sub / probe, ec)) return (fs::path(root) / sub).string();
  fail_input("CIFAR file not found: {} (nor {})", (fs::path(root) / probe).string(),
             (fs::path(root) / sub / probe).string());
}

}  // namespace

std::shared_ptr<Dataset> open_cifar(const DataOptions& opts, Split split, int classes) {
  DLRUN_CHECK_INPUT(!opts.root.empty(), "data.name=cifar{} needs data.root", classes);
  const bool train = split == Split::kTrain;
  std::vector<std::string> names;
  std::string dir;
  int label_bytes = 1;
  if (classes == 10) {
    if (train)
      for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
    else
      names.push_back("test_batch.bin");
    dir = cifar_dir(opts.root, "cifar-10-batches-bin", names[0]);
  } else {
    names.push_back(train ? "train.bin" : "test.bin");
    dir = cifar_dir(opts.root, "cifar-100-binary", names[0]);
    label_bytes = 2;
  }
  const int64_t record = label_bytes + kPixels;

  std::vector<std::vector<unsigned char>> files;
  std::vector<std::string> paths;
  int64_t n = 0;
  for (const auto& name : names) {
    paths.push_back((fs::path(dir) / name).string());
    files.push_back(read_file_bytes(paths.back()));
    int64_t size = static_cast<int64_t>(files.back().size());
    DLRUN_CHECK_INPUT(size > 0 && size % record == 0,
                      "truncated or corrupt CIFAR file {}: {} bytes is not a whole number of {}-byte records",
                      paths.back(), size, record);
    n += size / record;
  }

  torch::Tensor images = torch::empty({n, 3, 32, 32}, torch::kUInt8);  // (N, 3, 32, 32)
  torch::Tensor labels = torch::empty({n}, torch::kLong);              // (N)
  uint8_t* ip = images.data_ptr<uint8_t>();
  int64_t* lp = labels.data_ptr<int64_t>();
  int64_t at = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    const auto& b = files[f];
    int64_t count = static_cast<int64_t>(b.size()) / record;
    for (int64_t i = 0; i < count; ++i, ++at) {
      const unsigned char* r = b.data() + i * record;
      int64_t label = r[label_bytes - 1];
      DLRUN_CHECK_INPUT(label < classes, "label out of range in {}: record {} has label {} (expected 0..{})",
                        paths[f], i, label, classes - 1);
      lp[at] = label;
      std::memcpy(ip + at * kPixels, r + label_bytes, kPixels);
    }
  }

  DatasetInfo info;
  info.num_classes = classes;
  if (classes == 10) {
    info.mean = {0.4914, 0.4822, 0.4465};
    info.std = {0.2470, 0.2435, 0.2616};
    info.class_names = {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
  } else {
    info.mean = {0.5071, 0.4865, 0.4409};
    info.std = {0.2673, 0.2564, 0.2762};
    for (int c = 0; c < classes; ++c) info.class_names.push_back(std::to_string(c));
  }
  auto ds = std::make_shared<MemoryDataset>(images, labels, info);
  ds->limit(train ? opts.limit_train : opts.limit_eval);
  return ds;
}

}  // namespace dlrun::data
