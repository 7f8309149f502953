// The dataset registry: config name -> constructor. An unknown name lists the valid ones.
#include <functional>
#include <map>

#include "base/error.h"
#include "config/choices.h"
#include "data/memory_dataset.h"
#include "data/sampler.h"

namespace dlrun::data {

namespace {

using Factory = std::function<std::shared_ptr<Dataset>(const DataOptions&, Split, uint64_t)>;

const std::map<std::string, Factory>& registry() {
  static const std::map<std::string, Factory> r = {
      {"synthetic", [](const DataOptions& o, Split s, uint64_t seed) { return open_synthetic(o, s, seed); }},
      {"fashion_mnist", [](const DataOptions& o, Split s, uint64_t) { return open_idx(o, s, "fashion_mnist"); }},
      {"mnist", [](const DataOptions& o, Split s, uint64_t) { return open_idx(o, s, "mnist"); }},
      {"cifar10", [](const DataOptions& o, Split s, uint64_t) { return open_cifar(o, s, 10); }},
      {"cifar100", [](const DataOptions& o, Split s, uint64_t) { return open_cifar(o, s, 100); }},
      {"image_folder", [](const DataOptions& o, Split s, uint64_t) { return open_image_folder(o, s); }},
      {"webdataset", [](const DataOptions& o, Split s, uint64_t) { return open_webdataset(o, s); }},
  };
  return r;
}

}  // namespace

EncodedSample Dataset::get_encoded(int64_t) const {
  throw Error(ExitCode::kRuntime, "get_encoded() called on a dataset of decoded samples");
}

std::vector<int64_t> Dataset::epoch_order(uint64_t seed, int64_t epoch, bool shuffle) const {
  return epoch_permutation(seed, epoch, size(), shuffle);
}

void set_photo_stats(DatasetInfo& info) {
  if (info.channels == 3) {
    info.mean = {0.485, 0.456, 0.406};
    info.std = {0.229, 0.224, 0.225};
  } else {
    info.mean = {0.449};
    info.std = {0.226};
  }
}

std::vector<std::string> names() {
  std::vector<std::string> out;
  for (const auto& [name, f] : registry()) out.push_back(name);
  return out;
}

namespace {
// data.name takes these names (config/choices.h): the schema lists no dataset of its own.
[[maybe_unused]] const bool kNamesRegistered = config::register_choices("data.name", names);
}  // namespace

std::shared_ptr<Dataset> open(const DataOptions& opts, Split split, uint64_t seed) {
  auto it = registry().find(opts.name);
  if (it == registry().end()) {
    std::string valid;
    for (const auto& n : names()) valid += (valid.empty() ? "" : ", ") + n;
    throw Error(ExitCode::kBadInput, fmt::format("unknown dataset '{}'", opts.name), "valid names: " + valid);
  }
  std::shared_ptr<Dataset> ds = it->second(opts, split, seed);
  const char* which = split == Split::kTrain ? "training" : split == Split::kVal ? "validation" : "evaluation";
  DLRUN_CHECK_INPUT(ds->size() > 0, "the {} set of dataset '{}' is empty", which, opts.name);
  return ds;
}

}  // namespace dlrun::data
