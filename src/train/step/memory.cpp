// One training step's memory and time (see memory.h).
#include "train/step/memory.h"

#include <torch/torch.h>

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "base/stats.h"
#include "config/validate.h"
#include "models/recompute.h"
#include "train/step/device.h"
#include "train/step/optim.h"

#ifdef DLRUN_TORCH_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace dlrun::train {
namespace {

// The CPU allocator, counting: every tensor allocation made through it adds its bytes, every
// release takes them back, and the high-water mark is kept — the CPU counterpart of the CUDA
// caching allocator's allocated-bytes peak. (The process's resident set is no measure of
// this: glibc keeps freed blocks, so churn looks like growth.) Installed once, for good.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  static CountingCpuAllocator& install() {
    static CountingCpuAllocator* a = [] {
      auto* c = new CountingCpuAllocator(c10::GetCPUAllocator());
      c->make_current();
      c10::SetCPUAllocator(c, /*priority=*/100);
      return c;
    }();
    return *a;
  }
  // "Simple" data pointers (data == context, one raw deleter), as the default CPU allocator
  // hands out: some of LibTorch allocates through raw_allocate(), which needs them.
  c10::DataPtr allocate(size_t n) override {
    void* data = n ? base_->raw_allocate(n) : nullptr;
    if (data) {
      std::lock_guard<std::mutex> lock(mu_);
      sizes_[data] = n;
      current_ += static_cast<int64_t>(n);
      peak_ = std::max(peak_, current_);
    }
    return {data, data, &CountingCpuAllocator::release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &CountingCpuAllocator::release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  /// Start a measurement: the peak from now on, over what is allocated now.
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    peak_ = current_;
  }
  int64_t current() {
    std::lock_guard<std::mutex> lock(mu_);
    return current_;
  }
  int64_t peak() {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }

 private:
  explicit CountingCpuAllocator(c10::Allocator* base) : base_(base) {
    TORCH_CHECK(base_->raw_deleter() != nullptr, "the CPU allocator has no raw deleter to count through");
  }
  static void release(void* p) {
    if (p == nullptr) return;
    auto* self = instance_;
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      auto it = self->sizes_.find(p);
      if (it != self->sizes_.end()) {
        self->current_ -= static_cast<int64_t>(it->second);
        self->sizes_.erase(it);
      }
    }
    self->base_->raw_deallocate(p);
  }
  c10::Allocator* base_;
  std::mutex mu_;
  std::unordered_map<void*, size_t> sizes_;
  int64_t current_ = 0, peak_ = 0;
  static inline CountingCpuAllocator* instance_ = nullptr;

 public:
  CountingCpuAllocator(const CountingCpuAllocator&) = delete;
  CountingCpuAllocator& operator=(const CountingCpuAllocator&) = delete;
  void make_current() { instance_ = this; }
};

}  // namespace

StepProbe::StepProbe(const StepMemoryOptions& o) {
  cfg_.model.name = o.model;
  cfg_.model.in_channels = 3;
  cfg_.model.num_classes = 1000;
  cfg_.model.channels_last = o.channels_last;
  cfg_.model.activation_checkpointing = o.checkpointing;
  cfg_.model.image_size = o.image_size;  // the transformers are built for it (ViT: 224 unless said)
  cfg_.amp.enabled = o.amp.has_value();
  if (cfg_.amp.enabled) cfg_.amp.dtype = *o.amp;
  cfg_.optim.lr = 0.01;
  cfg_.optim.momentum = 0.9;
  cfg_.run.device = o.device;
  cfg_.data.name = "synthetic";
  cfg_.data.synthetic_shape = {3, o.image_size, o.image_size};
  cfg_.data.batch_size = o.batch;
  config::validate(cfg_);  // the rules train applies (checkpointing stages on a ResNet only, ...)
  device_ = place(cfg_).device;  // (and those of the device it resolves to)
  model_ = models::build(cfg_.model, 0, o.image_size);
  model_->to(device_);
  model_->train();
  optim_ = build_optimizer(cfg_.optim, *model_);
  runner_ = std::make_unique<StepRunner>(cfg_.train, cfg_.amp, *model_, *optim_, device_);
}

