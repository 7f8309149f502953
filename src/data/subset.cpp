// Held-out validation split (see subset.h).
#include "data/subset.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "base/error.h"

namespace dlrun::data {

namespace {

class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<Dataset> base, std::vector<int64_t> indices)
      : base_(std::move(base)), indices_(std::move(indices)) {
    auto [images, labels] = base_->all();
    if (images.defined()) {
      const auto idx = torch::tensor(indices_, torch::kInt64);
      images_ = images.index_select(0, idx).contiguous();
      labels_ = labels.index_select(0, idx).contiguous();
    }
  }
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  std::pair<torch::Tensor, int64_t> get(int64_t index) const override { return base_->get(indices_.at(index)); }
  DatasetInfo info() const override { return base_->info(); }
  std::pair<torch::Tensor, torch::Tensor> all() const override { return {images_, labels_}; }
  bool encoded() const override { return base_->encoded(); }
  EncodedSample get_encoded(int64_t index) const override { return base_->get_encoded(indices_.at(index)); }

 private:
  std::shared_ptr<Dataset> base_;
  std::vector<int64_t> indices_;
  torch::Tensor images_, labels_;  ///< undefined unless base_ is held in memory
};

}  // namespace

Holdout holdout(int64_t n, double fraction) {
  DLRUN_CHECK_INPUT(n >= 2, "data.val_fraction: the training set has {} sample(s), too few to hold any out", n);
  const int64_t k = std::clamp<int64_t>(std::llround(static_cast<double>(n) * fraction), 1, n - 1);
  // A fixed seed (not run.seed): the split must not move when the seed does. Fisher-Yates with
  // std::mt19937_64, whose sequence the C++ standard fixes, and an explicit bounded draw (the
  // standard distributions are not portable across library implementations).
  std::mt19937_64 gen(0x76616c5f73706c69ULL ^ static_cast<uint64_t>(n));
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t j = gen() % static_cast<uint64_t>(i + 1);  // (the bias of % is below 2^-40 here)
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  Holdout h;
  h.val.assign(order.begin(), order.begin() + k);
  h.train.assign(order.begin() + k, order.end());
  std::sort(h.val.begin(), h.val.end());
  std::sort(h.train.begin(), h.train.end());
  return h;
}

std::shared_ptr<Dataset> subset(std::shared_ptr<Dataset> base, std::vector<int64_t> indices) {
  return std::make_shared<Subset>(std::move(base), std::move(indices));
}

}  // namespace dlrun::data
