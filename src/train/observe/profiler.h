// profile.*: LibTorch's Kineto profiler around a window of optimizer steps, written as a
// Chrome trace (open it at https://ui.perfetto.dev or chrome://tracing, or point TensorBoard's
// profiler plugin at the directory). CPU operators always; CUDA kernels and memcpys when the
// run trains on a GPU. Each step is a "ProfilerStep#N" range and its phases "dlrun::forward",
// "dlrun::backward", "dlrun::optimizer"; the wait for the loader is "dlrun::data_wait".
#pragma once

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <optional>
#include <string>

#include "config/options.h"

namespace dlrun::train {

class StepProfiler {
 public:
  /// `dir`: where the trace goes; `rank`: part of its name.
  StepProfiler(const ProfileOptions& o, const torch::Device& device, std::string dir, int rank);
  ~StepProfiler();
  /// Before the first step of a run (or segment) that starts with `first` steps done and ends
  /// at `total`: a window the run cannot reach (profile.start_step >= total) is moved to the
  /// run's last profile.steps steps, with a warning; one that lies before `first` (a resumed
  /// segment) is skipped, saying so. A profile asked for is never silently absent.
  void plan(int64_t first, int64_t total);
  /// Before the step that will make `done + 1` steps: starts tracing at profile.start_step;
  /// while tracing, opens the step's "ProfilerStep#N" range.
  void before_step(int64_t done);
  /// After a step, `done` steps now: closes its range; stops and writes the trace when the
  /// window is full.
  void after_step(int64_t done);
  /// The run ends (or is interrupted) while tracing: writes the steps traced so far.
  void finish(int64_t done);
  /// The trace written, "" before.
  const std::string& written() const { return written_; }

 private:
  void stop(int64_t done);
  std::string step_name_;                       ///< the open range's name (RecordFunction keeps a view)
  std::optional<at::RecordFunction> step_range_;
  ProfileOptions o_;
  bool cuda_;
  std::string dir_;
  int rank_;
  bool active_ = false;
  bool done_ = false;  ///< traced, or the profiler could not start: once per run
  int64_t first_ = 0;
  int64_t start_ = 0;  ///< the window's start: profile.start_step, or where plan() moved it
  std::string written_;
};

}  // namespace dlrun::train
