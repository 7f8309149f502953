// The trigger rules (see triggers.h).
#include "run/triggers.h"

namespace dlrun::train {

const char* name_of(SaveReason reason) {
  switch (reason) {
    case SaveReason::kNone: return "none";
    case SaveReason::kEverySteps: return "every_steps";
    case SaveReason::kEveryMinutes: return "every_minutes";
    case SaveReason::kEpochEnd: return "epoch_end";
    case SaveReason::kEnd: return "end";
    case SaveReason::kPreemption: return "preemption";
    case SaveReason::kBest: return "best";
  }
  return "?";
}

bool finished(const Boundary& b) { return b.step >= b.total_steps; }

bool log_due(const LogOptions& log, const Boundary& b) {
  if (b.epoch_end) return false;
  return b.step % log.every_steps == 0 || b.step == b.total_steps;
}

bool eval_due(const TrainOptions& t, const Boundary& b, int64_t last_eval_step) {
  if (b.step == last_eval_step) return false;
  if (b.epoch_end) return t.eval_every_epochs > 0 && b.epoch % t.eval_every_epochs == 0;
  return t.eval_every_steps > 0 && b.step % t.eval_every_steps == 0;
}

bool final_eval_due(const TrainOptions& t, int64_t step, int64_t last_eval_step) {
  return t.eval_at_end && step != last_eval_step;
}

SaveReason save_due(const CheckpointOptions& c, const Boundary& b, double minutes_since_save, int64_t last_saved_step,
                    double every_minutes) {
  if (finished(b) || b.step == last_saved_step) return SaveReason::kNone;
  if (b.epoch_end) return c.at_epoch_end ? SaveReason::kEpochEnd : SaveReason::kNone;
  if (c.every_steps > 0 && b.step % c.every_steps == 0) return SaveReason::kEverySteps;
  if (every_minutes > 0 && minutes_since_save >= every_minutes) return SaveReason::kEveryMinutes;
  return SaveReason::kNone;
}

bool final_save_due(const CheckpointOptions& c, int64_t step, int64_t last_saved_step) {
  return c.at_end && step != last_saved_step;
}

}  // namespace dlrun::train
