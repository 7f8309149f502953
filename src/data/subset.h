// A validation split held out of a training set (data.val_fraction): a fixed set of samples,
// the same on every run, host and rank, whatever run.seed, so a run's validation figures compare
// with another's. The two parts are views of the one opened dataset; neither copies images.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "data/dataset.h"

namespace dlrun::data {

/// Which of `n` samples go to validation: round(n * fraction) of them (at least 1, at most
/// n - 1), drawn by a fixed permutation that depends on n alone. Both lists ascending.
struct Holdout {
  std::vector<int64_t> train, val;
};
Holdout holdout(int64_t n, double fraction);

/// The samples `indices` of `base`, in that order: size, get, encoded reads, and all() (gathered
/// once, for the device-resident mode) as `base` gives them.
std::shared_ptr<Dataset> subset(std::shared_ptr<Dataset> base, std::vector<int64_t> indices);

}  // namespace dlrun::data
