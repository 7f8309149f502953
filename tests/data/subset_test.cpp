// The validation split held out of a training set (src/data/subset.h): the same samples for a
// given size whatever the seed, disjoint and complete, and a view that reads through.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "base/error.h"
#include "data/memory_dataset.h"
#include "data/subset.h"

using namespace dlrun;

TEST_CASE("holdout: round(n x f) samples, disjoint, complete, ascending, fixed for n", "[data][subset]") {
  const auto h = data::holdout(1000, 0.1);
  CHECK(h.val.size() == 100);
  CHECK(h.train.size() == 900);
  CHECK(std::is_sorted(h.val.begin(), h.val.end()));
  CHECK(std::is_sorted(h.train.begin(), h.train.end()));
  std::set<int64_t> all(h.val.begin(), h.val.end());
  all.insert(h.train.begin(), h.train.end());
  CHECK(all.size() == 1000);
  CHECK(*all.rbegin() == 999);
  CHECK(data::holdout(1000, 0.1).val == h.val);  // no seed: the same split on every run
  CHECK(h.val != std::vector<int64_t>(h.train.begin(), h.train.begin() + 100));  // not the first ones
  CHECK(data::holdout(10, 0.01).val.size() == 1);   // at least one
  CHECK(data::holdout(10, 0.99).train.size() == 1);  // at least one left to train on
  CHECK_THROWS_AS(data::holdout(1, 0.5), Error);
}

TEST_CASE("subset: reads the base's samples by index, in memory too", "[data][subset]") {
  auto images = torch::arange(5 * 4, torch::kUInt8).reshape({5, 1, 2, 2});
  auto labels = torch::tensor(std::vector<int64_t>{0, 1, 2, 3, 4});
  data::DatasetInfo info;
  info.num_classes = 5;
  auto base = std::make_shared<data::MemoryDataset>(images, labels, info);
  auto s = data::subset(base, {4, 1});
  CHECK(s->size() == 2);
  CHECK(s->get(0).second == 4);
  CHECK(torch::equal(s->get(1).first, images[1]));
  const auto [x, y] = s->all();
  CHECK(torch::equal(y, torch::tensor(std::vector<int64_t>{4, 1})));
  CHECK(torch::equal(x[0], images[4]));
  CHECK(s->info().num_classes == 5);
}
