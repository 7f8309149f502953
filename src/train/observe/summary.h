// summary.json (docs/design.md, "The run directory"): a pure function of what the run's parts
// measured, so each field and each null is tested on its own (tests/train/summary_test.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "run/state.h"
#include "train/observe/step_meter.h"

namespace dlrun::train {

/// Everything summary.json is made of, gathered from the trainer's parts at the end.
struct SummaryInputs {
  std::string status;                ///< completed | interrupted | failed
  const TrainState* state = nullptr; ///< step, skipped steps, steps lost, preemption, resume
  int64_t steps_per_epoch = 1;
  StepMeter::Totals meter;           ///< loss, samples, data wait, phase times
  nlohmann::json eval;               ///< the last evaluation (of the validation split when there is one), or null
  nlohmann::json test;               ///< the test split's evaluation at the end (with a validation split), or null
  nlohmann::json init;               ///< load_init_weights()'s report, or null
  nlohmann::json averages;           ///< Averages::summary(): "<name>": the average's state and params_sha256, or null
  nlohmann::json best;               ///< Monitor::best_summary(), or null
  nlohmann::json early_stop;         ///< Monitor::early_stop_summary(), or null
  double wall_time_s = 0;            ///< since this process started training
  nlohmann::json checkpointer;       ///< Checkpointer::summary(): checkpoint, checkpoint_errors, remote
  nlohmann::json params_sha256;      ///< hex, or null when it could not be computed
  nlohmann::json peak_cuda_memory_mb;  ///< {allocated, reserved} or null (not on CUDA)
  nlohmann::json fused_kernels;      ///< fused_kernels_report(): {enabled, checks}
  std::string profile_trace;         ///< "" when none was written
  std::string device;
  int world_size = 1;
  std::string version;
  nlohmann::json wall_clock;         ///< Goodput::wall_clock_json() of the run so far
  nlohmann::json cost;               ///< Goodput::cost_json(), null without a price
};

/// summary.json. Null where a value is not known: final_train_loss before any loss was read
/// (or when it is not finite), eval without an evaluation, time_s's forward/backward/optimizer
/// once steps were replayed from a CUDA graph (they would count the eager warm-up alone),
/// peak_cuda_memory_mb off CUDA, profile_trace and checkpoint when there is none, remote
/// without checkpoint.remote.
nlohmann::json run_summary(const SummaryInputs& in);

}  // namespace dlrun::train
