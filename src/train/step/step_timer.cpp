// The step's phase timer (see step_timer.h).
#include "train/step/step_timer.h"

#include <vector>

#include "base/clock.h"

#ifdef DLRUN_TORCH_HAS_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace dlrun::train {

#ifdef DLRUN_TORCH_HAS_CUDA
struct StepTimer::Events {
  // pool[i] is recorded at mark i; phase[i] is the phase that mark i ends (-1: a step start).
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> pool;
  std::vector<int> phase;
  size_t used = 0;
  int device = 0;

  void mark(int p) {
    if (used == pool.size()) pool.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
    if (phase.size() <= used) phase.resize(used + 1);
    pool[used]->record(c10::cuda::getCurrentCUDAStream(device));
    phase[used] = p;
    ++used;
  }
};
#else
struct StepTimer::Events {};
#endif

StepTimer::StepTimer(const torch::Device& device) : cuda_(device.is_cuda()) {
#ifdef DLRUN_TORCH_HAS_CUDA
  if (cuda_) {
    events_ = std::make_unique<Events>();
    events_->device = device.has_index() ? device.index() : 0;
  }
#endif
}

StepTimer::~StepTimer() = default;

void StepTimer::start() {
  if (!enabled_) return;
#ifdef DLRUN_TORCH_HAS_CUDA
  if (cuda_) return events_->mark(-1);
#endif
  last_ = mono_now();
}

void StepTimer::end_of(Phase p) {
  if (!enabled_) return;
#ifdef DLRUN_TORCH_HAS_CUDA
  if (cuda_) return events_->mark(static_cast<int>(p));
#endif
  const double now = mono_now();
  host_[static_cast<int>(p)] += now - last_;
  last_ = now;
}

PhaseTimes StepTimer::take() {
  PhaseTimes out{};
#ifdef DLRUN_TORCH_HAS_CUDA
  if (cuda_) {
    Events& e = *events_;
    if (e.used > 0) e.pool[e.used - 1]->synchronize();
    for (size_t i = 1; i < e.used; ++i)
      if (e.phase[i] >= 0) out[e.phase[i]] += e.pool[i - 1]->elapsed_time(*e.pool[i]) / 1000.0;
    e.used = 0;
    return out;
  }
#endif
  out = host_;
  host_ = {};
  return out;
}

}  // namespace dlrun::train
