// Step metering: what the steps of a run did, measured without slowing them. The loss, the
// skipped-update flag and the first non-finite step stay on the device and accumulate there;
// the host reads them once per metrics line (log.every_steps), at a save and at the end. Also
// the data wait of the step loop, the phase times (forward, backward, optimizer), samples/s,
// GPU telemetry, and the one warning when the loader is the bottleneck. It reports the "train"
// and "skip" events and hands its totals to summary.json (run_summary).
#pragma once

#include <torch/torch.h>

#include <memory>

#include "config/options.h"
#include "metrics/sink.h"
#include "run/state.h"
#include "train/step/step.h"

namespace dlrun::metrics {
class Nvml;
}

namespace dlrun::dist {
class Replicas;
}

namespace dlrun::train {


class StepMeter {
 public:
  /// `st`: the run's state (its step is read, skipped_steps counted here); `report`: where the
  /// events go (a reporter without sinks on the ranks that do not write).
  StepMeter(const Config& cfg, const torch::Device& device, StepRunner& runner, TrainState& st,
            metrics::Reporter& report, bool leader);
  ~StepMeter();

  /// Training starts now (monotonic seconds): the first log interval begins.
  void begin(double now);
  /// GPU utilisation, memory, power and temperature of this process's GPU in each metrics line
  /// (NVML), when it can be read; logs which.
  void watch_gpu();
  /// The step loop waited `seconds` for a batch.
  void waited(double seconds) { data_wait_s_ += seconds; }
  /// Step `done` (1-based) ran at learning rate `lr` and gave `r` (device tensors, not read).
  void record(const StepResult& r, int64_t done, double lr);
  /// Samples per second since the last metrics line.
  double samples_per_s(double now) const;
  double lr() const { return last_lr_; }

  /// The metrics line of the latest step: one read from the device of the loss, the window's
  /// mean loss and the first non-finite step (and, across ranks, their mean, max and the
  /// slowest loader). Throws (exit 1) when a step was non-finite under train.nonfinite: stop.
  void log(int64_t epoch, dist::Replicas& replicas);
  /// Count the skipped updates the device decided since the last read, and report them.
  void settle_skips();
  /// settle_skips(), then throw (exit 1) if a step so far was non-finite under
  /// train.nonfinite: stop: never save or evaluate weights such a step has spoiled.
  void check_finite();
  /// The latest step's loss, read now (NaN before the first step).
  double read_last_loss();

  struct Totals {
    double final_loss = 0;      ///< NaN when never read
    int64_t samples = 0;        ///< trained by this process
    double data_wait_s = 0;     ///< up to the last metrics line
    PhaseTimes phases{};        ///< forward, backward, optimizer, up to the last metrics line
    bool phases_known = true;   ///< false once steps were replayed from a CUDA graph
  };
  Totals totals() const;

 private:
  void warn_if_loader_bound(double wait_s, double interval_s, int64_t steps);
  [[noreturn]] void fail_nonfinite(int64_t step) const;

  const Config& cfg_;
  torch::Device device_;
  StepRunner& runner_;
  TrainState& st_;
  metrics::Reporter& report_;
  bool leader_;
  std::unique_ptr<metrics::Nvml> nvml_;
  // The loss as the device accumulates it between two reads by the host.
  torch::Tensor last_;       ///< float64: the loss of the latest step
  torch::Tensor sum_;        ///< float64: sum over the window's applied steps
  int64_t steps_ = 0;        ///< steps in the window, applied or skipped
  int64_t skipped_ = 0;      ///< of those, skipped steps already counted (settle_skips)
  torch::Tensor pending_;    ///< float64: skipped steps not yet counted on the host (undefined: none can be)
  torch::Tensor first_bad_;  ///< int64: first non-finite step no one has read yet (-1: none)
  double last_lr_ = 0, last_log_mono_ = 0;
  double final_loss_;
  int64_t samples_since_log_ = 0, samples_ = 0, logs_ = 0;
  double data_wait_s_ = 0, data_wait_total_s_ = 0;
  PhaseTimes phase_total_s_{};
  bool told_loader_bound_ = false;
  double window_wait_s_ = 0, window_s_ = 0;  ///< the loader-bound warning's window so far
  int64_t window_steps_ = 0;
};

}  // namespace dlrun::train
