// Datasets: a registry keyed by config name. A dataset yields uint8 images (C, H, W) and
// int64 labels; normalization and augmentation happen in the transforms (transforms.h).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "config/options.h"

namespace dlrun::data {

struct DatasetInfo {
  int64_t channels = 1;
  int64_t height = 0, width = 0;   ///< native size (0 when images vary: image_folder)
  int64_t num_classes = 0;
  std::vector<double> mean, std;   ///< per-channel defaults for `normalize`, in [0,1] units
  std::vector<std::string> class_names;
};

/// One sample as its image file's bytes, for datasets of JPEG/PNG files: the loader decodes it
/// knowing the sample's crop, so that a JPEG is decoded at a reduced DCT scale and only over the
/// rows and columns the crop reads (image_decode.h).
struct EncodedSample {
  std::vector<uint8_t> bytes;
  std::string name;  ///< for messages: the file, or "shard.tar:key.jpg"
  int64_t label = 0;
};

/// Random-access dataset. Implementations must be safe to call get() from several
/// threads at once.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  /// Image (C, H, W) uint8 and its label.
  virtual std::pair<torch::Tensor, int64_t> get(int64_t index) const = 0;
  virtual DatasetInfo info() const = 0;
  /// For sets held in memory: all images (N, C, H, W) uint8 and labels (N) int64, used by
  /// the device-resident mode. Undefined tensors when the set is not in memory.
  virtual std::pair<torch::Tensor, torch::Tensor> all() const { return {}; }
  /// True when samples are read with get_encoded() (image files) rather than get().
  virtual bool encoded() const { return false; }
  /// Sample `index` undecoded; the channel count to decode to is info().channels.
  virtual EncodedSample get_encoded(int64_t index) const;
  /// The order in which epoch `epoch` visits the samples: a permutation of [0, size()) that
  /// depends on (seed, epoch) and the dataset only. Default: epoch_permutation (sampler.h).
  /// Sharded sets shuffle in blocks of shards, and start fetching in this order.
  virtual std::vector<int64_t> epoch_order(uint64_t seed, int64_t epoch, bool shuffle) const;
};

/// kEval: the evaluation split (`dlrun eval`; the test split once a validation split exists).
/// kVal: image_folder's root/val when root/test holds its test split (image_folder_val_split).
enum class Split { kTrain, kEval, kVal };

/// Whether an image_folder at `root` keeps its test split apart (root/test beside root/val):
/// then root/val is the validation split and root/test the evaluation split.
bool image_folder_has_test(const std::string& root);

/// Open the dataset named by opts.name for a split. Corrupt, truncated or mismatched files
/// (wrong magic, counts that disagree, label out of range, undecodable image) throw
/// dlrun::Error with exit 2 naming the file. Applies data.limit_train / limit_eval.
std::shared_ptr<Dataset> open(const DataOptions& opts, Split split, uint64_t seed);

/// Names accepted by open().
std::vector<std::string> names();

}  // namespace dlrun::data
