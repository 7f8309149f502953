// Summary statistics of measurements. The benchmarks (`dlrun bench ckpt|memory|kernels`) report
// the median of repeated timings, which one slow outlier (a page fault, another process) does
// not move; this is the one definition of it, so they all pick the same element.
#pragma once

#include <vector>

namespace dlrun {

/// The median of `values`: the element at index size/2 once sorted (for an even count, the
/// upper of the two middle ones, not their mean). NaN when `values` is empty.
double median(std::vector<double> values);

}  // namespace dlrun
