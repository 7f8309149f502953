// MNIST and Fashion-MNIST in the idx format (LeCun's): big-endian magic, dimension counts,
// then raw uint8 data. Files may be gzipped. Every inconsistency is a bad-input error that
// names the file: wrong magic, image and label counts that disagree, truncated data,
// labels out of range.
#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "data/byte_file.h"
#include "data/memory_dataset.h"

namespace dlrun::data {

namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // ubyte, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // ubyte, 1 dimension
constexpr int64_t kClasses = 10;

uint32_t be32(const std::vector<unsigned char>& b, size_t at) {
  return (uint32_t(b[at]) << 24) | (uint32_t(b[at + 1]) << 16) | (uint32_t(b[at + 2]) << 8) | uint32_t(b[at + 3]);
}

/// Checks the header of an idx file: magic, and that the payload has exactly the size the
/// header promises. Returns the dimensions.
std::vector<int64_t> idx_header(const std::vector<unsigned char>& b, const std::string& path, uint32_t magic) {
  int ndim = static_cast<int>(magic & 0xff);
  size_t header = 4 + 4 * static_cast<size_t>(ndim);
  DLRUN_CHECK_INPUT(b.size() >= 4, "truncated idx file {} ({} bytes)", path, b.size());
  DLRUN_CHECK_INPUT(be32(b, 0) == magic, "wrong magic in idx file {}: 0x{:08x}, expected 0x{:08x}", path,
                    be32(b, 0), magic);
  DLRUN_CHECK_INPUT(b.size() >= header, "truncated idx file {}: header needs {} bytes, file has {}", path, header,
                    b.size());
  std::vector<int64_t> dims;
  const int64_t have = static_cast<int64_t>(b.size() - header);
  // The product of the dimensions, checked against the bytes present as it grows: three
  // 32-bit dimensions can overflow 64 bits (2^31 x 2^31 x 4 wraps to 0).
  for (int d = 0; d < ndim; ++d) {
    dims.push_back(be32(b, 4 + 4 * d));
    DLRUN_CHECK_INPUT(dims.back() > 0, "idx file {}: dimension {} of its header is 0", path, d);
  }
  int64_t payload = 1;
  for (int d = 0; d < ndim; ++d) {
    DLRUN_CHECK_INPUT(payload <= have / dims[d],
                      "truncated idx file {}: its header promises more data (dimension {} is {}) than the {} bytes the "
                      "file has",
                      path, d, dims[d], have);
    payload *= dims[d];
  }
  DLRUN_CHECK_INPUT(have >= payload, "truncated idx file {}: header promises {} data bytes, file has {}", path,
                    payload, have);
  DLRUN_CHECK_INPUT(have == payload, "idx file {} has {} bytes after the {} its header promises", path,
                    have - payload, payload);
  return dims;
}

}  // namespace

std::shared_ptr<Dataset> open_idx(const DataOptions& opts, Split split, const std::string& kind) {
  const std::string root = opts.root_or_default();
  DLRUN_CHECK_INPUT(!root.empty(), "data.name={} needs data.root", kind);
  DLRUN_CHECK_INPUT(std::filesystem::is_directory(root), "data directory does not exist: {}", root);
  std::string prefix = split == Split::kTrain ? "train" : "t10k";
  std::string ipath = find_data_file(root, prefix + "-images-idx3-ubyte");
  std::string lpath = find_data_file(root, prefix + "-labels-idx1-ubyte");

  std::vector<unsigned char> ib = read_file_bytes(ipath);
  std::vector<int64_t> idims = idx_header(ib, ipath, kImagesMagic);
  std::vector<unsigned char> lb = read_file_bytes(lpath);
  std::vector<int64_t> ldims = idx_header(lb, lpath, kLabelsMagic);
  DLRUN_CHECK_INPUT(idims[0] == ldims[0], "count mismatch: {} has {} images but {} has {} labels", ipath, idims[0],
                    lpath, ldims[0]);
  const int64_t n = idims[0], h = idims[1], w = idims[2];

  torch::Tensor images = torch::empty({n, 1, h, w}, torch::kUInt8);  // (N, 1, H, W)
  std::memcpy(images.data_ptr<uint8_t>(), ib.data() + 16, static_cast<size_t>(n * h * w));
  torch::Tensor labels = torch::empty({n}, torch::kLong);  // (N)
  int64_t* lp = labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = lb[8 + i];
    DLRUN_CHECK_INPUT(v < kClasses, "label out of range in {}: sample {} has label {} (expected 0..{})", lpath, i, v,
                      kClasses - 1);
    lp[i] = v;
  }

  DatasetInfo info;
  info.num_classes = kClasses;
  if (kind == "fashion_mnist") {
    info.mean = {0.2860};
    info.std = {0.3530};
    info.class_names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                        "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  } else {
    info.mean = {0.1307};
    info.std = {0.3081};
    for (int c = 0; c < kClasses; ++c) info.class_names.push_back(std::to_string(c));
  }
  auto ds = std::make_shared<MemoryDataset>(images, labels, info);
  ds->limit(split == Split::kTrain ? opts.limit_train : opts.limit_eval);
  return ds;
}

}  // namespace dlrun::data
