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
