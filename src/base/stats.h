// Summary statistics of measurements. The benchmarks (`dlrun bench ckpt|memory|kernels`) report
// the median of repeated timings, which one slow outlier (a page fault, another process) does
// not move; this is the one definition of it, so they all pick the same element.
#pragma once

#include <vector>

namespace dlrun {

/// The median of `values`: the element at index size/2 once sorted (for an even count, the
/// upper of the two middle ones, not their mean). NaN when `values` is empty.
double median(std::vector<double> values);

/// Two measurements taken in alternating rounds (a, b, a, b, ...) and what their ratio a/b (the
/// speedup of b over a) is worth: its median over the medians, and the spread of the rounds'
/// own ratios. A ratio whose spread exceeds its effect (max - min > |ratio - 1|) is noise: the
/// rounds do not agree well enough to tell the two apart, and a benchmark flags it.
struct PairedRounds {
  std::vector<double> a, b;  ///< seconds of each round
  double median_a() const { return median(a); }
  double median_b() const { return median(b); }
  double ratio() const;   ///< median(a) / median(b)
  double lo() const;      ///< smallest a[i] / b[i]
  double hi() const;      ///< largest a[i] / b[i]
  bool noisy() const;     ///< hi - lo > |ratio - 1|, or fewer than 3 rounds
  /// Add `weight` times `p`'s rounds to these, round by round (a network's total per round:
  /// each shape's time times its count).
  void accumulate(const PairedRounds& p, double weight);
};

}  // namespace dlrun
