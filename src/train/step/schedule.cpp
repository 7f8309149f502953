// Learning-rate schedules (see schedule.h). Formulas follow PyTorch's StepLR, MultiStepLR,
// CosineAnnealingLR (closed form) and OneCycleLR (anneal_strategy="cos", three_phase=False).
#include "train/step/schedule.h"

#include <algorithm>
#include <cmath>

#include "base/numbers.h"

namespace dlrun::train {
namespace {
double cos_anneal(double start, double end, double pct) { return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1.0); }
}  // namespace

int64_t warmup_steps(const ScheduleSpec& s) {
  return s.opts.warmup_steps + static_cast<int64_t>(std::llround(s.opts.warmup_epochs * static_cast<double>(s.steps_per_epoch)));
}

namespace {
double scheduled(const ScheduleSpec& s, int64_t step);
}  // namespace

double lr_at(const ScheduleSpec& s, int64_t step) {
  const int64_t per_epoch = std::max<int64_t>(1, s.steps_per_epoch);
  const int64_t swa_first = s.swa_start_epoch * per_epoch;
  if (s.swa_start_epoch <= 0 || step < swa_first) return scheduled(s, step);
  const double lr0 = scheduled(s, swa_first);
  const int64_t k = (step - swa_first) / per_epoch;  // SWALR steps taken
  const double t = s.swa_anneal_epochs <= 0
                       ? 1.0
                       : std::min(1.0, static_cast<double>(k) / static_cast<double>(s.swa_anneal_epochs));
  const double a = (1.0 - std::cos(kPi * t)) / 2.0;
  return s.swa_lr * a + lr0 * (1.0 - a);
}

namespace {
double scheduled(const ScheduleSpec& s, int64_t step) {
  const auto& o = s.opts;
  const double base = s.base_lr;
  const int64_t total = std::max<int64_t>(1, s.total_steps);
  if (o.name == SchedName::kOnecycle) {
    const double initial = base / o.div_factor;
    const double min_lr = initial / o.final_div_factor;
    const double up_end = o.pct_start * static_cast<double>(total) - 1.0;
    const double down_end = static_cast<double>(total) - 1.0;
    const double t = static_cast<double>(std::min(step, total - 1));
    if (t <= up_end) return cos_anneal(initial, base, up_end <= 0 ? 1.0 : t / up_end);
    return cos_anneal(base, min_lr, down_end - up_end <= 0 ? 1.0 : (t - up_end) / (down_end - up_end));
  }
  const int64_t warm = warmup_steps(s);
  double factor = 1.0;
  if (warm > 0 && step < warm) factor = static_cast<double>(step + 1) / static_cast<double>(warm);
  const double epoch = static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, s.steps_per_epoch));
  double lr = base;
  if (o.name == SchedName::kStep) {
    lr = base * std::pow(o.gamma, std::floor(epoch / o.step_size));
  } else if (o.name == SchedName::kMultistep) {
    int n = 0;
    for (double m : o.milestones)
      if (epoch >= m) ++n;
    lr = base * std::pow(o.gamma, n);
  } else if (o.name == SchedName::kCosine) {
    const int64_t span = std::max<int64_t>(1, total - warm);
    const double pct = std::clamp(static_cast<double>(step - warm) / static_cast<double>(span), 0.0, 1.0);
    lr = step < warm ? base : o.min_lr + (base - o.min_lr) * 0.5 * (1.0 + std::cos(kPi * pct));
  }
  return lr * factor;
}
}  // namespace

}  // namespace dlrun::train
