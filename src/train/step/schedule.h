// Learning-rate schedules as pure functions of the optimizer step, so a resumed run needs
// only the step to continue the schedule exactly (no scheduler object state to save).
#pragma once

#include <cstdint>

#include "config/options.h"

namespace dlrun::train {

struct ScheduleSpec {
  SchedOptions opts;
  double base_lr = 0.1;         ///< optim.lr (the peak)
  int64_t total_steps = 1;      ///< optimizer steps of the whole run
  int64_t steps_per_epoch = 1;  ///< for epoch-based settings (warmup_epochs, step_size, milestones)
  /// Stochastic weight averaging (optim.swa_start_epoch > 0): from this epoch (0-based) SWALR
  /// takes over; 0: off.
  int64_t swa_start_epoch = 0;
  double swa_lr = 0.0;
  int64_t swa_anneal_epochs = 10;
};

/// Warmup length in steps: warmup_steps + round(warmup_epochs * steps_per_epoch).
int64_t warmup_steps(const ScheduleSpec& s);

/// Learning rate used for optimizer step `step` (0-based). Linear warmup from lr/W to lr over
/// the first W steps multiplies every schedule except onecycle, which has its own rise
/// (warmup settings are ignored for it, as in PyTorch's OneCycleLR with cos annealing).
///
/// With SWA, from the first step of epoch S = swa_start_epoch the rate is PyTorch's SWALR
/// (anneal_strategy "cos") stepped once per epoch: in epoch S + k it is
/// swa_lr * a + lr0 * (1 - a), a = (1 - cos(pi * min(1, k / A))) / 2 (A = swa_anneal_epochs;
/// A = 0: a = 1), where lr0 is the schedule's own rate at that first step.
double lr_at(const ScheduleSpec& s, int64_t step);

}  // namespace dlrun::train
