// Epoch permutations and the micro-batch arithmetic of the sampling contract (loader.h).
#include "data/sampler.h"

#include <algorithm>
#include <numeric>

#include "data/sample_rng.h"

namespace dlrun::data {

std::vector<int64_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t n, bool shuffle) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  if (!shuffle) return perm;
  SampleRng rng(sample_key(seed, epoch, -1, kStreamPermutation));
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(i + 1));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  return perm;
}

int64_t SamplerGeometry::tasks(int64_t first_step) const {
  if (train) return std::max<int64_t>(0, steps() - first_step) * accum;
  int64_t left = steps() - first_step;  // global eval batches from first_step on
  if (left <= rank) return 0;
  return (left - rank + world - 1) / world;
}

void SamplerGeometry::task(int64_t first_step, int64_t t, int64_t* begin, int64_t* end, int64_t* step,
                           int* micro_index) const {
  if (train) {
    const int64_t b = micro();
    *step = first_step + t / accum;
    *micro_index = static_cast<int>(t % accum);
    const int64_t group = *micro_index * world + rank;
    *begin = *step * batch + (interleave ? group : group * b);
    *end = *begin + b * pitch();
  } else {
    *step = first_step + rank + t * world;
    *micro_index = 0;
    *begin = *step * batch;
    *end = std::min(n, *begin + batch);
  }
}

}  // namespace dlrun::data
