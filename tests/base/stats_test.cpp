// The one median of the benchmarks (src/base/stats.h).
#include <catch2/catch.hpp>

#include <cmath>

#include "base/stats.h"

TEST_CASE("median picks the middle element once sorted, the upper one for an even count", "[base][stats]") {
  CHECK(dlrun::median({3.0, 1.0, 2.0}) == 2.0);
  CHECK(dlrun::median({4.0, 1.0, 3.0, 2.0}) == 3.0);
  CHECK(dlrun::median({7.5}) == 7.5);
  CHECK(dlrun::median({1.0, 100.0, 2.0}) == 2.0);  // one slow outlier does not move it
  CHECK(std::isnan(dlrun::median({})));
}

TEST_CASE("paired rounds: a ratio whose rounds spread wider than its effect is noise", "[base][stats]") {
  dlrun::PairedRounds steady;  // b is 2x faster in every round
  steady.a = {2.0, 2.1, 1.9};
  steady.b = {1.0, 1.05, 0.95};
  CHECK(steady.ratio() == Approx(2.0));
  CHECK(steady.lo() == Approx(2.0));
  CHECK(steady.hi() == Approx(2.0));
  CHECK_FALSE(steady.noisy());

  dlrun::PairedRounds noise;  // 1.1x by the medians, but the rounds range from 0.5x to 3x
  noise.a = {1.1, 0.5, 3.0};
  noise.b = {1.0, 1.0, 1.0};
  CHECK(noise.ratio() == Approx(1.1));
  CHECK(noise.lo() == Approx(0.5));
  CHECK(noise.hi() == Approx(3.0));
  CHECK(noise.noisy());

  dlrun::PairedRounds two;  // too few rounds to know the spread at all
  two.a = {2.0, 2.0};
  two.b = {1.0, 1.0};
  CHECK(two.noisy());
}

TEST_CASE("paired rounds accumulate round by round with a weight", "[base][stats]") {
  dlrun::PairedRounds total, x, y;
  x.a = {1.0, 2.0, 3.0};
  x.b = {1.0, 1.0, 1.0};
  y.a = {1.0, 1.0, 1.0};
  y.b = {2.0, 2.0, 2.0};
  total.accumulate(x, 3.0);
  total.accumulate(y, 1.0);
  CHECK(total.a == std::vector<double>{4.0, 7.0, 10.0});
  CHECK(total.b == std::vector<double>{5.0, 5.0, 5.0});
}
