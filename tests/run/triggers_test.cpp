// The trigger rules of the training loop, as pure functions: when a metrics line, an
// evaluation and a checkpoint are due, and when training is done.
#include <catch2/catch.hpp>

#include "run/triggers.h"

using namespace dlrun;
using namespace dlrun::train;

namespace {
Boundary after_step(int64_t step, int64_t total = 100, int64_t epoch = 0) { return {step, epoch, total, false}; }
Boundary epoch_end(int64_t step, int64_t epochs_done, int64_t total = 100) { return {step, epochs_done, total, true}; }
}  // namespace

TEST_CASE("logging every N steps and at the last step, never at an epoch end", "[train][triggers]") {
  LogOptions log;
  log.every_steps = 10;
  CHECK(log_due(log, after_step(10)));
  CHECK(log_due(log, after_step(20)));
  CHECK_FALSE(log_due(log, after_step(15)));
  CHECK(log_due(log, after_step(97, 97)));  // the last step, off the grid
  CHECK_FALSE(log_due(log, epoch_end(20, 1)));
  log.every_steps = 1;
  CHECK(log_due(log, after_step(1)));
}

TEST_CASE("evaluation by steps, by epochs, and never twice at one step", "[train][triggers]") {
  TrainOptions t;
  t.eval_every_epochs = 2;
  t.eval_every_steps = 0;
  CHECK_FALSE(eval_due(t, after_step(16), -1));
  CHECK_FALSE(eval_due(t, epoch_end(16, 1), -1));
  CHECK(eval_due(t, epoch_end(32, 2), -1));
  t.eval_every_steps = 16;
  CHECK(eval_due(t, after_step(16), -1));
  CHECK_FALSE(eval_due(t, after_step(8), -1));
  // 16 steps per epoch: the step rule fired at step 32, the epoch rule must not repeat it.
  CHECK_FALSE(eval_due(t, epoch_end(32, 2), 32));
  t.eval_every_epochs = 0;
  t.eval_every_steps = 0;
  CHECK_FALSE(eval_due(t, epoch_end(32, 2), -1));
  t.eval_at_end = true;
  CHECK(final_eval_due(t, 100, 96));
  CHECK_FALSE(final_eval_due(t, 100, 100));
  t.eval_at_end = false;
  CHECK_FALSE(final_eval_due(t, 100, 96));
}

TEST_CASE("checkpoints by steps, by wall clock and at epoch ends", "[train][triggers]") {
  CheckpointOptions c;
  c.every_steps = 5;
  CHECK(save_due(c, after_step(5), 0, -1, c.every_minutes) == SaveReason::kEverySteps);
  CHECK(save_due(c, after_step(7), 0, -1, c.every_minutes) == SaveReason::kNone);
  c.every_minutes = 2;
  CHECK(save_due(c, after_step(7), 1.9, 5, c.every_minutes) == SaveReason::kNone);
  CHECK(save_due(c, after_step(7), 2.0, 5, c.every_minutes) == SaveReason::kEveryMinutes);
  CHECK(save_due(c, after_step(10), 3.0, 5, c.every_minutes) == SaveReason::kEverySteps);  // steps named first
  c.at_epoch_end = true;
  CHECK(save_due(c, epoch_end(16, 1), 0, -1, c.every_minutes) == SaveReason::kEpochEnd);
  c.at_epoch_end = false;
  CHECK(save_due(c, epoch_end(16, 1), 99, -1, c.every_minutes) == SaveReason::kNone);  // the clock is checked after steps
  CHECK(std::string(name_of(SaveReason::kEveryMinutes)) == "every_minutes");
}

TEST_CASE("no periodic save at the last step or twice at one step", "[train][triggers]") {
  CheckpointOptions c;
  c.every_steps = 5;
  c.at_epoch_end = true;
  CHECK(save_due(c, after_step(100, 100), 0, -1, c.every_minutes) == SaveReason::kNone);  // the final save's job
  CHECK(save_due(c, epoch_end(100, 4, 100), 0, -1, c.every_minutes) == SaveReason::kNone);
  CHECK(save_due(c, epoch_end(15, 1), 0, 15, c.every_minutes) == SaveReason::kNone);  // saved right after step 15
  c.at_end = true;
  CHECK(final_save_due(c, 100, 95));
  CHECK_FALSE(final_save_due(c, 100, 100));  // e.g. resumed from the final checkpoint
  c.at_end = false;
  CHECK_FALSE(final_save_due(c, 100, 95));
}

TEST_CASE("training is finished after the last step", "[train][triggers]") {
  CHECK_FALSE(finished(after_step(99, 100)));
  CHECK(finished(after_step(100, 100)));
  CHECK(finished(after_step(0, 0)));
}