data::Batch StepProbe::batch(int64_t n, int64_t side) const {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  data::Batch b;
  b.x = torch::randn({n, 3, side, side}, gen).to(device_);
  b.y = torch::randint(0, 1000, {n}, gen).to(device_);
  return b;
}

double StepProbe::step(const data::Batch& b) {
  const double t0 = mono_now();
  auto r = runner_->run({b}, 0.01);
  (void)r.loss.item<double>();
  return mono_now() - t0;
}

bool is_out_of_memory(const c10::Error& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return true;
  const std::string what = e.what_without_backtrace();
  for (const char* sign : {"out of memory", "unable to find an engine", "ALLOC_FAILED", "not enough memory"})
    if (what.find(sign) != std::string::npos) return true;
  return false;
}

void release_after_out_of_memory(torch::optim::Optimizer& optim, const torch::Device& device) {
  optim.zero_grad(true);
#ifdef DLRUN_TORCH_HAS_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#else
  (void)device;
#endif
}

#ifdef DLRUN_TORCH_HAS_CUDA
bool StepProbe::fits(int64_t n, int64_t side) {
  try {
    step(batch(n, side));
    return true;
  } catch (const c10::Error& e) {
    if (!is_out_of_memory(e)) throw;
    release_after_out_of_memory(*optim_, device_);
    return false;
  }
}

int64_t largest_batch(StepProbe& probe, int64_t start, int64_t side) {
  struct NoAutotuning {
    const bool was = at::globalContext().benchmarkCuDNN();
    NoAutotuning() { at::globalContext().setBenchmarkCuDNN(false); }
    ~NoAutotuning() { at::globalContext().setBenchmarkCuDNN(was); }
  } no_autotuning;
  int64_t ok = 0, bad = 0;
  for (int64_t n = start; n <= (int64_t{1} << 20); n *= 2) {
    if (!probe.fits(n, side)) {
      bad = n;
      break;
    }
    ok = n;
  }
  if (bad == 0) return ok;
  while (bad - ok > (ok < 64 ? 1 : 8)) {
    const int64_t mid = (ok + bad) / 2;
    (probe.fits(mid, side) ? ok : bad) = mid;
  }
  return ok;
}
#endif

StepMemory measure_step_memory(const StepMemoryOptions& o) {
  StepProbe probe(o);
  StepMemory m;
  m.device = probe.device();
  m.cuda = m.device.is_cuda();
  m.peak_measure = m.cuda ? "CUDA caching allocator: allocated bytes" : "CPU allocator: allocated bytes";
  data::Batch current = probe.batch(o.batch, o.image_size);
  // A first step makes the optimizer state and (CUDA) tunes cuDNN; the measured one is the next.
  m.first_step_s = probe.step(current);
  double before = 0;
  CountingCpuAllocator* counting = m.cuda ? nullptr : &CountingCpuAllocator::install();
  if (counting) {
    counting->reset_peak();
    before = static_cast<double>(counting->current());
  }
#ifdef DLRUN_TORCH_HAS_CUDA
  namespace alloc = c10::cuda::CUDACachingAllocator;
  const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  if (m.cuda) {
    torch::cuda::synchronize();
    alloc::resetPeakStats(m.device.index());
    before = static_cast<double>(alloc::getDeviceStats(m.device.index()).allocated_bytes[agg].current);
  }
#endif
  const double measured_s = probe.step(current);
  if (counting) m.peak_bytes = static_cast<double>(counting->peak()) - before;
#ifdef DLRUN_TORCH_HAS_CUDA
  if (m.cuda) m.peak_bytes = static_cast<double>(alloc::getDeviceStats(m.device.index()).allocated_bytes[agg].peak) - before;
#endif
  std::vector<double> times;
  for (int i = 0; i < o.repeat; ++i) times.push_back(probe.step(current));
  m.step_s = times.empty() ? measured_s : median(times);
  m.segments_recomputed = static_cast<uint64_t>(models::recomputations());
  current = {};
#ifdef DLRUN_TORCH_HAS_CUDA
  if (o.max_batch && m.cuda) m.largest_batch = largest_batch(probe, o.batch, o.image_size);
#endif
  return m;
}

}  // namespace dlrun::train
