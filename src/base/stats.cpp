// Summary statistics (see stats.h).
#include "base/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dlrun {

double median(std::vector<double> values) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double PairedRounds::ratio() const { return median_a() / median_b(); }

double PairedRounds::lo() const {
  double r = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) r = std::min(r, a[i] / b[i]);
  return r;
}

double PairedRounds::hi() const {
  double r = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) r = std::max(r, a[i] / b[i]);
  return r;
}

bool PairedRounds::noisy() const { return a.size() < 3 || hi() - lo() > std::abs(ratio() - 1.0); }

void PairedRounds::accumulate(const PairedRounds& p, double weight) {
  a.resize(std::max(a.size(), p.a.size()), 0.0);
  b.resize(std::max(b.size(), p.b.size()), 0.0);
  for (size_t i = 0; i < p.a.size(); ++i) a[i] += weight * p.a[i];
  for (size_t i = 0; i < p.b.size(); ++i) b[i] += weight * p.b[i];
}

}  // namespace dlrun
