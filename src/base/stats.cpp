// Summary statistics (see stats.h).
#include "base/stats.h"

#include <algorithm>
#include <limits>

namespace dlrun {

double median(std::vector<double> values) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace dlrun
