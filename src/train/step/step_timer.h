// Where a step spends its time: forward (with the loss), backward (with DDP's gradient
// all-reduce, which overlaps it, and the wait for its last bucket) and the optimizer (unscale,
// non-finite check, clipping, update). On the CPU the host clock measures each phase (CPU
// kernels run synchronously); on CUDA, events recorded on the current stream do, and are read
// only when the caller has synchronised anyway (the loop reads the loss every log line), so
// timing adds no synchronisation to the steady state. Time spent waiting for the data loader
// is measured by the loop itself (data_wait_s).
#pragma once

#include <torch/torch.h>

#include <array>
#include <memory>

namespace dlrun::train {

enum class Phase { kForward = 0, kBackward = 1, kOptimizer = 2 };
constexpr int kPhases = 3;
using PhaseTimes = std::array<double, kPhases>;  ///< seconds, indexed by Phase

class StepTimer {
 public:
  explicit StepTimer(const torch::Device& device);
  ~StepTimer();
  /// A step begins now.
  void start();
  /// Phase `p` ends now: the time since the previous mark (or start) is p's.
  void end_of(Phase p);
  /// Seconds in each phase over the steps timed since the last take(). On CUDA it waits for
  /// the last recorded event (call it after reading a result of the last step).
  PhaseTimes take();
  /// Off: start() and end_of() do nothing (steps replayed from a CUDA graph are not split).
  void set_enabled(bool on) { enabled_ = on; }

 private:
  struct Events;
  bool enabled_ = true;
  bool cuda_ = false;
  PhaseTimes host_{};  ///< CPU: the sums so far
  double last_ = 0;    ///< CPU: the previous mark
  std::unique_ptr<Events> events_;  ///< CUDA: the marks recorded since the last take()
};

}  // namespace dlrun::train
